// bench/bench_sft_step.cpp — one whole optimizer step on the CPU (forward, backward, global norm,
// AdamW) on SFT-shaped data, with the fused LM head + cross-entropy of Model (only positions with
// loss weight != 0 go through the head, in chunks) against the unfused head it replaced (every
// position through one (B·T, V) logits buffer: Model::set_head_chunking(0, true)). Shapes: llm.c's
// bench shape (GPT-2 124M: L12 NH12 C768 V50257, B=4, T=64), the 4-layer C=256 GPT-2 of
// bench_train_step, and 124M with 256-token rows (no unfused head there). Data: every position weighted ("0% masked"), and each row's prompt prefix of
// 60% of T masked (weight 0) as in SFT. Also gradient accumulation: k micro-steps of b rows vs one
// micro-step of k·b rows (same rows, same optimizer step). Reports ms/step, tokens/s, GFLOP/s of
// bench::train_flops (the nominal count: every token through the head) and of the "useful" count
// (the head only on weighted tokens), the speedup of 60% masked over unmasked, this machine's
// cblas_sgemm GFLOP/s measured in the same run at the LM-head shape and the step's ratio to it, the
// head's logits buffer (fused vs unfused), and C++ heap allocations (operator new) per timed step.
// Beside them: the optimizer's time alone, this machine's memory bandwidth (STREAM triad), and
// the bounds they put on the masked speedup and on the GA overhead (see the bounds table).
// The configurations run interleaved, one step each per round (the machine may be shared).
// Rates and ratios use each configuration's best round (least disturbed by other jobs); the median is
// printed beside it. Threads: $SFTDP_BENCH_THREADS (default 2). Rounds: $SFTDP_BENCH_REPS (default
// 5, plus 1 warm-up).
// $SFTDP_BENCH_CASE: only the models whose name starts with it.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/ops.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

using namespace sftdp;

// Every C++ heap allocation of the process is counted (OpenBLAS's and libgomp's own malloc calls
// are not: they are not operator new).
namespace {
std::atomic<long> g_news{0};
}
void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

config::ModelDims preset(const char* name) {
  config::Config c;
  c.model_name = name;
  return config::model_dims(c);
}

// Rows [lo, hi) of b.
data::Batch rows_of(const data::Batch& b, int lo, int hi) {
  data::Batch s;
  s.B = hi - lo, s.T = b.T;
  const size_t a = size_t(lo) * b.T, e = size_t(hi) * b.T;
  s.inputs.assign(b.inputs.begin() + a, b.inputs.begin() + e);
  s.targets.assign(b.targets.begin() + a, b.targets.begin() + e);
  s.loss_weights.assign(b.loss_weights.begin() + a, b.loss_weights.begin() + e);
  return s;
}

double weighted(const data::Batch& b) {
  double n = 0;
  for (float w : b.loss_weights) n += w != 0.0f;
  return n;
}

// One optimizer step: zero_grads, forward_backward of each micro-batch, AdamW apply.
struct Config {
  std::string label;
  model::Model* m;
  optim::AdamW* opt;
  std::vector<data::Batch> micro;
  std::vector<double> ms;
  long news = 0;
  int t = 0;
  void step() {  // with no micro-batch: the optimizer's share alone (zero, norm, AdamW)
    config::Config cfg;  // defaults: AdamW with clipping
    m->zero_grads();
    for (const auto& b : micro) m->forward_backward(b);
    if (micro.empty()) {  // a weight sum of 0 would skip the update: 1 weighted token of loss 1
      m->grads()[m->layout().total] = 1.0f;
      m->grads()[m->layout().total + 1] = 1.0f;
    }
    opt->apply(cfg, 1e-5, ++t);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Rounds of one step of every configuration in turn, so that a change in the shared machine's
// load hits them all alike; the first round is a warm-up (every grow-only buffer at its size).
void time_interleaved(std::vector<Config>& configs, int reps) {
  for (auto& c : configs) c.ms.reserve(reps);  // no allocation of ours between the counts
  for (int round = 0; round <= reps; ++round)
    for (auto& c : configs) {
      const long news = g_news.load();
      const auto t0 = std::chrono::steady_clock::now();
      c.step();
      const auto t1 = std::chrono::steady_clock::now();
      if (round == 0) continue;
      c.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      c.news += g_news.load() - news;
    }
}

}  // namespace

int main() {
  const char* env = std::getenv("SFTDP_BENCH_THREADS");
  const int threads = env ? std::atoi(env) : 2;
  const char* reps_env = std::getenv("SFTDP_BENCH_REPS");
  const int reps = reps_env ? std::atoi(reps_env) : 5;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  struct Case {
    const char* name;
    config::ModelDims d;
    int B, T;
    bool unfused;  // also time the unfused head
  };
  // llm.c's bench shape, the small-model / big-vocabulary shape where the head dominates, and
  // llm.c's shape with SFT-length rows (256 tokens), where a one-row micro-step has 256 tokens.
  const Case cases[] = {{"gpt2-124m B=4 T=64", preset("gpt2-124m"), 4, 64, true},
                        {"L4 C256 V50257 B=4 T=64", {4, 4, 256, 1024, 50257, 1024}, 4, 64, true},
                        {"gpt2-124m B=4 T=256", preset("gpt2-124m"), 4, 256, false}};
  const double bandwidth = bench::triad_gbytes_per_s();
  bench::Table steps({"model", "head", "masked", "ms/step median", "ms/step best", "tokens/s", "GFLOP/s nominal",
                      "GFLOP/s useful", "sgemm GFLOP/s", "nominal/sgemm", "speedup vs fused 0%", "new/step"});
  bench::Table ga({"model", "k x b", "ms/step best", "vs 1 x k·b"});
  bench::Table memory({"model", "head logits buffer fused MiB", "unfused MiB"});
  bench::Table bounds({"model", "optimizer ms", "head FLOP share", "masked speedup", "bound", "k x b",
                       "GA overhead", "bandwidth estimate"});
  bool ok = true;
  const char* only = std::getenv("SFTDP_BENCH_CASE");  // a prefix of the model column
  for (const auto& c : cases) {
    if (only && !std::string(c.name).starts_with(only)) continue;
    const int N = c.B * c.T, prompt = static_cast<int>(std::lround(0.6 * c.T));
    const auto full = bench::random_batch(c.B, c.T, c.d.V, 0), masked = bench::random_batch(c.B, c.T, c.d.V, prompt);
    std::vector<float> p;
    const auto layout = model::param_layout(c.d);
    model::init_params(p, layout, c.d, 1);
    // One model per head mode; the same weights at the start of every timing.
    auto fused = model::make_model(c.d, cpu_ops(), c.B, c.T);
    auto unfused = model::make_model(c.d, cpu_ops(), c.B, c.T);
    unfused->set_head_chunking(0, /*every_row=*/true);
    // Check before timing: the two heads give the same loss sums on the masked batch.
    for (auto* m : {fused.get(), unfused.get()}) m->set_params_from_host(p);
    const auto a = fused->forward(masked), b = unfused->forward(masked);
    ok &= bench::check(std::string(c.name) + " fused vs unfused loss sum (rel)",
                       std::fabs(a.loss_sum - b.loss_sum) / b.loss_sum, 1e-6);
    ok &= bench::check(std::string(c.name) + " mean loss at init vs ln(V)",
                       std::fabs(a.loss_sum / a.weight_sum - std::log(c.d.V)), 0.5);
    if (!ok) break;
    // This machine's sgemm at the LM-head shape (N = B·T, K = C, V outputs), before and after the
    // timed steps (the machine is shared): their mean.
    const double sgemm_before = bench::sgemm_gflops(N, c.d.V, c.d.C, 5);
    const double nominal = bench::train_flops(c.d, c.B, c.T), head_per_token = 6.0 * c.d.C * c.d.V;
    // Configurations: fused / unfused head × unmasked / 60% masked, and GA (fused, unmasked):
    // k micro-steps of b rows against the one micro-step of k·b rows.
    auto split = [&](int k) {  // k micro-batches of B/k rows
      std::vector<data::Batch> micro;
      for (int i = 0; i < k; ++i) micro.push_back(rows_of(full, i * c.B / k, (i + 1) * c.B / k));
      return micro;
    };
    fused->set_params_from_host(p);
    unfused->set_params_from_host(p);
    optim::AdamW opt_fused(*fused), opt_unfused(*unfused);
    std::vector<Config> configs = {{"fused 0%", fused.get(), &opt_fused, {full}, {}},
                                   {"fused 60%", fused.get(), &opt_fused, {masked}, {}},
                                   {"unfused 0%", unfused.get(), &opt_unfused, {full}, {}},
                                   {"unfused 60%", unfused.get(), &opt_unfused, {masked}, {}},
                                   {"ga 2", fused.get(), &opt_fused, split(2), {}},
                                   {"ga 4", fused.get(), &opt_fused, split(4), {}},
                                   {"optimizer", fused.get(), &opt_fused, {}, {}}};
    if (!c.unfused) configs.erase(configs.begin() + 2, configs.begin() + 4);
    time_interleaved(configs, reps);
    const size_t n_steps = c.unfused ? 4 : 2, n_ga = configs.size() - 1;
    const double sgemm = 0.5 * (sgemm_before + bench::sgemm_gflops(N, c.d.V, c.d.C, 5));
    // Rates and ratios from the best round (the least disturbed by other jobs); medians beside.
    const double ms_full = best(configs[0].ms);
    for (size_t i = 0; i < n_steps; ++i) {
      const auto& cf = configs[i];
      const double ms = best(cf.ms);
      const double active = weighted(cf.micro[0]);
      const double useful = nominal - head_per_token * (N - active);
      const bool is_fused = i < 2;
      steps.add_row({c.name, is_fused ? "fused" : "unfused", bench::fmt(100.0 * (N - active) / N, 0) + "%",
                     bench::fmt(median(cf.ms), 1), bench::fmt(ms, 1), bench::fmt(N / (ms * 1e-3), 0),
                     bench::fmt(nominal / (ms * 1e-3) / 1e9, 1), bench::fmt(useful / (ms * 1e-3) / 1e9, 1),
                     bench::fmt(sgemm, 1), bench::fmt(nominal / (ms * 1e-3) / 1e9 / sgemm, 2),
                     bench::fmt(ms_full / ms, 2), bench::fmt(double(cf.news) / cf.ms.size(), 1)});
    }
    // Masked bound: only the head's work scales with the weighted tokens; the optimizer's time
    // (measured alone) is fixed and the rest is taken as proportional to its FLOPs. GA estimate:
    // every extra micro-step streams the >= 2-D weights again, 16 bytes per weight (read by the
    // forward GEMM and by the dinp GEMM, dW read and written by dW +=), at the triad bandwidth.
    const double ms_opt = best(configs.back().ms);
    const double head_share = head_per_token * N / nominal;
    const double masked_frac = (N - weighted(masked)) / N;
    const double masked_bound = ms_full / (ms_opt + (ms_full - ms_opt) * (1.0 - head_share * masked_frac));
    const double weight_bytes = 16.0 * double(layout.n_decay);
    for (size_t i = n_steps; i < n_ga; ++i) {
      const double ms_ga = best(configs[i].ms);
      const int k = static_cast<int>(configs[i].micro.size());
      const std::string kxb = std::to_string(k) + " x " + std::to_string(c.B / k);
      ga.add_row({c.name, kxb, bench::fmt(ms_ga, 1), bench::fmt(ms_ga / ms_full, 3)});
      const double ga_bound = 1.0 + (k - 1) * weight_bytes / (bandwidth * 1e9) * 1e3 / ms_full;
      bounds.add_row({c.name, bench::fmt(ms_opt, 1), bench::fmt(head_share, 3),
                      bench::fmt(ms_full / best(configs[1].ms), 2), bench::fmt(masked_bound, 2), kxb,
                      bench::fmt(ms_ga / ms_full, 3), bench::fmt(ga_bound, 3)});
    }
    const double mib = 1.0 / (1 << 20);
    memory.add_row({c.name, bench::fmt(double(fused->head_chunk_rows()) * c.d.V * 4 * mib, 1),
                    bench::fmt(double(N) * c.d.V * 4 * mib, 1)});
  }
  // The GPU case the issue names (124M at B=8, T=1024), from the same chunk rule.
  const auto d124 = preset("gpt2-124m");
  const int rows124 = model::Model::default_head_chunk_rows(d124.V, 8 * 1024);
  const double mib = 1.0 / (1 << 20);
  memory.add_row({"gpt2-124m B=8 T=1024 (GPU)", bench::fmt(double(rows124) * d124.V * 4 * mib, 1),
                  bench::fmt(8.0 * 1024 * d124.V * 4 * mib, 1)});
  std::printf("threads: %d, rounds: %d after 1 warm-up round (rates and ratios from the best round)\n\n", threads, reps);
  steps.print();
  std::printf("\n");
  ga.print();
  std::printf("\n");
  memory.print();
  std::printf("\nmemory bandwidth (STREAM triad, %d threads): %.1f GB/s\n", threads, bandwidth);
  std::printf("masked bound: the best speedup when only the head's work shrinks with the weighted tokens (the\n"
              "  optimizer's measured time fixed, the rest in proportion to its FLOPs).\n"
              "GA bandwidth estimate: 1 + the time to stream the >= 2-D weights 16 B each (forward and dinp GEMMs\n"
              "  read W, dW += reads and writes dW) once more per extra micro-step at the triad bandwidth; caches\n"
              "  can beat it when the weights fit in them.\n\n");
  bounds.print();
  return ok ? 0 : 1;
}
