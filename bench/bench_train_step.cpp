// bench/bench_train_step.cpp — one whole optimizer step on the CPU (forward, backward, update)
// for gpt2-tiny and for a 4-layer, 4-head, C=256, V=50257 model at B=4, T=64: ms per step,
// tokens/s, achieved GFLOP/s, and this machine's cblas_sgemm GFLOP/s measured in the same run
// (their ratio is the CPU utilisation). Threads: $SFTDP_BENCH_THREADS (default 2).
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>

#include "harness.h"
#include "kernels/ops.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

using namespace sftdp;

int main() {
  const char* env = std::getenv("SFTDP_BENCH_THREADS");
  const int threads = env ? std::atoi(env) : 2;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  config::Config cfg;  // defaults: AdamW with clipping
  struct Case {
    const char* name;
    config::ModelDims d;
    int B, T;
  };
  const Case cases[] = {{"gpt2-tiny B=32 T=64", {2, 4, 64, 256, 264, 256}, 32, 64},
                        {"L4 C256 V50257 B=4 T=64", {4, 4, 256, 1024, 50257, 1024}, 4, 64}};
  bench::Table table({"model", "ms/step", "tokens/s", "GFLOP/s", "sgemm GFLOP/s", "utilisation"});
  bool ok = true;
  for (const auto& c : cases) {
    model::Gpt2 m(c.d, cpu_ops(), c.B, c.T);
    std::vector<float> p;
    model::init_params(p, m.layout(), c.d, 1);
    m.set_params_from_host(p);
    optim::AdamW opt(m);
    const auto batch = bench::random_batch(c.B, c.T, c.d.V);
    int t = 0;
    optim::StepStats stats;
    auto step = [&] {
      m.zero_grads();
      m.forward_backward(batch);
      stats = opt.apply(cfg, 1e-4, ++t);
    };
    step();  // check before timing: at initialisation the loss is close to ln(V)
    ok &= bench::check(std::string(c.name) + " initial loss vs ln(V)", std::fabs(stats.loss - std::log(c.d.V)), 0.5);
    const double ms = bench::median_ms(step, 10, 2);
    const double gflops = bench::train_flops(c.d, c.B, c.T) / (ms * 1e-3) / 1e9;
    // The GEMM that dominates the step: the LM head, N = B·T rows, K = C, V outputs.
    const double peak = bench::sgemm_gflops(c.B * c.T, c.d.V, c.d.C, 5);
    table.add_row({c.name, bench::fmt(ms, 1), bench::fmt(c.B * c.T / (ms * 1e-3), 0), bench::fmt(gflops, 1),
                   bench::fmt(peak, 1), bench::fmt(gflops / peak, 2)});
  }
  std::printf("threads: %d\n", threads);
  table.print();
  return ok ? 0 : 1;
}
