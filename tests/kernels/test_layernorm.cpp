// tests/kernels/test_layernorm.cpp — CPU LayerNorm twin: a hand case, the forward against an
// fp64 reference, the backward (dinp, dweight, dbias, all +=) against fp64 finite differences,
// and bitwise determinism across thread counts.
#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/layernorm.h"

namespace sftdp::test {
namespace {

std::vector<double> layernorm_ref(const std::vector<double>& inp, const std::vector<double>& w,
                                  const std::vector<double>& b, int N, int C) {
  std::vector<double> out(inp.size());
  for (int n = 0; n < N; ++n) {
    const double* x = &inp[size_t(n) * C];
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / C + 1e-5);
    for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = (x[c] - mean) * rstd * w[c] + b[c];
  }
  return out;
}

TEST(LayerNorm, HandCase) {
  const std::vector<float> inp = {1, 2, 3, 4}, w = {1, 1, 2, 1}, b = {0, 0, 0, 0.5f};
  std::vector<float> out(4), mean(1), rstd(1);
  cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), 1, 4);
  const double s = 1.0 / std::sqrt(1.25 + 1e-5);  // mean 2.5, variance 1.25
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(rstd[0], s, 1e-6);
  EXPECT_TRUE(allclose(to_f64(out), {-1.5 * s, -0.5 * s, 2 * 0.5 * s, 1.5 * s + 0.5}, 1e-6, 1e-6));
}

TEST(LayerNorm, ForwardMatchesFp64Reference) {
  const int N = 9, C = 257;
  auto inp = uniform(N * C, 11, -3.f, 5.f);  // non-zero mean
  const auto w = uniform(C, 12), b = uniform(C, 13);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  EXPECT_TRUE(allclose(to_f64(out), layernorm_ref(to_f64(inp), to_f64(w), to_f64(b), N, C), 1e-5, 1e-5));
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int N = 4, C = 9;
  const auto inp = uniform(N * C, 21, -2.f, 3.f), w = uniform(C, 22), b = uniform(C, 23);
  const auto dout = uniform(N * C, 24);
  const auto dinp0 = uniform(N * C, 25), dw0 = uniform(C, 26), db0 = uniform(C, 27);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  cpu::layernorm_bwd(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                     mean.data(), rstd.data(), N, C);

  auto x64 = to_f64(inp), w64 = to_f64(w), b64 = to_f64(b);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, layernorm_ref(x64, w64, b64, N, C)); };
  EXPECT_TRUE(allclose(added(dinp, dinp0), central_diff(x64, loss), 1e-5, 1e-4));
  EXPECT_TRUE(allclose(added(dw, dw0), central_diff(w64, loss), 1e-5, 1e-4));
  EXPECT_TRUE(allclose(added(db, db0), central_diff(b64, loss), 1e-5, 1e-4));
}

TEST(LayerNorm, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int N = 256, C = 256;
  const auto inp = uniform(N * C, 31), w = uniform(C, 32), b = uniform(C, 33), dout = uniform(N * C, 34);
  auto run = [&](int threads) {
    std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.1f), dw(C, 0.2f), db(C, 0.3f);
    with_threads(threads, [&] {
      cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
      cpu::layernorm_bwd(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
    });
    for (auto* v : {&mean, &rstd, &dinp, &dw, &db}) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
