// tests/kernels/test_kv_cache.cpp — the CPU twins of kernels/kv_cache.h against the trainer's own
// attention (cpu::attention_fwd, kernels/attention.h) on the whole sequence: a prompt appended and
// attended in one call (prefill, Tq = all), then in pieces (a prefill of some tokens, then one token
// at a time, and a chunk of several at p > 0), gives every row attention_fwd gives it, for multi-head
// (GPT-2: KVH = NH) and grouped-query heads (KVH < NH, HS 8 and 64). kv_append writes exactly rows
// [p, p + Tq) of the cache with the k and v heads (the other rows keep their poison).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "kernels/attention.h"
#include "kernels/kv_cache.h"
#include "test_cuda_util.h"  // shape_name

namespace sftdp::test {
namespace {

struct Heads {
  int NH, KVH, HS;
};

class KvCache : public ::testing::TestWithParam<Heads> {};

// The rows of the whole sequence, fed in pieces of the given sizes.
std::vector<float> attend_in_pieces(const std::vector<float>& qkv, const std::vector<int>& pieces, int T,
                                    const Heads& h) {
  const size_t QKV = size_t(h.NH + 2 * h.KVH) * h.HS, KV = size_t(h.KVH) * h.HS, A = size_t(h.NH) * h.HS;
  std::vector<float> k(T * KV), v(T * KV), out(T * A, std::numeric_limits<float>::quiet_NaN());
  int p = 0;
  for (int n : pieces) {
    cpu::kv_append(k.data(), v.data(), qkv.data() + p * QKV, p, n, h.NH, h.KVH, h.HS);
    cpu::kv_attention_fwd(out.data() + p * A, qkv.data() + p * QKV, k.data(), v.data(), p, n, h.NH, h.KVH, h.HS);
    p += n;
  }
  EXPECT_EQ(p, T);
  return out;
}

TEST_P(KvCache, AttentionOverTheCacheIsTheTrainersAttention) {
  const Heads h = GetParam();
  const int T = 11;
  const size_t QKV = size_t(h.NH + 2 * h.KVH) * h.HS, A = size_t(h.NH) * h.HS;
  const auto qkv = uniform(T * QKV, 7, -2.f, 2.f);
  std::vector<float> want(T * A), lse(size_t(h.NH) * T);
  cpu::attention_fwd(want.data(), lse.data(), qkv.data(), nullptr, 1, T, h.NH, h.KVH, h.HS);
  for (const auto& pieces : std::vector<std::vector<int>>{{11}, {4, 1, 1, 1, 1, 1, 1, 1}, {1, 6, 3, 1}}) {
    const auto got = attend_in_pieces(qkv, pieces, T, h);
    EXPECT_TRUE(allclose(got, want, 1e-6, 1e-5)) << "pieces of " << pieces.size();
  }
}

TEST_P(KvCache, AppendWritesOnlyItsRows) {
  const Heads h = GetParam();
  const int maxT = 9, p = 3, Tq = 4;
  const size_t QKV = size_t(h.NH + 2 * h.KVH) * h.HS, KV = size_t(h.KVH) * h.HS;
  const auto qkv = uniform(Tq * QKV, 9);
  std::vector<float> k(maxT * KV, -7.f), v(maxT * KV, -7.f);
  cpu::kv_append(k.data(), v.data(), qkv.data(), p, Tq, h.NH, h.KVH, h.HS);
  for (int j = 0; j < maxT; ++j)
    for (size_t c = 0; c < KV; ++c) {
      const bool mine = j >= p && j < p + Tq;
      const float* row = mine ? qkv.data() + (j - p) * QKV : nullptr;
      EXPECT_EQ(k[j * KV + c], mine ? row[h.NH * h.HS + c] : -7.f) << "k row " << j;
      EXPECT_EQ(v[j * KV + c], mine ? row[(h.NH + h.KVH) * h.HS + c] : -7.f) << "v row " << j;
    }
}

INSTANTIATE_TEST_SUITE_P(Heads, KvCache,
                         ::testing::Values(Heads{4, 4, 8}, Heads{4, 2, 8}, Heads{6, 2, 64}, Heads{3, 1, 5}),
                         [](const auto& info) {
                           return shape_name({{"NH", info.param.NH}, {"KVH", info.param.KVH}, {"HS", info.param.HS}});
                         });

}  // namespace
}  // namespace sftdp::test
