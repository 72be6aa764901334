// bench/bench_gpu_step.cpp — one optimizer step of GPT-2 124M (L12 NH12 C768 F3072 V50257) and of
// the Llama-family SmolLM2-135M (L30 NH9 KVH3 HS64 C576 F1536 V49152) on one GPU at B=8, T=1024,
// with bf16 GEMM inputs and bf16 activations (as sft_train's dtype: bfloat16 makes them), in fp32, and
// with bf16 and remat: checked first (initial loss ≈ ln V; remat
// must end on the same loss as without), then the median step time, tokens/s, achieved TFLOP/s, MFU
// against the GPU's rated dense bf16 peak and the fraction of cuBLAS's bf16 GEMM rate measured in
// the same run, the activation memory and the device memory the model and optimizer hold. Prints markdown; with
// $SFTDP_BENCH_OUT=<dir> also writes <dir>/gpu_step_<UTC>.md. Env: SFTDP_BENCH_B, SFTDP_BENCH_T,
// SFTDP_BENCH_STEPS, SFTDP_PEAK_TFLOPS (rated dense bf16 peak of a GPU other than an H200).
// Without CUDA or a device: says so, exits 0.
#include <cstdio>

#ifndef SFTDP_WITH_CUDA
int main() {
  std::printf("built without CUDA\n");
  return 0;
}
#else
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/ops.h"
#include "sftdp/check_cuda.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

using namespace sftdp;

namespace {

// The models benched, by preset name (src/config/presets.cpp).
config::ModelDims preset(const char* name) {
  config::Config cfg;
  cfg.model_name = name;
  return config::model_dims(cfg);
}

// Rated dense (no 2:4 sparsity) bf16 tensor-core peak of the H200 SXM: NVIDIA's H200 datasheet lists
// 1,979 TFLOP/s for BF16 "with sparsity", i.e. 989 TFLOP/s dense (the same as the H100 SXM). The
// MFU denominator for GPUs whose name contains "H200" (GH200 included); SFTDP_PEAK_TFLOPS overrides
// it, and other GPUs need it (else the MFU column says n/a).
constexpr double kH200DenseBf16Tflops = 989.0;

// The rated peak for this device, or 0 when unknown.
double rated_peak_tflops(const cudaDeviceProp& prop) {
  if (const char* v = std::getenv("SFTDP_PEAK_TFLOPS"); v && *v) return std::atof(v);
  return std::strstr(prop.name, "H200") ? kH200DenseBf16Tflops : 0.0;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// bf16 bits of a finite float, rounded to nearest even.
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// cudaMalloc'd memory holding n random bf16 values in [-1, 1).
void* random_bf16_device(size_t n, uint64_t seed) {
  const auto values = bench::random_floats(n, seed);
  std::vector<uint16_t> bits(n);
  std::transform(values.begin(), values.end(), bits.begin(), bf16_bits);
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(uint16_t)));
  CHECK_CUDA(cudaMemcpy(p, bits.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return p;
}

struct GemmRates {
  double bf16_out = 0, fp32_out = 0;  // TFLOP/s with C in bf16 / in fp32 (as the model's GEMMs)
};

// cuBLAS on C[M,N] = A[M,K]·B[N,K]ᵀ (row-major: the Linear forward; column-major TN), random bf16
// A and B, fp32 compute; 2·M·N·K flops per call, timed with CUDA events over `reps` calls after
// 3 warm-up calls, for each output type.
GemmRates cublas_bf16_rates(cublasHandle_t handle, int M, int N, int K, int reps = 20) {
  void* A = random_bf16_device(static_cast<size_t>(M) * K, 11);
  void* B = random_bf16_device(static_cast<size_t>(N) * K, 12);
  void* C = nullptr;
  CHECK_CUDA(cudaMalloc(&C, static_cast<size_t>(M) * N * sizeof(float)));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  auto tflops = [&](cudaDataType out_type) {
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&] {
      CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, K, A,
                                CUDA_R_16BF, K, &beta, C, out_type, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    for (int i = 0; i < 3; ++i) gemm();
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < reps; ++i) gemm();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return 2.0 * M * N * K * reps / (ms * 1e-3) / 1e12;
  };
  GemmRates r;
  r.bf16_out = tflops(CUDA_R_16BF);
  r.fp32_out = tflops(CUDA_R_32F);
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  for (void* p : {A, B, C}) CHECK_CUDA(cudaFree(p));
  return r;
}

struct StepResult {
  bool ok = false;  // both checks passed (a failed initial-loss check skips the timing)
  double ms = 0, initial_loss = 0, final_loss = 0;
  double activation_mib = 0;  // Model::activation_bytes()
  double device_mib = 0;      // device memory in use after the steps, beyond what was in use before the model
};

// zero_grads + forward_backward + AdamW::apply + synchronize, on the same batch every step, on the
// CUDA table for the given GEMM inputs.
StepResult time_steps(const config::ModelDims& d, const std::string& mode, GemmInputs inputs, bool remat,
                      const std::vector<float>& params, const data::Batch& batch, int steps) {
  const Ops& ops = *cuda_ops(inputs);
  ops.synchronize();
  size_t free_before = 0, total = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_before, &total));
  // As sft_train makes it for dtype: bfloat16 (bf16 activation storage) or float32.
  const bool bf16_activations = inputs == GemmInputs::kBf16;
  const auto model = model::make_model(d, ops, batch.B, batch.T, remat, bf16_activations);
  model::Model& m = *model;
  m.set_params_from_host(params);
  optim::AdamW opt(m);
  const config::Config cfg;  // AdamW defaults, clipping at 1.0
  int t = 0;
  optim::StepStats stats;
  auto step = [&] {
    m.zero_grads();
    m.forward_backward(batch);
    stats = opt.apply(cfg, cfg.learning_rate, ++t);
    ops.synchronize();
  };
  StepResult r;
  step();
  r.initial_loss = stats.loss;
  if (!bench::check(mode + " initial loss vs ln(V)", std::fabs(stats.loss - std::log(double(d.V))), 0.5)) return r;
  r.ms = bench::median_ms(step, steps, 1);
  r.final_loss = stats.loss;
  size_t free_after = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_after, &total));
  r.device_mib = (double(free_before) - double(free_after)) / (1 << 20);
  r.activation_mib = double(m.activation_bytes()) / (1 << 20);
  // The same batch again and again: AdamW must have lowered its loss.
  r.ok = std::isfinite(r.final_loss) && r.final_loss < r.initial_loss;
  std::printf("check %s loss falls on a repeated batch: %.4f -> %.4f after %d steps %s\n", mode.c_str(),
              r.initial_loss, r.final_loss, steps + 2, r.ok ? "OK" : "FAILED");
  return r;
}

std::string utc_stamp(const char* format) {
  const std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, format, std::gmtime(&now));
  return buf;
}

}  // namespace

int main() {
  if (cuda_ops(GemmInputs::kFp32) == nullptr) {
    std::printf("no CUDA device\n");
    return 0;
  }
  const int device = cuda_select_device(0);
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  const config::ModelDims d = preset("gpt2-124m");  // the GEMM shapes below are GPT-2's
  const int B = env_int("SFTDP_BENCH_B", 8), T = std::min(env_int("SFTDP_BENCH_T", 1024), d.maxT);
  const int steps = env_int("SFTDP_BENCH_STEPS", 10);

  // cuBLAS's bf16 rate on this GPU now: the LM head, the MLP up and down projections over M = B·T
  // tokens (V padded to 50304 as llm.c does), and a square product; the best is the MFU reference.
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  struct Shape {
    const char* what;
    int M, N, K;
  };
  const int tokens = B * T;
  const Shape shapes[] = {{"LM head", tokens, 50304, d.C},
                          {"MLP up", tokens, d.F, d.C},
                          {"MLP down", tokens, d.C, d.F},
                          {"square", 8192, 8192, 8192}};
  std::ostringstream gemm_table;
  gemm_table << "| cuBLAS bf16 GEMM | M×N×K | TFLOP/s, bf16 out | TFLOP/s, fp32 out |\n|---|---|--:|--:|\n";
  double peak = 0;
  for (const Shape& s : shapes) {
    const GemmRates r = cublas_bf16_rates(handle, s.M, s.N, s.K);
    peak = std::max({peak, r.bf16_out, r.fp32_out});
    gemm_table << "| " << s.what << " | " << s.M << "×" << s.N << "×" << s.K << " | " << bench::fmt(r.bf16_out, 1)
               << " | " << bench::fmt(r.fp32_out, 1) << " |\n";
  }
  CHECK_CUBLAS(cublasDestroy(handle));

  const auto batch = bench::random_batch(B, T, d.V);
  std::ostringstream step_table;
  const double rated_peak = rated_peak_tflops(prop);
  step_table << "| model | parameters | GEMM inputs | remat | ms/step | tokens/s | TFLOP/s | MFU | of cuBLAS bf16 | "
             << "activations MiB | device memory MiB | initial loss | loss after " << steps + 2
             << " steps |\n|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  bool ok = true;
  for (const char* name : {"gpt2-124m", "smollm2-135m"}) {
    const config::ModelDims md = preset(name);
    std::vector<float> params;
    model::init_params(params, model::param_layout(md), md, 1);
    const auto model_batch = md.V == d.V ? batch : bench::random_batch(B, T, md.V);
    const double flops = bench::train_flops(md, B, T);
    double bf16_initial = 0, bf16_final = 0;
    // bf16 GEMM inputs, fp32, and bf16 with remat (FLOPs counted without the recomputed forward)
    for (const auto& [bf16, remat] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
      const std::string mode = std::string(name) + (bf16 ? " bf16" : " fp32") + (remat ? " remat" : "");
      const StepResult r =
          time_steps(md, mode, bf16 ? GemmInputs::kBf16 : GemmInputs::kFp32, remat, params, model_batch, steps);
      ok &= r.ok;
      if (bf16 && !remat) bf16_initial = r.initial_loss, bf16_final = r.final_loss;
      if (!r.ok) continue;
      const double tflops = flops / (r.ms * 1e-3) / 1e12;
      step_table << "| " << name << " | " << params.size() << " | " << (bf16 ? "bf16" : "fp32") << " | "
                 << (remat ? "on" : "off") << " | " << bench::fmt(r.ms, 1) << " | "
                 << bench::fmt(tokens / (r.ms * 1e-3), 0) << " | " << bench::fmt(tflops, 1) << " | "
                 << (rated_peak > 0 ? bench::fmt(100.0 * tflops / rated_peak, 1) + "%" : std::string("n/a")) << " | "
                 << bench::fmt(100.0 * tflops / peak, 1) << "% | " << bench::fmt(r.activation_mib, 0) << " | "
                 << bench::fmt(r.device_mib, 0) << " | " << bench::fmt(r.initial_loss, 4) << " | "
                 << bench::fmt(r.final_loss, 4) << " |\n";
      if (!bf16) {  // same weights and data: bf16 GEMM inputs move the loss by well under 1%
        ok &= bench::check(mode + ": bf16 vs fp32 initial loss, relative",
                           std::fabs(bf16_initial / r.initial_loss - 1), 1e-2);
      }
      if (remat) {  // recomputation replays the same kernels on the same inputs: the same losses
        ok &= bench::check(mode + ": loss after the steps vs without remat (abs)", std::fabs(r.final_loss - bf16_final),
                           0.0);
      }
    }
  }

  std::ostringstream report;
  report << "# GPT-2 124M and SmolLM2-135M train steps on one GPU, " << utc_stamp("%Y-%m-%d %H:%M UTC") << "\n\n"
         << "Device: " << prop.name << " (" << prop.multiProcessorCount << " SMs). Models: gpt2-124m (L=12 NH=12 "
         << "C=768 F=3072 V=50257) and the Llama-family smollm2-135m (L=30 NH=9 KVH=3 HS=64 C=576 F=1536 V=49152, "
         << "RMSNorm, RoPE, SwiGLU, GQA, tied head); B=" << B << ", T=" << T << " (" << tokens
         << " tokens per step, a quarter of each row masked). Median of " << steps << " steps (zero_grads + "
         << "forward_backward + AdamW apply + synchronize) after one checked and one warm-up step. remat on: "
         << "activation recomputation (its extra forward is not counted in TFLOP/s). Device memory: in use after "
         << "the steps beyond what was in use before the model was built (parameters, gradients, AdamW moments, "
         << "activations, the head's chunk buffers, GEMM scratch).\n\n"
         << step_table.str() << "\n"
         << "TFLOP/s = (6·W + 12·L·A·T)·B·T per step (GPT-2: " << bench::fmt(bench::train_flops(d, B, T) / 1e12, 2)
         << " TFLOP; A = attention width NH·HS): 6 flops per "
         << "GEMM weight W and token (forward 2, backward 4) plus the attention products over the full T×T (llm.c / "
         << "PaLM convention; bench::train_flops, the count every bench uses). MFU = that rate / the rated dense "
         << "bf16 peak ("
         << (rated_peak > 0 ? bench::fmt(rated_peak, 0) + " TFLOP/s" : std::string("unknown for this GPU: set SFTDP_PEAK_TFLOPS"))
         << "; H200: " << bench::fmt(kH200DenseBf16Tflops, 0) << ", datasheet 1979 with 2:4 sparsity, halved). "
         << "Of cuBLAS bf16 = that rate / the best cuBLAS bf16 GEMM rate below (" << bench::fmt(peak, 1)
         << " TFLOP/s), measured in this run. Both rows, fp32 included, are set against the bf16 rates.\n\n"
         << gemm_table.str();
  std::printf("\n%s", report.str().c_str());

  if (const char* dir = std::getenv("SFTDP_BENCH_OUT"); dir && *dir) {
    std::string path = dir;
    path += "/gpu_step_";
    path += utc_stamp("%Y%m%dT%H%M%SZ");
    path += ".md";
    std::ofstream(path) << report.str();
    std::printf("written: %s\n", path.c_str());
  }
  return ok ? 0 : 1;
}
#endif  // SFTDP_WITH_CUDA