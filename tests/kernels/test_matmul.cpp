// tests/kernels/test_matmul.cpp — CPU matmul twin: the naive reference on a hand case, the
// OpenBLAS path against it at ragged shapes (with and without bias), and the backward
// (dinp =, dweight +=, dbias +=) against fp64 finite differences and fp64 formulas.
#include <array>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/matmul.h"

namespace sftdp::test {
namespace {

// fp64 out = inp·wᵀ + b.
std::vector<double> matmul_ref(const std::vector<double>& inp, const std::vector<double>& w,
                               const std::vector<double>* b, int N, int IC, int OC) {
  std::vector<double> out(size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (int i = 0; i < IC; ++i) acc += inp[size_t(n) * IC + i] * w[size_t(o) * IC + i];
      out[size_t(n) * OC + o] = acc;
    }
  return out;
}

TEST(Matmul, NaiveHandCase) {
  const std::vector<float> inp = {1, 2, 3, 4, 5, 6};  // (2,3)
  const std::vector<float> w = {1, 0, -1, 2, 1, 0};   // (2,3): rows are output channels
  const std::vector<float> b = {0.5f, -1};
  std::vector<float> out(4);
  cpu::matmul_fwd_naive(out.data(), inp.data(), w.data(), b.data(), 2, 3, 2);
  EXPECT_TRUE(bitwise_equal(out, {-1.5f, 3, -1.5f, 12}));
  cpu::matmul_fwd(out.data(), inp.data(), w.data(), b.data(), 2, 3, 2);
  EXPECT_TRUE(bitwise_equal(out, {-1.5f, 3, -1.5f, 12}));
}

class MatmulShapes : public ::testing::TestWithParam<std::array<int, 3>> {};  // {N, IC, OC}

TEST_P(MatmulShapes, ForwardMatchesNaive) {
  const auto [N, IC, OC] = GetParam();
  const auto inp = uniform(N * IC, 51), w = uniform(OC * IC, 52), b = uniform(OC, 53);
  for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> got(N * OC, 7.f), ref(N * OC);
    cpu::matmul_fwd(got.data(), inp.data(), w.data(), bias, N, IC, OC);
    cpu::matmul_fwd_naive(ref.data(), inp.data(), w.data(), bias, N, IC, OC);
    EXPECT_TRUE(allclose(got, ref, 1e-5, 1e-4)) << (bias ? "with bias" : "no bias");
  }
}

// Backward against the fp64 formulas dinp = dout·W, dweight += doutᵀ·inp, dbias += Σ_n dout.
TEST_P(MatmulShapes, BackwardMatchesFp64Formulas) {
  const auto [N, IC, OC] = GetParam();
  const auto inp = uniform(N * IC, 54), w = uniform(OC * IC, 55), dout = uniform(N * OC, 56);
  const auto dw0 = uniform(OC * IC, 57), db0 = uniform(OC, 58);
  std::vector<float> dinp(N * IC, 1e30f), dw = dw0, db = db0;  // dinp garbage: must be overwritten
  cpu::matmul_bwd(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  std::vector<double> dinp_ref(size_t(N) * IC, 0.0), dw_ref(size_t(OC) * IC, 0.0), db_ref(OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      const double g = dout[size_t(n) * OC + o];
      db_ref[o] += g;
      for (int i = 0; i < IC; ++i) {
        dinp_ref[size_t(n) * IC + i] += g * w[size_t(o) * IC + i];
        dw_ref[size_t(o) * IC + i] += g * inp[size_t(n) * IC + i];
      }
    }
  const double tol = 1e-6 * std::max(N, std::max(IC, OC));  // fp32 sums of that many terms
  EXPECT_TRUE(allclose(to_f64(dinp), dinp_ref, tol, 1e-5));
  EXPECT_TRUE(allclose(added(dw, dw0), dw_ref, tol, 1e-5));
  EXPECT_TRUE(allclose(added(db, db0), db_ref, tol, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Ragged, MatmulShapes,
                         ::testing::Values(std::array<int, 3>{1, 1, 1}, std::array<int, 3>{7, 13, 5},
                                           std::array<int, 3>{3, 129, 257},
                                           std::array<int, 3>{64, 256, 768}),
                         [](const auto& info) {
                           std::string name = "N";  // built with +=: GCC 12 -Wrestrict false positive
                           name += std::to_string(info.param[0]) + "_IC" + std::to_string(info.param[1]) +
                                   "_OC" + std::to_string(info.param[2]);
                           return name;
                         });

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  const int N = 3, IC = 4, OC = 5;
  const auto inp = uniform(N * IC, 61), w = uniform(OC * IC, 62), b = uniform(OC, 63);
  const auto dout = uniform(N * OC, 64), dw0 = uniform(OC * IC, 65), db0 = uniform(OC, 66);
  std::vector<float> dinp(N * IC, -5.f), dw = dw0, db = db0;
  cpu::matmul_bwd(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  auto x64 = to_f64(inp), w64 = to_f64(w), b64 = to_f64(b);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, matmul_ref(x64, w64, &b64, N, IC, OC)); };
  EXPECT_TRUE(allclose(to_f64(dinp), central_diff(x64, loss), 1e-6, 1e-5));
  EXPECT_TRUE(allclose(added(dw, dw0), central_diff(w64, loss), 1e-6, 1e-5));
  EXPECT_TRUE(allclose(added(db, db0), central_diff(b64, loss), 1e-6, 1e-5));
}

TEST(Matmul, NullBiasGradientIsAllowed) {
  const int N = 2, IC = 3, OC = 4;
  const auto inp = uniform(N * IC, 71), w = uniform(OC * IC, 72), dout = uniform(N * OC, 73);
  std::vector<float> dinp(N * IC), dw(OC * IC, 0.f), dw_with_bias(OC * IC, 0.f), db(OC, 0.f);
  cpu::matmul_bwd(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC);
  cpu::matmul_bwd(dinp.data(), dw_with_bias.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_TRUE(bitwise_equal(dw, dw_with_bias));
}

// GEMMs are split into fixed output blocks shared by OpenMP threads: same bits for any count.
TEST(Matmul, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int N = 64, IC = 256, OC = 1000;
  const auto inp = uniform(N * IC, 81), w = uniform(OC * IC, 82), b = uniform(OC, 83);
  const auto dout = uniform(N * OC, 84);
  auto run = [&](int threads) {
    std::vector<float> out(N * OC), dinp(N * IC), dw(OC * IC, 0.5f), db(OC, 0.5f);
    with_threads(threads, [&] {
      cpu::matmul_fwd(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
      cpu::matmul_bwd(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    });
    for (auto* v : {&dinp, &dw, &db}) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

TEST(MatmulDeathTest, BadShapeDiesWithMessage) {
  std::vector<float> buf(16, 1.f);
  EXPECT_EXIT(cpu::matmul_fwd(buf.data(), buf.data(), buf.data(), nullptr, 0, 4, 4),
              ::testing::ExitedWithCode(1), "bad cblas_sgemm arguments: M=0 N=4 K=4");
}

}  // namespace
}  // namespace sftdp::test
