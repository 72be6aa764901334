// tests/kernels/test_gather.cpp — CPU row gather/scatter twin (kernels/gather.h) against plain
// element loops: the listed rows copied bit for bit in list order, scatter leaving every unlisted
// row untouched, n = 0 a no-op, and scatter ∘ gather putting the listed rows back in place.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "kernels/gather.h"

namespace sftdp::test {
namespace {

// k distinct row indices out of N in a shuffled order (the model's lists are ascending; the
// kernels must not care).
std::vector<int32_t> distinct_rows(int N, int k, uint32_t seed) {
  std::vector<int32_t> all(N);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(k);
  return all;
}

TEST(Gather, CopiesListedRowsInListOrder) {
  const int N = 97, C = 131, n = 40;  // ragged sizes
  const auto inp = uniform(size_t(N) * C, 1);
  const auto idx = distinct_rows(N, n, 2);
  std::vector<float> out(size_t(n) * C, -7.f), ref(out.size());
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) ref[size_t(i) * C + c] = inp[size_t(idx[i]) * C + c];
  cpu::gather_rows(out.data(), inp.data(), idx.data(), n, C);
  EXPECT_TRUE(bitwise_equal(out, ref));
}

TEST(Scatter, WritesListedRowsAndLeavesTheOthers) {
  const int N = 97, C = 131, n = 40;
  const auto inp = uniform(size_t(n) * C, 3);
  const auto idx = distinct_rows(N, n, 4);
  const auto before = uniform(size_t(N) * C, 5);  // unlisted rows must keep these bits
  std::vector<float> out = before, ref = before;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) ref[size_t(idx[i]) * C + c] = inp[size_t(i) * C + c];
  cpu::scatter_rows(out.data(), inp.data(), idx.data(), n, C);
  EXPECT_TRUE(bitwise_equal(out, ref));
}

TEST(GatherScatter, EmptyListTouchesNothing) {
  const int N = 5, C = 3;
  const auto before = uniform(size_t(N) * C, 6);
  std::vector<float> out = before;
  const int32_t idx[1] = {0};
  cpu::scatter_rows(out.data(), before.data(), idx, 0, C);
  cpu::gather_rows(out.data(), before.data(), idx, 0, C);
  EXPECT_TRUE(bitwise_equal(out, before));
}

TEST(GatherScatter, ScatterOfGatherRestoresListedRows) {
  const int N = 64, C = 768, n = 64;  // every row: a permutation round trip
  const auto x = uniform(size_t(N) * C, 7);
  const auto idx = distinct_rows(N, n, 8);
  std::vector<float> packed(size_t(n) * C), back(size_t(N) * C, 0.f);
  cpu::gather_rows(packed.data(), x.data(), idx.data(), n, C);
  cpu::scatter_rows(back.data(), packed.data(), idx.data(), n, C);
  EXPECT_TRUE(bitwise_equal(back, x));
}

}  // namespace
}  // namespace sftdp::test
