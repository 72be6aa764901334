// tests/kernels/test_adamw.cpp — CPU AdamW and sum-of-squares twins: a hand-computed first
// step, decay only on [0, n_decay), a later step against the fp64 formula of kernels/adamw.h,
// sum_squares exactly and at scale, and bitwise determinism across thread counts.
#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/adamw.h"

namespace sftdp::test {
namespace {

TEST(AdamW, HandComputedFirstStep) {
  // t = 1 from m = v = 0: m̂ = g, v̂ = g², so the step is lr·(g/(|g|+eps) + wd·p).
  std::vector<float> p = {1.f, 1.f}, m = {0.f, 0.f}, v = {0.f, 0.f};
  const std::vector<float> g = {0.5f, -0.25f};  // grad_scale 2 → g = 1, −0.5
  cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), 2, /*n_decay=*/1, /*lr=*/0.1f,
                    /*b1=*/0.9f, /*b2=*/0.999f, /*eps=*/1e-8f, /*wd=*/0.01f, /*t=*/1,
                    /*grad_scale=*/2.f);
  EXPECT_NEAR(p[0], 1.0 - 0.1 * (1.0 + 0.01), 1e-6);  // decayed: 0.899
  EXPECT_NEAR(p[1], 1.0 + 0.1, 1e-6);                 // not decayed: 1.1
  EXPECT_NEAR(m[0], 0.1, 1e-7);
  EXPECT_NEAR(m[1], -0.05, 1e-7);
  EXPECT_NEAR(v[0], 0.001, 2e-8);  // 1 − 0.999f is 0.00099998713 in float
  EXPECT_NEAR(v[1], 0.00025, 5e-9);
}

// With zero gradients and moments only the decoupled decay moves p: p·(1 − lr·wd) below
// n_decay, unchanged from n_decay on. n_decay falls inside a work block on purpose.
TEST(AdamW, DecayOnlyBelowNDecay) {
  const size_t N = 3 * 8192 + 5, n_decay = 10001;
  const auto p0 = uniform(N, 201);
  std::vector<float> p = p0, m(N, 0.f), v(N, 0.f), g(N, 0.f);
  cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), N, n_decay, 0.5f, 0.9f, 0.95f, 1e-8f,
                    0.1f, 3, 1.f);
  for (size_t i = 0; i < N; ++i) {
    const float expected = i < n_decay ? p0[i] - 0.5f * (0.1f * p0[i]) : p0[i];
    ASSERT_NEAR(p[i], expected, 1e-7) << "i " << i;
  }
}

TEST(AdamW, LaterStepMatchesFp64Formula) {
  const size_t N = 1000, n_decay = 600;
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-6f, wd = 0.1f, scale = 0.125f;
  const int t = 7;
  const auto p0 = uniform(N, 211), g = uniform(N, 212), m0 = uniform(N, 213, -0.1f, 0.1f);
  const auto v0 = uniform(N, 214, 0.f, 0.01f);
  std::vector<float> p = p0, m = m0, v = v0;
  cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), N, n_decay, lr, b1, b2, eps, wd, t, scale);
  std::vector<double> p_ref(N), m_ref(N), v_ref(N);
  for (size_t i = 0; i < N; ++i) {
    const double gi = double(g[i]) * scale;
    m_ref[i] = b1 * double(m0[i]) + (1 - double(b1)) * gi;
    v_ref[i] = b2 * double(v0[i]) + (1 - double(b2)) * gi * gi;
    const double m_hat = m_ref[i] / (1 - std::pow(double(b1), t));
    const double v_hat = v_ref[i] / (1 - std::pow(double(b2), t));
    const double decay = i < n_decay ? wd : 0.0;
    p_ref[i] = p0[i] - lr * (m_hat / (std::sqrt(v_hat) + eps) + decay * p0[i]);
  }
  EXPECT_TRUE(allclose(to_f64(m), m_ref, 1e-7, 1e-5));
  EXPECT_TRUE(allclose(to_f64(v), v_ref, 1e-9, 1e-5));
  EXPECT_TRUE(allclose(to_f64(p), p_ref, 1e-6, 1e-5));
}

TEST(SumSquares, HandCaseAndOverwrite) {
  const std::vector<float> x = {1.f, -2.f, 3.f};
  float out = 123.f;  // overwritten, not accumulated
  cpu::sum_squares(&out, x.data(), x.size());
  EXPECT_EQ(out, 14.f);
}

TEST(SumSquares, MatchesFp64AtScale) {
  const size_t N = 1'000'003;
  const auto x = uniform(N, 221);
  double ref = 0;
  for (float xi : x) ref += double(xi) * xi;
  float out = 0.f;
  cpu::sum_squares(&out, x.data(), N);
  EXPECT_NEAR(out, ref, ref * 1e-7);  // only the final rounding to float
}

TEST(AdamW, UpdateAndSumSquaresAreBitwiseIdenticalForOneAndTwoThreads) {
  const size_t N = 5 * 8192 + 77;
  const auto p0 = uniform(N, 231), g = uniform(N, 232);
  auto run = [&](int threads) {
    std::vector<float> p = p0, m(N, 0.f), v(N, 0.f), norm(1);
    with_threads(threads, [&] {
      for (int t = 1; t <= 3; ++t)
        cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), N, N / 3, 1e-3f, 0.9f, 0.999f,
                          1e-8f, 0.1f, t, 0.7f);
      cpu::sum_squares(norm.data(), p.data(), N);
    });
    p.insert(p.end(), m.begin(), m.end());
    p.insert(p.end(), v.begin(), v.end());
    p.push_back(norm[0]);
    return p;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
