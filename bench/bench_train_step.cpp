// bench/bench_train_step.cpp — one whole optimizer step on the CPU (forward, backward, update)
// for gpt2-tiny, for a 4-layer, 4-head, C=256, V=50257 GPT-2 at B=4, T=64, and for the Llama-family
// smollm2-135m preset (L=30, NH=9, KVH=3, HS=64, C=576, F=1536, V=49152, tied; 134.5M params) at
// B=4, T=128: ms per step, tokens/s, achieved GFLOP/s (bench::train_flops) and this machine's
// cblas_sgemm GFLOP/s measured in the same run (their ratio is the CPU utilisation).
// Threads: $SFTDP_BENCH_THREADS (default 2).
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

namespace {

config::ModelDims preset(const char* name) {
  config::Config c;
  c.model_name = name;
  return config::model_dims(c);
}

// GEMM weights of d counted from its parameter layout, independently of train_flops' formula:
// every 2-D tensor but the embedding tables (wpe; wte too when the head is untied: lookups, no GEMM).
double gemm_weights_from_layout(const model::ParamLayout& layout, const config::ModelDims& d) {
  double n = 0;
  for (const auto& t : layout.tensors)
    if (t.shape.size() == 2 && t.name != "wpe" && !(t.name == "wte" && !d.tied)) n += double(t.numel);
  return n;
}

}  // namespace

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
    int reps = 10, warmup = 2;
  };
  const Case cases[] = {{"gpt2-tiny B=32 T=64", {2, 4, 64, 256, 264, 256}, 32, 64},
                        {"L4 C256 V50257 B=4 T=64", {4, 4, 256, 1024, 50257, 1024}, 4, 64},
                        // ~5 s a step on 2 cores: 5 timed steps after 1 warm-up.
                        {"smollm2-135m B=4 T=128", preset("smollm2-135m"), 4, 128, 5, 1}};
  bench::Table table({"model", "params M", "ms/step", "tokens/s", "GFLOP/s", "sgemm GFLOP/s", "utilisation"});
  bool ok = true;
  for (const auto& c : cases) {
    auto m = model::make_model(c.d, cpu_ops(), c.B, c.T);
    // The FLOP count's GEMM part against the layout (attention is the only other term).
    const double attn = 12.0 * c.d.L * c.d.attn_dim() * c.T * c.B * c.T;
    const double counted = (bench::train_flops(c.d, c.B, c.T) - attn) / (6.0 * c.B * c.T);
    const double from_layout = gemm_weights_from_layout(m->layout(), c.d);
    ok &= bench::check(std::string(c.name) + " GEMM weights in train_flops vs layout",
                       std::fabs(counted - from_layout) / from_layout, 1e-12);
    std::vector<float> p;
    model::init_params(p, m->layout(), c.d, 1);
    m->set_params_from_host(p);
    optim::AdamW opt(*m);
    const auto batch = bench::random_batch(c.B, c.T, c.d.V);
    int t = 0;
    optim::StepStats stats;
    auto step = [&] {
      m->zero_grads();
      m->forward_backward(batch);
      stats = opt.apply(cfg, 1e-4, ++t);
    };
    step();  // check before timing: at initialisation the loss is close to ln(V)
    ok &= bench::check(std::string(c.name) + " initial loss vs ln(V)", std::fabs(stats.loss - std::log(c.d.V)), 0.5);
    if (!ok) break;
    const double ms = bench::median_ms(step, c.reps, c.warmup);
    const double gflops = bench::train_flops(c.d, c.B, c.T) / (ms * 1e-3) / 1e9;
    // The reference GEMM: the LM head, N = B·T rows, K = C, V outputs (the one that dominates the
    // GPT-2 steps; for smollm2-135m the MLP GEMMs are 3× its work, at a smaller N = 2F).
    const double peak = bench::sgemm_gflops(c.B * c.T, c.d.V, c.d.C, 5);
    table.add_row({c.name, bench::fmt(m->layout().total / 1e6, 1), bench::fmt(ms, 1),
                   bench::fmt(c.B * c.T / (ms * 1e-3), 0), bench::fmt(gflops, 1), bench::fmt(peak, 1),
                   bench::fmt(gflops / peak, 2)});
  }
  std::printf("threads: %d\n", threads);
  table.print();
  return ok ? 0 : 1;
}
