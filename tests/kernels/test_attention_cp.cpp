// tests/kernels/test_attention_cp.cpp — context-parallel attention's CPU twin (kernels/attention.h,
// SPEC §1 "Context parallelism"): a sequence cut into 2N chunks, rank i holding chunks i and 2N−1−i
// with the keys and values of every position gathered, gives each of its rows the output and
// log-sum-exp of the whole sequence's attention at that position: against the fp64 reference
// (≤ 1e-6 of the largest value) for N = 1, 2, 3, 4, GQA and multi-head, with packed segments
// crossing chunk boundaries and without; every output element is written.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/attention.h"
#include "kernels/attention_reference.h"

namespace sftdp::test {
namespace {

using Shape = AttentionShape;

// Rank `rank` of a group of n: its global positions (chunks rank and 2n−1−rank of T/(2n)).
std::vector<int32_t> positions_of(int T, int n, int rank) {
  const int c = T / (2 * n);
  std::vector<int32_t> pos;
  for (int chunk : {rank, 2 * n - 1 - rank})
    for (int i = 0; i < c; ++i) pos.push_back(chunk * c + i);
  return pos;
}

void expect_ranks_match_the_whole(const Shape& s, int n, bool segments) {
  SCOPED_TRACE(shape_str(s) + " N=" + std::to_string(n) + (segments ? " segments" : ""));
  const auto qkv = uniform(qkv_size(s), 11 + n, -2.f, 2.f);
  std::vector<int32_t> seg;
  if (segments)  // segments of 5 positions: they cross every chunk boundary of these shapes
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t) seg.push_back((t + 2 * b) / 5);
  const Ref ref = reference(to_f64(qkv), {}, segments ? seg.data() : nullptr, s);
  double scale = 0;
  for (double v : ref.out) scale = std::max(scale, std::abs(v));
  for (double v : ref.lse) scale = std::max(scale, std::abs(v));

  const int QKV = (s.NH + 2 * s.KVH) * s.HS, KV = 2 * s.KVH * s.HS;
  std::vector<float> kv(size_t(s.B) * s.T * KV);  // what the all-gather gives every rank
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int i = 0; i < KV; ++i)
        kv[(size_t(b) * s.T + t) * KV + i] = qkv[(size_t(b) * s.T + t) * QKV + s.NH * s.HS + i];
  for (int rank = 0; rank < n; ++rank) {
    const auto pos = positions_of(s.T, n, rank);
    const int Tq = static_cast<int>(pos.size());
    std::vector<float> local(size_t(s.B) * Tq * QKV);
    std::vector<int32_t> seg_q;
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t) {
        std::copy_n(&qkv[(size_t(b) * s.T + pos[t]) * QKV], QKV, &local[(size_t(b) * Tq + t) * QKV]);
        if (segments) seg_q.push_back(seg[size_t(b) * s.T + pos[t]]);
      }
    std::vector<float> out(size_t(s.B) * Tq * s.NH * s.HS, NAN), lse(size_t(s.B) * s.NH * Tq, NAN);
    cpu::attention_cp_fwd(out.data(), lse.data(), local.data(), kv.data(), pos.data(),
                          segments ? seg_q.data() : nullptr, segments ? seg.data() : nullptr, s.B, Tq, s.T, s.NH,
                          s.KVH, s.HS);
    double worst = 0;
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t)
        for (int h = 0; h < s.NH; ++h) {
          for (int i = 0; i < s.HS; ++i) {
            const double want = ref.out[((size_t(b) * s.T + pos[t]) * s.NH + h) * s.HS + i];
            worst = std::max(worst, std::abs(out[((size_t(b) * Tq + t) * s.NH + h) * s.HS + i] - want));
          }
          const double want = ref.lse[(size_t(b) * s.NH + h) * s.T + pos[t]];
          worst = std::max(worst, std::abs(lse[(size_t(b) * s.NH + h) * Tq + t] - want));
        }
    EXPECT_LE(worst, 1e-6 * scale) << "rank " << rank;  // NaN (an element not written) fails too
  }
}

TEST(AttentionCp, EachRanksRowsAreTheWholeSequencesAttention) {
  for (int n : {1, 2, 3, 4})
    for (bool segments : {false, true}) {
      expect_ranks_match_the_whole({2, 24, 4, 2, 8}, n, segments);   // GQA
      expect_ranks_match_the_whole({1, 48, 3, 3, 16}, n, segments);  // multi-head
    }
}

}  // namespace
}  // namespace sftdp::test
