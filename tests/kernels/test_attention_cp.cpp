// tests/kernels/test_attention_cp.cpp — context-parallel attention's CPU twin (kernels/attention.h,
// SPEC §1 "Context parallelism"): a sequence cut into 2N chunks, rank i holding chunks i and 2N−1−i
// with the keys and values of every position gathered, gives each of its rows the output and
// log-sum-exp of the whole sequence's attention at that position, and in backward the gradient of
// its queries, while the ranks' key/value gradients sum to the whole one: against the fp64
// reference (≤ 1e-6 of the largest value, gradients 2e-6) for N = 1, 2, 3, 4, GQA and multi-head,
// with packed segments crossing chunk boundaries and without; every output element is written, the
// k/v heads of the rank's dqkv are left alone; the bits do not depend on the thread count. The bf16 table's twin on
// tensor-core head sizes (the GPU kernels' tiles and roundings): each rank's out, lse and dq bit for bit the
// whole-row twin's rows at its positions (chunks on and off the 64-row tiles, segments crossing them, GQA), the ranks'
// dk/dv summing to the whole-row twin's within fp32 summation order.
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
  const auto dout = uniform(out_size(s), 23 + n);
  const Ref ref = reference(to_f64(qkv), to_f64(dout), segments ? seg.data() : nullptr, s);
  double scale = 0, gscale = 0;
  for (double v : ref.out) scale = std::max(scale, std::abs(v));
  for (double v : ref.lse) scale = std::max(scale, std::abs(v));
  for (double v : ref.dqkv) gscale = std::max(gscale, std::abs(v));

  const int QKV = (s.NH + 2 * s.KVH) * s.HS, KV = 2 * s.KVH * s.HS;
  std::vector<float> kv(size_t(s.B) * s.T * KV);  // what the all-gather gives every rank
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int i = 0; i < KV; ++i)
        kv[(size_t(b) * s.T + t) * KV + i] = qkv[(size_t(b) * s.T + t) * QKV + s.NH * s.HS + i];
  std::vector<double> dkv_sum(kv.size(), 0.0);  // what the reduce-scatter sums
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

    const int OC = s.NH * s.HS;
    std::vector<float> dout_local(size_t(s.B) * Tq * OC), dqkv(local.size(), 9.f), dkv(kv.size(), NAN);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t)
        std::copy_n(&dout[(size_t(b) * s.T + pos[t]) * OC], OC, &dout_local[(size_t(b) * Tq + t) * OC]);
    cpu::attention_cp_bwd(dqkv.data(), dkv.data(), dout_local.data(), local.data(), kv.data(), out.data(), lse.data(),
                          pos.data(), segments ? seg_q.data() : nullptr, segments ? seg.data() : nullptr, s.B, Tq, s.T,
                          s.NH, s.KVH, s.HS);
    double dq_worst = 0;
    bool kv_heads_untouched = true;
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t)
        for (int i = 0; i < QKV; ++i) {
          const float got = dqkv[(size_t(b) * Tq + t) * QKV + i];
          if (i >= OC) kv_heads_untouched &= got == 9.f;
          else dq_worst = std::max(dq_worst, std::abs(got - ref.dqkv[(size_t(b) * s.T + pos[t]) * QKV + i]));
        }
    EXPECT_LE(dq_worst, 2e-6 * gscale) << "rank " << rank;
    EXPECT_TRUE(kv_heads_untouched) << "rank " << rank;
    for (size_t i = 0; i < dkv.size(); ++i) dkv_sum[i] += dkv[i];
  }
  double dkv_worst = 0;
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int i = 0; i < KV; ++i)
        dkv_worst = std::max(dkv_worst, std::abs(dkv_sum[(size_t(b) * s.T + t) * KV + i] -
                                                 ref.dqkv[(size_t(b) * s.T + t) * QKV + s.NH * s.HS + i]));
  EXPECT_LE(dkv_worst, 2e-6 * gscale);
}

TEST(AttentionCp, EachRanksRowsAreTheWholeSequencesAttention) {
  for (int n : {1, 2, 3, 4})
    for (bool segments : {false, true}) {
      expect_ranks_match_the_whole({2, 24, 4, 2, 8}, n, segments);   // GQA
      expect_ranks_match_the_whole({1, 48, 3, 3, 16}, n, segments);  // multi-head
    }
  // Across the CPU twin's tiles: 520 query rows (5 tiles of 128), 1040 keys (chunks of 512).
  for (bool segments : {false, true}) expect_ranks_match_the_whole({1, 1040, 2, 1, 16}, 2, segments);
}

TEST(AttentionCp, BitsDoNotDependOnTheThreadCount) {
  const Shape s{2, 32, 4, 2, 8};
  const auto qkv = uniform(qkv_size(s), 5, -2.f, 2.f), dout = uniform(out_size(s), 6);
  const int KV = 2 * s.KVH * s.HS, QKV = (s.NH + 2 * s.KVH) * s.HS;
  std::vector<float> kv(size_t(s.B) * s.T * KV);
  for (size_t r = 0; r < size_t(s.B) * s.T; ++r) std::copy_n(&qkv[r * QKV + s.NH * s.HS], KV, &kv[r * KV]);
  const auto pos = positions_of(s.T, 2, 1);
  const int Tq = static_cast<int>(pos.size());
  std::vector<float> local(size_t(s.B) * Tq * QKV), dl(size_t(s.B) * Tq * s.NH * s.HS);
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < Tq; ++t) {
      std::copy_n(&qkv[(size_t(b) * s.T + pos[t]) * QKV], QKV, &local[(size_t(b) * Tq + t) * QKV]);
      std::copy_n(&dout[(size_t(b) * s.T + pos[t]) * s.NH * s.HS], s.NH * s.HS, &dl[(size_t(b) * Tq + t) * s.NH * s.HS]);
    }
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) with_threads(threads, [&] {
    std::vector<float> out(dl.size()), lse(size_t(s.B) * s.NH * Tq), dqkv(local.size()), dkv(kv.size());
    cpu::attention_cp_fwd(out.data(), lse.data(), local.data(), kv.data(), pos.data(), nullptr, nullptr, s.B, Tq, s.T,
                          s.NH, s.KVH, s.HS);
    cpu::attention_cp_bwd(dqkv.data(), dkv.data(), dl.data(), local.data(), kv.data(), out.data(), lse.data(),
                          pos.data(), nullptr, nullptr, s.B, Tq, s.T, s.NH, s.KVH, s.HS);
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    out.insert(out.end(), dkv.begin(), dkv.end());
    runs.push_back(out);
  });
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// The bf16 table's twin on tensor-core head sizes against its whole-row twin (cpu::attention_{fwd,bwd}_bf16).
void expect_tc_ranks_are_the_whole_rows(const Shape& s, int n, bool segments) {
  SCOPED_TRACE(shape_str(s) + " N=" + std::to_string(n) + (segments ? " segments" : ""));
  ASSERT_TRUE(attention_bf16::tensor_cores(s.HS));
  const auto qkv = uniform(qkv_size(s), 41 + n, -2.f, 2.f), dout = uniform(out_size(s), 43 + n);
  std::vector<int32_t> seg;
  if (segments)  // segments of 37, and id 0 again at the end: a key tile far back that meets the last query tiles
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t) seg.push_back(t >= s.T - 20 ? 0 : (t + 5 * b) / 37);
  const int32_t* sg = segments ? seg.data() : nullptr;
  const int QKV = (s.NH + 2 * s.KVH) * s.HS, KV = 2 * s.KVH * s.HS, OC = s.NH * s.HS;
  std::vector<float> out(out_size(s)), lse(size_t(s.B) * s.NH * s.T), dqkv(qkv_size(s));
  cpu::attention_fwd_bf16(out.data(), lse.data(), qkv.data(), sg, s.B, s.T, s.NH, s.KVH, s.HS);
  cpu::attention_bwd_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), sg, s.B, s.T, s.NH, s.KVH,
                          s.HS);
  std::vector<float> kv(size_t(s.B) * s.T * KV);
  for (size_t r = 0; r < size_t(s.B) * s.T; ++r) std::copy_n(&qkv[r * QKV + OC], KV, &kv[r * KV]);
  std::vector<double> dkv_sum(kv.size(), 0.0);
  for (int rank = 0; rank < n; ++rank) {
    const auto pos = positions_of(s.T, n, rank);
    const int Tq = static_cast<int>(pos.size());
    // This rank's rows of every input, and the whole-row results there (what it must reproduce bit for bit).
    std::vector<float> q(size_t(s.B) * Tq * QKV), d(size_t(s.B) * Tq * OC), want_out(d.size()), want_dq;
    std::vector<float> want_lse(size_t(s.B) * s.NH * Tq);
    std::vector<int32_t> seg_q;
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t) {
        const size_t from = size_t(b) * s.T + pos[t], to = size_t(b) * Tq + t;
        std::copy_n(&qkv[from * QKV], QKV, &q[to * QKV]);
        std::copy_n(&dout[from * OC], OC, &d[to * OC]);
        std::copy_n(&out[from * OC], OC, &want_out[to * OC]);
        want_dq.insert(want_dq.end(), &dqkv[from * QKV], &dqkv[from * QKV] + OC);
        for (int h = 0; h < s.NH; ++h)
          want_lse[(size_t(b) * s.NH + h) * Tq + t] = lse[(size_t(b) * s.NH + h) * s.T + pos[t]];
        if (segments) seg_q.push_back(seg[from]);
      }
    const int32_t* sq = segments ? seg_q.data() : nullptr;
    std::vector<float> got_out(d.size(), NAN), got_lse(want_lse.size(), NAN), got_dqkv(q.size(), 9.f);
    std::vector<float> dkv(kv.size(), NAN);
    cpu::attention_cp_fwd_bf16(got_out.data(), got_lse.data(), q.data(), kv.data(), pos.data(), sq, sg, s.B, Tq, s.T,
                               s.NH, s.KVH, s.HS);
    cpu::attention_cp_bwd_bf16(got_dqkv.data(), dkv.data(), d.data(), q.data(), kv.data(), got_out.data(),
                               got_lse.data(), pos.data(), sq, sg, s.B, Tq, s.T, s.NH, s.KVH, s.HS);
    EXPECT_TRUE(bitwise_equal(got_out, want_out)) << "out, rank " << rank;
    EXPECT_TRUE(bitwise_equal(got_lse, want_lse)) << "lse, rank " << rank;
    std::vector<float> got_dq, kv_heads;
    for (size_t r = 0; r < size_t(s.B) * Tq; ++r) {
      got_dq.insert(got_dq.end(), &got_dqkv[r * QKV], &got_dqkv[r * QKV] + OC);
      kv_heads.insert(kv_heads.end(), &got_dqkv[r * QKV] + OC, &got_dqkv[r * QKV] + QKV);
    }
    EXPECT_TRUE(bitwise_equal(got_dq, want_dq)) << "dq, rank " << rank;
    EXPECT_TRUE(bitwise_equal(kv_heads, std::vector<float>(kv_heads.size(), 9.f))) << "k/v heads written, rank " << rank;
    for (size_t i = 0; i < dkv.size(); ++i) dkv_sum[i] += dkv[i];
  }
  double worst = 0, scale = 0;
  for (size_t r = 0; r < size_t(s.B) * s.T; ++r)
    for (int i = 0; i < KV; ++i) {
      const double want = dqkv[r * QKV + OC + i];
      scale = std::max(scale, std::abs(want));
      worst = std::max(worst, std::abs(dkv_sum[r * KV + i] - want));  // NaN (an element not written) fails
    }
  EXPECT_LE(worst, 1e-5 * scale) << "the ranks' dk/dv summed against the whole rows'";
}

TEST(AttentionCpBf16, TensorCoreTwinGivesEachRankTheWholeRowTwinsRows) {
  for (bool segments : {false, true}) {
    expect_tc_ranks_are_the_whole_rows({1, 256, 4, 2, 16}, 2, segments);  // chunks of 64: whole tiles, GQA
    expect_tc_ranks_are_the_whole_rows({1, 200, 2, 1, 32}, 2, segments);  // chunks of 50: tiles across chunks
    expect_tc_ranks_are_the_whole_rows({1, 192, 2, 2, 16}, 3, segments);  // multi-head, 3 ranks of chunks of 32
  }
}

}  // namespace
}  // namespace sftdp::test
