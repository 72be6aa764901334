// tests/kernels/test_rmsnorm.cpp — CPU RMSNorm and per-head q/k RMSNorm twins: a hand case, the
// forwards (and rstd) against fp64 references, the backwards against fp64 finite differences with
// their accumulation contracts (rmsnorm: dinp +=, dweight +=; qk: dqkv =, dq/dk_weight +=), v
// passing through untouched, and bitwise determinism across thread counts. Their act16 twins (bf16
// where kernels/rmsnorm.h marks it): the forwards are bitwise bf16 of the fp32 twins' (on the widened
// rows, for q/k), v heads pass through bit for bit, and the backwards match fp64 references of the
// header's equations: rmsnorm_bwd with and without dres_in, in place, without dres16, frozen; the q/k
// backward also bitwise bf16 of the fp32 twin's on widened inputs, its weight gradients equal to it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "act16_test_util.h"
#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/rmsnorm.h"

namespace sftdp::test {
namespace {

// out = x / sqrt(mean(x²) + eps) · w over each n-wide slice; rstd per slice if asked.
void rms_ref_slice(double* y, const double* x, const double* w, int n, double eps, double* rstd) {
  double sq = 0;
  for (int c = 0; c < n; ++c) sq += x[c] * x[c];
  const double s = 1.0 / std::sqrt(sq / n + eps);
  for (int c = 0; c < n; ++c) y[c] = x[c] * s * w[c];
  if (rstd) *rstd = s;
}

std::vector<double> rmsnorm_ref(const std::vector<double>& inp, const std::vector<double>& w, int N,
                                int C, double eps, std::vector<double>* rstd = nullptr) {
  std::vector<double> out(inp.size());
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; ++n)
    rms_ref_slice(&out[size_t(n) * C], &inp[size_t(n) * C], w.data(), C, eps, rstd ? &(*rstd)[n] : nullptr);
  return out;
}

// qkv rows (NH + 2·KVH)·HS: q heads with qw, k heads with kw, v copied.
std::vector<double> qk_rmsnorm_ref(const std::vector<double>& qkv, const std::vector<double>& qw,
                                   const std::vector<double>& kw, int N, int NH, int KVH, int HS,
                                   double eps, std::vector<double>* rstd = nullptr) {
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  std::vector<double> out(qkv);  // v stays as it is
  if (rstd) rstd->assign(size_t(N) * (NH + KVH), 0.0);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH + KVH; ++h) {
      const size_t o = n * QKV + size_t(h) * HS;
      rms_ref_slice(&out[o], &qkv[o], h < NH ? qw.data() : kw.data(), HS, eps,
                    rstd ? &(*rstd)[size_t(n) * (NH + KVH) + h] : nullptr);
    }
  return out;
}

TEST(RmsNorm, HandCase) {
  const std::vector<float> inp = {1, 2, 3, 4}, w = {1, 1, 2, 0.5f};
  std::vector<float> out(4), rstd(1);
  cpu::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), 1, 4, 1e-6f);
  const double s = 1.0 / std::sqrt(7.5 + 1e-6);  // mean of squares (1+4+9+16)/4 = 7.5
  EXPECT_NEAR(rstd[0], s, 1e-7);
  EXPECT_TRUE(allclose(to_f64(out), {s, 2 * s, 6 * s, 2 * s}, 1e-6, 1e-6));
}

TEST(RmsNorm, ForwardAndRstdMatchFp64Reference) {
  const int N = 9, C = 257;
  const float eps = 1e-5f;
  const auto inp = uniform(size_t(N) * C, 11, -3.f, 5.f), w = uniform(C, 12);
  std::vector<float> out(size_t(N) * C), rstd(N);
  cpu::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
  std::vector<double> rstd_ref;
  const auto ref = rmsnorm_ref(to_f64(inp), to_f64(w), N, C, eps, &rstd_ref);
  EXPECT_TRUE(allclose(to_f64(out), ref, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(to_f64(rstd), rstd_ref, 0, 1e-6));
}

TEST(RmsNorm, EpsIsInsideTheSquareRoot) {  // an all-zero row: rstd = 1/sqrt(eps), out = 0
  const std::vector<float> inp(8, 0.f), w(8, 1.f);
  std::vector<float> out(8, 7.f), rstd(1);
  cpu::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), 1, 8, 1e-6f);
  EXPECT_NEAR(rstd[0], 1000.0, 1e-3);
  EXPECT_TRUE(bitwise_equal(out, std::vector<float>(8, 0.f)));
}

TEST(RmsNorm, BackwardAccumulatesAndMatchesFiniteDifferences) {
  const int N = 4, C = 9;
  const float eps = 1e-5f;
  const auto inp = uniform(size_t(N) * C, 21, -2.f, 3.f), w = uniform(C, 22), dout = uniform(size_t(N) * C, 24);
  const auto dinp0 = uniform(size_t(N) * C, 25), dw0 = uniform(C, 26);  // non-zero: checks +=
  std::vector<float> out(size_t(N) * C), rstd(N);
  cpu::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
  std::vector<float> dinp = dinp0, dw = dw0;
  cpu::rmsnorm_bwd(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);

  auto x64 = to_f64(inp), w64 = to_f64(w);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, rmsnorm_ref(x64, w64, N, C, eps)); };
  EXPECT_TRUE(allclose(added(dinp, dinp0), central_diff(x64, loss), 1e-5, 1e-4));
  EXPECT_TRUE(allclose(added(dw, dw0), central_diff(w64, loss), 1e-5, 1e-4));
}

TEST(RmsNorm, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int N = 256, C = 320;
  const auto inp = uniform(size_t(N) * C, 31), w = uniform(C, 32), dout = uniform(size_t(N) * C, 34);
  auto run = [&](int threads) {
    std::vector<float> out(size_t(N) * C), rstd(N), dinp(size_t(N) * C, 0.1f), dw(C, 0.2f);
    with_threads(threads, [&] {
      cpu::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
      cpu::rmsnorm_bwd(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    });
    for (auto* v : {&rstd, &dinp, &dw}) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

// ---- per-head q/k RMSNorm (Qwen3) ----

TEST(QkRmsNorm, ForwardMatchesFp64ReferenceAndCopiesV) {
  const int N = 5, NH = 4, KVH = 2, HS = 24;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const float eps = 1e-6f;
  const auto qkv = uniform(N * QKV, 41, -2.f, 3.f), qw = uniform(HS, 42), kw = uniform(HS, 43);
  std::vector<float> out(N * QKV, 9.f), rstd(size_t(N) * (NH + KVH));
  cpu::qk_rmsnorm_fwd(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, eps);
  std::vector<double> rstd_ref;
  const auto ref = qk_rmsnorm_ref(to_f64(qkv), to_f64(qw), to_f64(kw), N, NH, KVH, HS, eps, &rstd_ref);
  EXPECT_TRUE(allclose(to_f64(out), ref, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(to_f64(rstd), rstd_ref, 0, 1e-6));
  for (int n = 0; n < N; ++n)
    for (size_t c = size_t(NH + KVH) * HS; c < QKV; ++c) ASSERT_EQ(out[n * QKV + c], qkv[n * QKV + c]);
}

// dqkv starts as garbage (it is overwritten, v columns = dout's); dq_weight/dk_weight start
// non-zero (+=). KVH = 1 and HS = 20 (not a multiple of the kernel's channel block).
TEST(QkRmsNorm, BackwardOverwritesDqkvAccumulatesWeightsAndMatchesFiniteDifferences) {
  const int N = 3, NH = 3, KVH = 1, HS = 20;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const float eps = 1e-6f;
  const auto qkv = uniform(N * QKV, 51, -2.f, 2.f), qw = uniform(HS, 52), kw = uniform(HS, 53);
  const auto dout = uniform(N * QKV, 54);
  const auto dqw0 = uniform(HS, 55), dkw0 = uniform(HS, 56);
  std::vector<float> out(N * QKV), rstd(size_t(N) * (NH + KVH));
  cpu::qk_rmsnorm_fwd(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, eps);
  std::vector<float> dqkv(N * QKV, 9.f), dqw = dqw0, dkw = dkw0;
  cpu::qk_rmsnorm_bwd(dqkv.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(), qw.data(), kw.data(),
                      rstd.data(), N, NH, KVH, HS);

  auto x64 = to_f64(qkv), qw64 = to_f64(qw), kw64 = to_f64(kw);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, qk_rmsnorm_ref(x64, qw64, kw64, N, NH, KVH, HS, eps)); };
  EXPECT_TRUE(allclose(to_f64(dqkv), central_diff(x64, loss), 1e-5, 1e-4));
  EXPECT_TRUE(allclose(added(dqw, dqw0), central_diff(qw64, loss), 1e-5, 1e-4));
  EXPECT_TRUE(allclose(added(dkw, dkw0), central_diff(kw64, loss), 1e-5, 1e-4));
  for (int n = 0; n < N; ++n)
    for (size_t c = size_t(NH + KVH) * HS; c < QKV; ++c) ASSERT_EQ(dqkv[n * QKV + c], dout[n * QKV + c]);
}

TEST(QkRmsNorm, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int N = 128, NH = 8, KVH = 2, HS = 64;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv = uniform(N * QKV, 61), qw = uniform(HS, 62), kw = uniform(HS, 63), dout = uniform(N * QKV, 64);
  auto run = [&](int threads) {
    std::vector<float> out(N * QKV), rstd(size_t(N) * (NH + KVH)), dqkv(N * QKV), dqw(HS, 0.2f), dkw(HS, 0.3f);
    with_threads(threads, [&] {
      cpu::qk_rmsnorm_fwd(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, 1e-6f);
      cpu::qk_rmsnorm_bwd(dqkv.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(), qw.data(), kw.data(),
                          rstd.data(), N, NH, KVH, HS);
    });
    for (auto* v : {&rstd, &dqkv, &dqw, &dkw}) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

// ---- the act16 twins -------------------------------------------------------------------------------

::testing::AssertionResult close_to(const std::vector<double>& got, const std::vector<double>& ref, double rel) {
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  return allclose(got, ref, rel * scale, rel);
}

// One n-wide vector's input gradient in fp64: rstd·(g − x̂·mean(g·x̂)), g = w·dy, x̂ = x·rstd; and dy·x̂
// added into dw.
void rms_bwd_ref_slice(double* dx, double* dw, const double* dy, const double* x, const double* w, double rstd,
                       int n) {
  double gx_mean = 0;
  for (int c = 0; c < n; ++c) gx_mean += w[c] * dy[c] * x[c] * rstd / n;
  for (int c = 0; c < n; ++c) {
    dx[c] = rstd * (w[c] * dy[c] - x[c] * rstd * gx_mean);
    dw[c] += dy[c] * x[c] * rstd;
  }
}

TEST(RmsNormAct16, ForwardIsTheFp32ForwardRoundedToBf16) {
  for (const auto& [N, C] : {std::pair{9, 257}, std::pair{4, 1024}}) {
    const auto inp = uniform(size_t(N) * C, 71, -3.f, 5.f), w = uniform(C, 72);
    std::vector<float> out(size_t(N) * C), rstd(N), rstd16(N);
    std::vector<uint16_t> out16(size_t(N) * C);
    cpu::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
    cpu::act16::rmsnorm_fwd(out16.data(), rstd16.data(), inp.data(), w.data(), N, C, 1e-6f);
    EXPECT_TRUE(same_bits(out16, bf16_of(out))) << "C=" << C;
    EXPECT_TRUE(bitwise_equal(rstd16, rstd));
  }
}

TEST(RmsNormAct16, BackwardMatchesFp64ReferenceInEveryArrangement) {
  const int N = 11, C = 257;
  const size_t NC = size_t(N) * C;
  const auto inp = uniform(NC, 81, -2.f, 3.f), w = uniform(C, 82, 0.5f, 1.5f);
  const auto dout = bf16_of(uniform(NC, 84));
  const auto dres_in0 = uniform(NC, 85), dw0 = uniform(C, 86);
  std::vector<uint16_t> out(NC);
  std::vector<float> rstd(N);
  cpu::act16::rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
  struct Arrangement {
    const char* name;
    bool dres_in, in_place, dres16, frozen;
  };
  for (const Arrangement& a : {Arrangement{"no dres_in", false, false, true, false},
                               {"dres_in", true, false, true, false}, {"in place", true, true, true, false},
                               {"no dres16", true, false, false, false}, {"frozen", true, true, true, true}}) {
    SCOPED_TRACE(a.name);
    std::vector<float> dres(NC, 7.f), dres_in = dres_in0, dw = dw0;
    std::vector<uint16_t> dres16(NC, 0x7fc1);
    if (a.in_place) dres = dres_in0;
    const float* dres_in_arg = !a.dres_in ? nullptr : a.in_place ? dres.data() : dres_in.data();
    cpu::act16::rmsnorm_bwd(dres.data(), a.dres16 ? dres16.data() : nullptr, a.frozen ? nullptr : dw.data(),
                            dres_in_arg, dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    const auto x64 = to_f64(inp), dy64 = to_f64(widened(dout)), w64 = to_f64(w);
    std::vector<double> dres_ref(NC), dw_ref(C);
    for (int n = 0; n < N; ++n) {
      const size_t row = size_t(n) * C;
      rms_bwd_ref_slice(&dres_ref[row], dw_ref.data(), &dy64[row], &x64[row], w64.data(), rstd[n], C);
      if (a.dres_in)
        for (int c = 0; c < C; ++c) dres_ref[row + c] += dres_in0[row + c];
    }
    EXPECT_TRUE(close_to(to_f64(dres), dres_ref, 1e-5));
    if (a.dres16) {
      EXPECT_TRUE(same_bits(dres16, bf16_of(dres)));  // rounded once, from the fp32 dres
    }
    if (!a.frozen) {
      EXPECT_TRUE(close_to(added(dw, dw0), dw_ref, 1e-5));
    }
    if (a.dres_in && !a.in_place) {
      EXPECT_TRUE(bitwise_equal(dres_in, dres_in0)) << "dres_in is an input";
    }
  }
}

TEST(QkRmsNormAct16, ForwardIsTheFp32ForwardOfTheWidenedRowsRoundedToBf16) {
  const int N = 5, NH = 4, KVH = 2, HS = 24;
  const size_t QKV = size_t(NH + 2 * KVH) * HS, nr = size_t(N) * (NH + KVH);
  const auto qkv = bf16_of(uniform(N * QKV, 41, -2.f, 3.f));
  const auto qw = uniform(HS, 42), kw = uniform(HS, 43);
  std::vector<float> out(N * QKV), rstd(nr), rstd16(nr);
  std::vector<uint16_t> out16(N * QKV, 0x7fc1);
  cpu::qk_rmsnorm_fwd(out.data(), rstd.data(), widened(qkv).data(), qw.data(), kw.data(), N, NH, KVH, HS, 1e-6f);
  cpu::act16::qk_rmsnorm_fwd(out16.data(), rstd16.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, 1e-6f);
  EXPECT_TRUE(same_bits(out16, bf16_of(out)));  // v: bf16(widened v) is v itself
  EXPECT_TRUE(bitwise_equal(rstd16, rstd));
  for (int n = 0; n < N; ++n)  // the v heads' 16 bits, as they are
    for (size_t c = size_t(NH + KVH) * HS; c < QKV; ++c) ASSERT_EQ(out16[n * QKV + c], qkv[n * QKV + c]);
}

TEST(QkRmsNormAct16, BackwardMatchesFp64ReferenceAndIsBf16OfTheFp32Backward) {
  const int N = 3, NH = 3, KVH = 1, HS = 20;
  const size_t QKV = size_t(NH + 2 * KVH) * HS, QK = NH + KVH;
  const auto qkv = bf16_of(uniform(N * QKV, 51, -2.f, 2.f)), dout = bf16_of(uniform(N * QKV, 54));
  const auto qw = uniform(HS, 52), kw = uniform(HS, 53), dqw0 = uniform(HS, 55), dkw0 = uniform(HS, 56);
  std::vector<uint16_t> out(N * QKV);
  std::vector<float> rstd(N * QK);
  cpu::act16::qk_rmsnorm_fwd(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, 1e-6f);
  std::vector<uint16_t> dqkv(N * QKV, 0x7fc1);
  std::vector<float> dqw = dqw0, dkw = dkw0;
  cpu::act16::qk_rmsnorm_bwd(dqkv.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(), qw.data(), kw.data(),
                             rstd.data(), N, NH, KVH, HS);
  // fp64: each q/k head as rms_bwd_ref_slice, v copied.
  const auto x64 = to_f64(widened(qkv)), dy64 = to_f64(widened(dout)), qw64 = to_f64(qw), kw64 = to_f64(kw);
  std::vector<double> dqkv_ref = dy64, dqw_ref(HS), dkw_ref(HS);
  for (int n = 0; n < N; ++n)
    for (size_t h = 0; h < QK; ++h) {
      const size_t o = n * QKV + h * HS;
      rms_bwd_ref_slice(&dqkv_ref[o], h < size_t(NH) ? dqw_ref.data() : dkw_ref.data(), &dy64[o], &x64[o],
                        h < size_t(NH) ? qw64.data() : kw64.data(), rstd[n * QK + h], HS);
    }
  EXPECT_TRUE(allclose(to_f64(widened(dqkv)), dqkv_ref, 1e-5, 1.0 / 128));  // one bf16 rounding
  EXPECT_TRUE(close_to(added(dqw, dqw0), dqw_ref, 1e-5));
  EXPECT_TRUE(close_to(added(dkw, dkw0), dkw_ref, 1e-5));
  // The fp32 twin on the widened inputs makes the same fp32 operations: dqkv is its bf16, the weights its.
  std::vector<float> dqkv32(N * QKV), dqw32 = dqw0, dkw32 = dkw0;
  cpu::qk_rmsnorm_bwd(dqkv32.data(), dqw32.data(), dkw32.data(), widened(dout).data(), widened(qkv).data(),
                      qw.data(), kw.data(), rstd.data(), N, NH, KVH, HS);
  EXPECT_TRUE(same_bits(dqkv, bf16_of(dqkv32)));
  EXPECT_TRUE(bitwise_equal(dqw, dqw32));
  EXPECT_TRUE(bitwise_equal(dkw, dkw32));
  // Frozen weights: dqkv the same, nothing else written.
  std::vector<uint16_t> frozen(N * QKV, 0x7fc1);
  cpu::act16::qk_rmsnorm_bwd(frozen.data(), nullptr, nullptr, dout.data(), qkv.data(), qw.data(), kw.data(),
                             rstd.data(), N, NH, KVH, HS);
  EXPECT_TRUE(same_bits(frozen, dqkv));
}

}  // namespace
}  // namespace sftdp::test
