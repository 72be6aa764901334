// bench/bench_attention.cpp — the CPU attention twin (no T×T: output + log-sum-exp, tiles
// recomputed in backward) at long T: forward + backward ms and GFLOP/s counting the causal FLOPs
// once (the recompute not counted), against OpenBLAS sgemm's GFLOP/s measured in the same run on as
// many threads. Shape: smollm2-135m's attention (NH=9 query heads, KVH=3, HS=64), B=1, one sequence
// per row; T from argv (default 256 1024 4096 16384). Validates a few rows of the forward against a
// float64 computation first; exits 1 if that fails.
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/attention.h"

using namespace sftdp;

namespace {

constexpr int NH = 9, KVH = 3, HS = 64, QKV = (NH + 2 * KVH) * HS;

// Output of rows `rows` of head 0 in float64: what the check compares.
double max_error(const std::vector<float>& qkv, const std::vector<float>& out, int T, const std::vector<int>& rows) {
  double err = 0;
  for (int t : rows) {
    std::vector<double> s(t + 1);
    double mx = -INFINITY, z = 0;
    for (int j = 0; j <= t; ++j) {
      double d = 0;
      for (int i = 0; i < HS; ++i) d += double(qkv[size_t(t) * QKV + i]) * qkv[size_t(j) * QKV + NH * HS + i];
      s[j] = d / std::sqrt(double(HS));
      mx = std::max(mx, s[j]);
    }
    for (int j = 0; j <= t; ++j) z += (s[j] = std::exp(s[j] - mx));
    for (int i = 0; i < HS; ++i) {
      double o = 0;
      for (int j = 0; j <= t; ++j) o += s[j] / z * qkv[size_t(j) * QKV + (NH + KVH) * HS + i];
      err = std::max(err, std::fabs(o - out[size_t(t) * NH * HS + i]));
    }
  }
  (void)T;
  return err;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> Ts;
  for (int i = 1; i < argc; ++i) Ts.push_back(std::atoi(argv[i]));
  if (Ts.empty()) Ts = {256, 1024, 4096, 16384};
  std::printf("CPU attention fwd+bwd, B=1 NH=%d KVH=%d HS=%d, no segments; OpenMP threads %d\n", NH, KVH, HS,
              omp_get_max_threads());
  bench::Table table({"T", "fwd ms", "bwd ms", "fwd+bwd ms", "GFLOP/s (causal, once)", "sgemm GFLOP/s",
                      "fraction of sgemm", "scratch MiB"});
  // The reference: OpenBLAS sgemm on as many threads at (1024 x 4096) x HS — an inner dimension of
  // HS, as every GEMM of attention has one (q·kᵀ: K = HS; P·v, dS·k, ...: N = HS) — the median of 9
  // runs, after the attention timings: OpenBLAS's own worker threads spin for a while after a
  // threaded call and would steal a core from the attention timed next.
  struct Row {
    int T;
    double fwd, bwd, flops;
  };
  std::vector<Row> rows;
  for (int T : Ts) {
    const auto qkv = bench::random_floats(size_t(T) * QKV, 1);
    const auto dout = bench::random_floats(size_t(T) * NH * HS, 2);
    std::vector<float> out(size_t(T) * NH * HS), lse(size_t(NH) * T), dqkv(qkv.size());
    cpu::attention_fwd(out.data(), lse.data(), qkv.data(), nullptr, 1, T, NH, KVH, HS);
    const double err = max_error(qkv, out, T, {0, T / 2, T - 1});
    if (!bench::check("T=" + std::to_string(T) + " forward rows vs float64", err, 1e-5)) return 1;
    const int reps = T >= 8192 ? 1 : T >= 4096 ? 3 : 5;
    const double fwd = bench::median_ms(
        [&] { cpu::attention_fwd(out.data(), lse.data(), qkv.data(), nullptr, 1, T, NH, KVH, HS); }, reps, 1);
    const double bwd = bench::median_ms(
        [&] {
          cpu::attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, 1, T, NH, KVH, HS);
        },
        reps, 1);
    // Causal pairs T(T+1)/2 per head; forward q·kᵀ and P·v, backward dP, dV, dQ, dK: 6 GEMMs of
    // 2·HS flops per pair (the backward's recompute of q·kᵀ is not counted).
    const double pairs = 0.5 * double(T) * (T + 1), flops = 6.0 * 2 * HS * pairs * NH;
    rows.push_back({T, fwd, bwd, flops});
  }
  const double blas = bench::sgemm_gflops(1024, 4096, HS, 9);
  for (const Row& r : rows) {
    const double gflops = r.flops / ((r.fwd + r.bwd) * 1e6);
    table.add_row(
        {std::to_string(r.T), bench::fmt(r.fwd, 1), bench::fmt(r.bwd, 1), bench::fmt(r.fwd + r.bwd, 1),
         bench::fmt(gflops, 1), bench::fmt(blas, 1), bench::fmt(gflops / blas, 2),
         bench::fmt(double(cpu::attention_scratch_bytes(1, r.T, NH, KVH, HS, omp_get_max_threads())) / (1 << 20), 1)});
  }
  table.print();
  return 0;
}
