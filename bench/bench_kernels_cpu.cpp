// bench/bench_kernels_cpu.cpp — ms per call of every CPU kernel at the shapes of one train step of
// a 4-layer GPT-2 (C=256, NH=4, V=50257) at B=4, T=64, and the step time they add up to.
// Validates the LM-head matmul against the naive loop and the cross-entropy loss sum against
// fp64 before timing; exits 1 if either check fails. Threads: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS.
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

using namespace sftdp;
using bench::random_floats;

namespace {

constexpr int L = 4, C = 256, NH = 4, V = 50257, B = 4, T = 64, maxT = 1024;
constexpr int F = 4 * C, N = B * T;

bool validate(const std::vector<float>& x, const std::vector<float>& wte,
              const std::vector<int32_t>& targets, const std::vector<float>& weights) {
  std::vector<float> logits(static_cast<size_t>(N) * V);
  cpu::matmul_fwd(logits.data(), x.data(), wte.data(), nullptr, N, C, V);
  const int rows = 3;  // the naive fp64 loop is slow: check the first rows
  std::vector<float> ref(static_cast<size_t>(rows) * V);
  cpu::matmul_fwd_naive(ref.data(), x.data(), wte.data(), nullptr, rows, C, V);
  double err = 0;
  for (size_t i = 0; i < ref.size(); ++i) err = std::fmax(err, std::fabs(double(logits[i]) - ref[i]));
  bool ok = bench::check("lm-head matmul_fwd vs naive (3 rows)", err, 1e-4);

  double loss_ref = 0;
  for (int n = 0; n < N; ++n) {
    const float* z = &logits[static_cast<size_t>(n) * V];
    double max = z[0], sum = 0;
    for (int i = 0; i < V; ++i) max = std::fmax(max, z[i]);
    for (int i = 0; i < V; ++i) sum += std::exp(z[i] - max);
    loss_ref += weights[n] * (max + std::log(sum) - z[targets[n]]);
  }
  float sums[2] = {0, 0};
  cpu::cross_entropy_fwd_bwd(sums, logits.data(), logits.data(), targets.data(), weights.data(), N, V);
  ok = bench::check("cross-entropy loss sum vs fp64", std::fabs(sums[0] - loss_ref), 1e-6 * loss_ref) && ok;
  return ok;
}

}  // namespace

int main() {
  std::printf("CPU kernels, L=%d C=%d NH=%d V=%d B=%d T=%d; OpenMP threads %d, OpenBLAS threads %d\n",
              L, C, NH, V, B, T, omp_get_max_threads(), openblas_get_num_threads());
  // inputs: one copy of each layer's buffers is enough to time a single call
  const auto inp = bench::random_ints(N, 1, V), targets = bench::random_ints(N, 2, V);
  auto weights = random_floats(N, 3, 0.f, 1.f);
  for (int n = 0; n < N; n += 4) weights[n] = 0.f;  // some masked prompt tokens
  const auto wte = random_floats(static_cast<size_t>(V) * C, 4, -0.05f, 0.05f);
  const auto wpe = random_floats(static_cast<size_t>(maxT) * C, 5, -0.05f, 0.05f);
  const auto x = random_floats(static_cast<size_t>(N) * C, 6, -2.f, 2.f);
  const auto dx = random_floats(static_cast<size_t>(N) * F, 7);  // a gradient, up to N·F wide
  const auto w_cc = random_floats(static_cast<size_t>(F) * C * 3, 8, -0.05f, 0.05f);  // weights up to 3C·C, F·C
  const auto bias = random_floats(3 * C + F, 9);
  const auto ln_w = random_floats(C, 10, 0.5f, 1.5f);
  const auto qkv = random_floats(static_cast<size_t>(N) * 3 * C, 11);
  const auto h = random_floats(static_cast<size_t>(N) * F, 12, -3.f, 3.f);
  const double blas_gflops = bench::sgemm_gflops(N, V, C);
  if (!validate(x, wte, targets, weights)) return 1;

  std::vector<float> out(static_cast<size_t>(N) * F), out2(static_cast<size_t>(N) * 3 * C);
  std::vector<float> mean(N), rstd(N), dwte(static_cast<size_t>(V) * C), dwpe(static_cast<size_t>(maxT) * C);
  std::vector<float> dw(static_cast<size_t>(F) * C * 3), db(3 * C + F), dln(C), dln2(C);
  std::vector<float> lse(static_cast<size_t>(B) * NH * T);  // attention keeps (B,NH,T), no T×T
  std::vector<float> logits(static_cast<size_t>(N) * V), dwte_head(static_cast<size_t>(V) * C);
  std::vector<float> dinp_head(static_cast<size_t>(N) * C);
  cpu::matmul_fwd(logits.data(), x.data(), wte.data(), nullptr, N, C, V);
  const size_t n_params = static_cast<size_t>(V) * C + static_cast<size_t>(maxT) * C +
                          static_cast<size_t>(L) * (12 * C * C + 13 * C) + 2 * C;
  const size_t n_decay = static_cast<size_t>(V) * C + static_cast<size_t>(L) * 12 * C * C;
  std::vector<float> params = random_floats(n_params, 13), grads = random_floats(n_params, 14);
  std::vector<float> m(n_params), v(n_params);
  std::vector<int32_t> seg(N);
  for (int i = 0; i < N; ++i) seg[i] = (i % T) / 32;  // two packed segments per row

  bench::Table table({"kernel", "shape", "ms/call", "calls/step", "ms/step", "GFLOP/s"});
  double step_ms = 0;
  auto row = [&](const std::string& name, const std::string& shape, int calls, double flops,
                 const std::function<void()>& fn, int reps = 10) {
    const double ms = bench::median_ms(fn, reps, 2);
    step_ms += ms * calls;
    table.add_row({name, shape, bench::fmt(ms), std::to_string(calls), bench::fmt(ms * calls, 2),
                   flops > 0 ? bench::fmt(flops / (ms * 1e6), 1) : ""});
  };
  auto linear = [&](const std::string& name, int IC, int OC, const float* b) {
    const std::string shape = std::to_string(N) + "x" + std::to_string(IC) + "->" + std::to_string(OC);
    const double flops = 2.0 * N * IC * OC;
    const float* in = IC == C ? x.data() : h.data();
    const int calls = OC == V ? 1 : L;
    row("matmul_fwd " + name, shape, calls, flops,
        [&] { cpu::matmul_fwd(out2.size() >= size_t(N) * OC ? out2.data() : logits.data(), in, OC == V ? wte.data() : w_cc.data(), b, N, IC, OC); });
    row("matmul_bwd " + name, shape, calls, 2 * flops, [&] {
      cpu::matmul_bwd(OC == V ? dinp_head.data() : out.data(), OC == V ? dwte_head.data() : dw.data(),
                      b ? db.data() : nullptr, OC == V ? logits.data() : dx.data(), in,
                      OC == V ? wte.data() : w_cc.data(), N, IC, OC);
    }, OC == V ? 5 : 10);
  };
  const std::string nc = std::to_string(N) + "x" + std::to_string(C);
  const std::string nf = std::to_string(N) + "x" + std::to_string(F);
  row("encoder_fwd", nc, 1, 0, [&] { cpu::encoder_fwd(out.data(), inp.data(), nullptr, wte.data(), wpe.data(), B, T, C); });
  row("encoder_bwd", nc, 1, 0, [&] { cpu::encoder_bwd(dwte.data(), dwpe.data(), dx.data(), inp.data(), nullptr, nullptr, B, T, C); });
  row("layernorm_fwd", nc, 2 * L + 1, 0, [&] {
    cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), ln_w.data(), bias.data(), N, C);
  });
  row("layernorm_bwd", nc, 2 * L + 1, 0, [&] {
    cpu::layernorm_bwd(out.data(), dln.data(), dln2.data(), dx.data(), x.data(), ln_w.data(), mean.data(), rstd.data(), N, C);
  });
  linear("qkv", C, 3 * C, bias.data());
  linear("attn.proj", C, C, bias.data());
  linear("mlp.fc", C, F, bias.data());
  linear("mlp.proj", F, C, bias.data());
  row("attention_fwd (segments)", "B4 T64 NH4", L, 0,
      [&] { cpu::attention_fwd(out.data(), lse.data(), qkv.data(), seg.data(), B, T, NH, NH, C / NH); });
  row("attention_bwd", "B4 T64 NH4", L, 0, [&] {
    cpu::attention_bwd(out2.data(), dx.data(), qkv.data(), out.data(), lse.data(), seg.data(), B, T, NH, NH, C / NH);
  });
  row("gelu_fwd", nf, L, 0, [&] { cpu::gelu_fwd(out.data(), h.data(), h.size()); });
  row("gelu_bwd", nf, L, 0, [&] { cpu::gelu_bwd(out.data(), h.data(), dx.data(), h.size()); });
  row("residual_fwd", nc, 2 * L, 0, [&] { cpu::residual_fwd(out.data(), x.data(), dx.data(), x.size()); });
  linear("lm-head (tied wte)", C, V, nullptr);
  float sums[2] = {0, 0};
  row("cross_entropy fwd only", std::to_string(N) + "x" + std::to_string(V), 0, 0, [&] {
    cpu::cross_entropy_fwd_bwd(sums, nullptr, logits.data(), targets.data(), weights.data(), N, V);
  });
  row("cross_entropy fwd+bwd in place", std::to_string(N) + "x" + std::to_string(V), 1, 0, [&] {
    cpu::cross_entropy_fwd_bwd(sums, logits.data(), logits.data(), targets.data(), weights.data(), N, V);
  });
  const std::string np = std::to_string(n_params) + " params";
  row("sum_squares (grad norm)", np, 1, 0, [&] { cpu::sum_squares(sums, grads.data(), n_params); }, 5);
  row("adamw_update", np, 1, 0, [&] {
    cpu::adamw_update(params.data(), m.data(), v.data(), grads.data(), n_params, n_decay, 1e-4f,
                      0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
  }, 5);
  table.print();
  std::printf("sum of kernels for one train step (B=%d, T=%d, no GA): %.1f ms\n", B, T, step_ms);
  std::printf("plain cblas_sgemm (OpenBLAS's own threads) at the lm-head shape %dx%dx%d: %.1f GFLOP/s\n",
              N, V, C, blas_gflops);
  return 0;
}
