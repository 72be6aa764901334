// tests/kernels/test_layernorm.cpp — CPU LayerNorm twin: a hand case, the forward against an
// fp64 reference, the backward (dinp, dweight, dbias, all +=) against fp64 finite differences,
// and bitwise determinism across thread counts. Its act16 twin (bf16 out and dout): the forward is
// bitwise bf16 of the fp32 twin's; the backward against an fp64 reference of kernels/layernorm.h's
// equations with and without the residual gradient coming in (dres_in), in place (dres == dres_in),
// without the bf16 copy, frozen (no dweight/dbias) and with the incoming gradient's column sum.
#include <cmath>
#include <cstdint>
#include <vector>

#include "act16_test_util.h"
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

// ---- the act16 twin -------------------------------------------------------------------------------

// |got − ref| <= rel·(max|ref| + |ref_i|): fp32 sums against fp64.
::testing::AssertionResult close_to(const std::vector<double>& got, const std::vector<double>& ref, double rel) {
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  return allclose(got, ref, rel * scale, rel);
}

TEST(LayerNormAct16, ForwardIsTheFp32ForwardRoundedToBf16) {
  for (const auto& [N, C] : {std::pair{9, 257}, std::pair{4, 768}}) {
    const auto inp = uniform(size_t(N) * C, 71, -3.f, 5.f), w = uniform(C, 72), b = uniform(C, 73);
    std::vector<float> out(size_t(N) * C), mean(N), rstd(N), mean16(N), rstd16(N);
    std::vector<uint16_t> out16(size_t(N) * C);
    cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    cpu::act16::layernorm_fwd(out16.data(), mean16.data(), rstd16.data(), inp.data(), w.data(), b.data(), N, C);
    EXPECT_TRUE(same_bits(out16, bf16_of(out))) << "C=" << C;
    EXPECT_TRUE(bitwise_equal(mean16, mean));
    EXPECT_TRUE(bitwise_equal(rstd16, rstd));
  }
}

// kernels/layernorm.h's act16 backward in fp64, from the forward's saved mean and rstd; the column sums
// without the += outputs' starting values. dres_in null: no incoming gradient.
struct LayerNormAct16Grads {
  std::vector<double> dres, dweight, dbias, dres_in_sum;
};
LayerNormAct16Grads layernorm_act16_bwd_ref(const std::vector<double>& x, const std::vector<double>& dout,
                                            const std::vector<double>& w, const std::vector<double>& mean,
                                            const std::vector<double>& rstd, const std::vector<double>* dres_in,
                                            int N, int C) {
  LayerNormAct16Grads r{std::vector<double>(x.size()), std::vector<double>(C), std::vector<double>(C),
                        std::vector<double>(C)};
  for (int n = 0; n < N; ++n) {
    const size_t row = size_t(n) * C;
    double g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[row + c] - mean[n]) * rstd[n], g = w[c] * dout[row + c];
      g_mean += g / C;
      gx_mean += g * xhat / C;
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[row + c] - mean[n]) * rstd[n], g = w[c] * dout[row + c];
      r.dres[row + c] = (dres_in ? (*dres_in)[row + c] : 0.0) + rstd[n] * (g - g_mean - xhat * gx_mean);
      r.dweight[c] += dout[row + c] * xhat;
      r.dbias[c] += dout[row + c];
      if (dres_in) r.dres_in_sum[c] += (*dres_in)[row + c];
    }
  }
  return r;
}

// Which of the backward's optional arguments a call passes.
struct Act16BwdArrangement {
  const char* name;
  bool dres_in;      // an incoming residual gradient (else null: dres is the norm's gradient alone)
  bool in_place;     // dres == dres_in
  bool dres16;       // the bf16 copy of dres is written
  bool frozen;       // dweight and dbias null
  bool dres_in_sum;  // dres_in_sum given (summed only when dres_in is)
};
constexpr Act16BwdArrangement kLayerNormArrangements[] = {
    {"no dres_in", false, false, true, false, true},  {"dres_in", true, false, true, false, true},
    {"in place", true, true, true, false, true},       {"no dres16", true, false, false, false, false},
    {"frozen", true, true, true, true, true},          {"frozen, no sums", true, false, true, true, false},
};

TEST(LayerNormAct16, BackwardMatchesFp64ReferenceInEveryArrangement) {
  const int N = 11, C = 257;
  const size_t NC = size_t(N) * C;
  const auto inp = uniform(NC, 81, -2.f, 3.f), w = uniform(C, 82), b = uniform(C, 83);
  const auto dout = bf16_of(uniform(NC, 84));
  const auto dres_in0 = uniform(NC, 85);
  const auto dw0 = uniform(C, 86), db0 = uniform(C, 87), dsum0 = uniform(C, 88);  // non-zero: checks +=
  std::vector<uint16_t> out(NC);
  std::vector<float> mean(N), rstd(N);
  cpu::act16::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  const auto dres_in64 = to_f64(dres_in0);
  for (const Act16BwdArrangement& a : kLayerNormArrangements) {
    SCOPED_TRACE(a.name);
    std::vector<float> dres(NC, 7.f), dres_in = dres_in0, dw = dw0, db = db0, dsum = dsum0;
    std::vector<uint16_t> dres16(NC, 0x7fc1);
    if (a.in_place) dres = dres_in0;
    const float* dres_in_arg = !a.dres_in ? nullptr : a.in_place ? dres.data() : dres_in.data();
    cpu::act16::layernorm_bwd(dres.data(), a.dres16 ? dres16.data() : nullptr, a.frozen ? nullptr : dw.data(),
                              a.frozen ? nullptr : db.data(), a.dres_in_sum ? dsum.data() : nullptr, dres_in_arg,
                              dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
    const auto ref = layernorm_act16_bwd_ref(to_f64(inp), to_f64(widened(dout)), to_f64(w), to_f64(mean),
                                             to_f64(rstd), a.dres_in ? &dres_in64 : nullptr, N, C);
    EXPECT_TRUE(close_to(to_f64(dres), ref.dres, 1e-5));
    if (a.dres16) {
      EXPECT_TRUE(same_bits(dres16, bf16_of(dres)));  // rounded once, from the fp32 dres
    }
    if (!a.frozen) {
      EXPECT_TRUE(close_to(added(dw, dw0), ref.dweight, 1e-5));
      EXPECT_TRUE(close_to(added(db, db0), ref.dbias, 1e-5));
    }
    if (a.dres_in_sum) {
      if (a.dres_in)
        EXPECT_TRUE(close_to(added(dsum, dsum0), ref.dres_in_sum, 1e-5));
      else
        EXPECT_TRUE(bitwise_equal(dsum, dsum0)) << "no dres_in: nothing to sum";
    }
    if (a.dres_in && !a.in_place) {
      EXPECT_TRUE(bitwise_equal(dres_in, dres_in0)) << "dres_in is an input";
    }
  }
}

TEST(LayerNormAct16, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int N = 256, C = 200;
  const size_t NC = size_t(N) * C;
  const auto inp = uniform(NC, 91), w = uniform(C, 92), b = uniform(C, 93);
  const auto dout = bf16_of(uniform(NC, 94));
  const auto dres_in = uniform(NC, 95);
  auto run = [&](int threads) {
    std::vector<uint16_t> out(NC), dres16(NC);
    std::vector<float> mean(N), rstd(N), dres = dres_in, dw(C, 0.2f), db(C, 0.3f), dsum(C, 0.4f);
    with_threads(threads, [&] {
      cpu::act16::layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
      cpu::act16::layernorm_bwd(dres.data(), dres16.data(), dw.data(), db.data(), dsum.data(), dres.data(),
                                dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
    });
    std::vector<float> all = widened(out);
    for (auto* v : {&mean, &rstd, &dres, &dw, &db, &dsum}) all.insert(all.end(), v->begin(), v->end());
    const auto copy = widened(dres16);
    all.insert(all.end(), copy.begin(), copy.end());
    return all;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
