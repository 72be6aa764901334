// tests/kernels/test_swiglu.cpp — CPU SwiGLU twin: a hand case, the forward against an fp64
// reference (including far tails of the gate), the backward (dinp overwritten) against fp64
// finite differences and, in the tails, against the fp64 analytic derivative, and bitwise
// determinism across thread counts.
#include <cmath>
#include <cstddef>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/swiglu.h"

namespace sftdp::test {
namespace {

// out[n,i] = silu(gate)·up, gate = inp[n,i], up = inp[n,F+i].
std::vector<double> swiglu_ref(const std::vector<double>& inp, int N, int F) {
  std::vector<double> out(size_t(N) * F);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < F; ++i) {
      const double g = inp[size_t(n) * 2 * F + i], u = inp[size_t(n) * 2 * F + F + i];
      out[size_t(n) * F + i] = g / (1.0 + std::exp(-g)) * u;
    }
  return out;
}

TEST(SwiGlu, HandCase) {
  const std::vector<float> inp = {0, 2, 3, 5};  // N = 1, F = 2: gates (0, 2), ups (3, 5)
  std::vector<float> out(2);
  cpu::swiglu_fwd(out.data(), inp.data(), 1, 2);
  EXPECT_TRUE(allclose(to_f64(out), {0, 2 / (1 + std::exp(-2.0)) * 5}, 1e-6, 1e-6));
}

TEST(SwiGlu, ForwardMatchesFp64Reference) {
  const int N = 7, F = 131;
  auto inp = uniform(size_t(N) * 2 * F, 11, -6.f, 6.f);
  inp[0] = -90.f, inp[1] = -30.f, inp[2] = 30.f, inp[3] = 90.f;  // far tails of the gate
  std::vector<float> out(size_t(N) * F);
  cpu::swiglu_fwd(out.data(), inp.data(), N, F);
  EXPECT_TRUE(allclose(to_f64(out), swiglu_ref(to_f64(inp), N, F), 1e-6, 1e-5));
}

TEST(SwiGlu, BackwardOverwritesDinpAndMatchesFiniteDifferences) {
  const int N = 3, F = 10;
  const auto inp = uniform(size_t(N) * 2 * F, 21, -4.f, 4.f), dout = uniform(size_t(N) * F, 22);
  std::vector<float> dinp(inp.size(), 9.f);  // garbage: it is overwritten
  cpu::swiglu_bwd(dinp.data(), inp.data(), dout.data(), N, F);
  auto x64 = to_f64(inp);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, swiglu_ref(x64, N, F)); };
  EXPECT_TRUE(allclose(to_f64(dinp), central_diff(x64, loss), 1e-6, 1e-5));
}

// d silu/dg = σ(g)·(1 + g·(1 − σ(g))): in the far negative tail both derivatives are tiny
// (down to ~1e-33) and must match fp64 relatively, not only absolutely; in the positive tail
// they saturate.
TEST(SwiGlu, BackwardKeepsRelativeAccuracyInTheTails) {
  const std::vector<float> gates = {-80.f, -40.f, -15.f, -1e-3f, 0.f, 1e-3f, 15.f, 40.f, 80.f};
  const int F = static_cast<int>(gates.size());
  std::vector<float> inp(2 * F, 1.f), dout(F, 1.f), dinp(2 * F);
  for (int i = 0; i < F; ++i) inp[i] = gates[i];
  cpu::swiglu_bwd(dinp.data(), inp.data(), dout.data(), 1, F);
  std::vector<double> dgate(F), dgate_ref(F), dup(F), dup_ref(F);
  for (int i = 0; i < F; ++i) {
    const double g = gates[i], s = 1.0 / (1.0 + std::exp(-g));
    dgate_ref[i] = s * (1.0 + g / (1.0 + std::exp(g)));
    dup_ref[i] = g * s;
    dgate[i] = dinp[i], dup[i] = dinp[F + i];
  }
  EXPECT_TRUE(allclose(dgate, dgate_ref, 1e-30, 1e-5));
  EXPECT_TRUE(allclose(dup, dup_ref, 1e-30, 1e-5));
}

TEST(SwiGlu, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int N = 256, F = 344;
  const auto inp = uniform(size_t(N) * 2 * F, 31, -5.f, 5.f), dout = uniform(size_t(N) * F, 32);
  auto run = [&](int threads) {
    std::vector<float> out(size_t(N) * F), dinp(inp.size());
    with_threads(threads, [&] {
      cpu::swiglu_fwd(out.data(), inp.data(), N, F);
      cpu::swiglu_bwd(dinp.data(), inp.data(), dout.data(), N, F);
    });
    out.insert(out.end(), dinp.begin(), dinp.end());
    return out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
