// tests/kernels/test_residual.cpp — CPU residual twin: exact sums, including in place
// (out aliasing an input, as the model does for the residual stream).
#include <vector>

#include "common/test_util.h"
#include "kernels/residual.h"

namespace sftdp::test {
namespace {

TEST(Residual, AddsElementwiseExactly) {
  const size_t N = 4099;  // ragged: not a multiple of any vector width
  const auto a = uniform(N, 41), b = uniform(N, 42);
  std::vector<float> out(N), ref(N);
  for (size_t i = 0; i < N; ++i) ref[i] = a[i] + b[i];
  cpu::residual_fwd(out.data(), a.data(), b.data(), N);
  EXPECT_TRUE(bitwise_equal(out, ref));
}

TEST(Residual, InPlaceOverEitherInput) {
  const size_t N = 1000;
  const auto a = uniform(N, 43), b = uniform(N, 44);
  std::vector<float> ref(N);
  for (size_t i = 0; i < N; ++i) ref[i] = a[i] + b[i];
  std::vector<float> x = a;
  cpu::residual_fwd(x.data(), x.data(), b.data(), N);
  EXPECT_TRUE(bitwise_equal(x, ref));
  x = b;
  cpu::residual_fwd(x.data(), a.data(), x.data(), N);
  EXPECT_TRUE(bitwise_equal(x, ref));
}

}  // namespace
}  // namespace sftdp::test
