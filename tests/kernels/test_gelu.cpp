// tests/kernels/test_gelu.cpp — CPU GELU twin (tanh form): known values, saturation, the
// forward against fp64 std::tanh, the backward against fp64 finite differences, and bitwise
// determinism across thread counts at a ragged size.
#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/gelu.h"

namespace sftdp::test {
namespace {

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, KnownValuesAndSaturation) {
  const std::vector<float> x = {0.f, 1.f, -1.f, 2.f, 30.f, -30.f, 1e-3f};
  std::vector<float> y(x.size());
  cpu::gelu_fwd(y.data(), x.data(), x.size());
  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715x³))) worked out for x = ±1, 2
  EXPECT_EQ(y[0], 0.f);
  EXPECT_NEAR(y[1], 0.8411920, 1e-6);
  EXPECT_NEAR(y[2], -0.1588080, 1e-6);
  EXPECT_NEAR(y[3], 1.9545977, 1e-6);
  EXPECT_EQ(y[4], 30.f);
  EXPECT_EQ(y[5], 0.f);  // −0 compares equal
  EXPECT_NEAR(y[6], gelu_ref(1e-3), 1e-9);
}

TEST(Gelu, ForwardMatchesFp64Reference) {
  const size_t N = 10007;
  const auto x = uniform(N, 121, -8.f, 8.f);
  std::vector<float> y(N);
  cpu::gelu_fwd(y.data(), x.data(), N);
  std::vector<double> ref(N);
  for (size_t i = 0; i < N; ++i) ref[i] = gelu_ref(x[i]);
  EXPECT_TRUE(allclose(to_f64(y), ref, 1e-6, 1e-6));
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const size_t N = 333;
  const auto x = uniform(N, 131, -5.f, 5.f), dout = uniform(N, 132);
  std::vector<float> dinp(N, 1e30f);  // overwritten, not accumulated
  cpu::gelu_bwd(dinp.data(), x.data(), dout.data(), N);
  auto x64 = to_f64(x);
  const auto dout64 = to_f64(dout);
  auto loss = [&] {
    double s = 0;
    for (size_t i = 0; i < N; ++i) s += dout64[i] * gelu_ref(x64[i]);
    return s;
  };
  EXPECT_TRUE(allclose(to_f64(dinp), central_diff(x64, loss), 1e-6, 1e-5));
}

TEST(Gelu, IsBitwiseIdenticalForOneAndTwoThreads) {
  const size_t N = 3 * 4096 + 17;  // not a multiple of the work block
  const auto x = uniform(N, 141, -6.f, 6.f), dout = uniform(N, 142);
  auto run = [&](int threads) {
    std::vector<float> y(N), dinp(N);
    with_threads(threads, [&] {
      cpu::gelu_fwd(y.data(), x.data(), N);
      cpu::gelu_bwd(dinp.data(), x.data(), dout.data(), N);
    });
    y.insert(y.end(), dinp.begin(), dinp.end());
    return y;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
