// tests/kernels/test_cuda_gather.cpp — the CUDA row gather/scatter (kernels/gather.h) against the
// CPU twin through the two Ops tables: bit for bit (pure copies), gather outputs poisoned with NaN
// before each launch, scatter onto random rows that must survive where unlisted, ragged sizes and
// an index list in shuffled order, two CUDA runs bitwise equal. Skips without a GPU.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

struct Shape {
  int N, C, n;
};
std::string test_name(const Shape& s) { return shape_name({{"N", s.N}, {"C", s.C}, {"n", s.n}}); }
void PrintTo(const Shape& s, std::ostream* os) { *os << test_name(s); }
class CudaGather : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaGather, GatherAndScatterMatchCpuBitForBit) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto [N_, C_, n_] = GetParam();
  // named copies: lambdas below capture them (clang 14 cannot capture structured bindings)
  const auto N = N_;
  const auto C = C_;
  const auto n = n_;
  std::vector<int32_t> idx(N);
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937 rng(11);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(n);
  const auto inp = uniform(size_t(N) * C, 12), packed = uniform(size_t(n) * C, 13);
  const auto before = uniform(size_t(N) * C, 14);
  std::vector<float> g(size_t(n) * C), s = before;
  cpu_ops().gather_rows(g.data(), inp.data(), idx.data(), n, C);
  cpu_ops().scatter_rows(s.data(), packed.data(), idx.data(), n, C);

  DeviceBuffer<float> d_inp(*ops, inp), d_packed(*ops, packed), d_g(*ops, g.size()), d_s(*ops, s.size());
  DeviceBuffer<int32_t> d_idx(*ops, idx);
  const auto got = run_twice_same_bits([&] {
    d_g.poison();
    d_s.upload(before);
    ops->gather_rows(d_g.get(), d_inp.get(), d_idx.get(), n, C);
    ops->scatter_rows(d_s.get(), d_packed.get(), d_idx.get(), n, C);
    return std::vector<std::vector<float>>{d_g.download(), d_s.download()};
  });
  EXPECT_TRUE(bitwise_equal(got[0], g)) << "gather_rows";
  EXPECT_TRUE(bitwise_equal(got[1], s)) << "scatter_rows";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGather,
                         ::testing::Values(Shape{1, 1, 1}, Shape{97, 131, 40}, Shape{256, 768, 102},
                                           Shape{4096, 257, 4096}),
                         NameFromParam());

}  // namespace
}  // namespace sftdp::test
