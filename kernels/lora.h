// kernels/lora.h — one LoRA adapter on a Linear layer (PEFT's lora.Linear; issue 17):
//   out[:, 0:OC] += scale · (x · Aᵀ) · Bᵀ        A [r, IC], B [OC, r], scale = lora_alpha / r
// out is a column slice of a wider row-major output with row stride ldo >= OC: sft-dp's stacked
// attn.qkv and mlp.fc outputs hold several Hugging Face modules side by side (q|k|v, gate|up),
// each with its own adapter. u = x·Aᵀ (N, r) is kept for the backward. N rows (= B·T).
// Accumulation:
//   lora_fwd: u = ; out +=
//   lora_bwd: dB += scale·doutᵀ·u;  du = scale·dout·B (scratch, N·r);  dA += duᵀ·x;  dx += du·A
// dout is read with the same row stride ldo as out. Five GEMMs in all, fixed blocking: the bits
// never depend on the thread count (CPU) or the run (GPU).
// lora_dropout: PEFT's lora_dropout (nn.Dropout on the adapter's input, training only), with a
// mask that depends on nothing but where the element is, so every world size and GA split draws
// the same one:  out[n, c] = keep ? inp[n, c] · keep_scale : 0, keep_scale = 1 / (1 − p),
// keep = (hash(key, rows[n / T], t, c) >> 40) · 2⁻²⁴ >= p, with rows[b] the batch row's index in the
// training data, t the element's position in its whole row (index[n mod T], or n mod T when index is null:
// context parallelism holds T of the row's positions, at index), and *key folding the seed, the step and the
// adapter (src/model/model.cpp), read from memory when the kernel runs (device memory on the GPU), so that a CUDA
// graph replays the current step's masks.
// The hash is splitmix64's finaliser chained over the four integers: the same bits on every device.
// Applied to a gradient it is its own backward. out may alias inp.
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void lora_fwd(float* out, int ldo, float* u,                   // (N,OC | ldo) += ; (N,r) =
              const float* x, const float* A, const float* B,  // (N,IC) (r,IC) (OC,r)
              float scale, int N, int IC, int r, int OC);
void lora_bwd(float* dx, float* dA, float* dB, float* du,  // (N,IC) += ; (r,IC) += ; (OC,r) += ; (N,r) =
              const float* dout, int ldo,                  // (N,OC | ldo)
              const float* x, const float* u,              // (N,IC) (N,r)
              const float* A, const float* B,              // (r,IC) (OC,r)
              float scale, int N, int IC, int r, int OC);
void lora_dropout(float* out, const float* inp,                                    // (N,C) = ; (N,C)
                  const int64_t* rows, const int32_t* index, const uint64_t* key,  // (N / T) (T or null) (1)
                  float p, float keep_scale, int N, int T, int C);
}  // namespace sftdp::cpu

namespace sftdp::lora_hash {
// The mask's hash (kernels/lora.h), host and device alike.
#if defined(__CUDACC__)  // the simulator compiles device code as host C++: no qualifier needed
#define SFTDP_HD __host__ __device__
#else
#define SFTDP_HD
#endif
SFTDP_HD inline uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// True when element (row, position, channel) is kept.
SFTDP_HD inline bool keep(uint64_t key, int64_t row, int position, int channel, float p) {
  const uint64_t h = mix(mix(mix(key ^ static_cast<uint64_t>(row)) ^ static_cast<uint64_t>(position)) ^
                         static_cast<uint64_t>(channel));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f) >= p;
}
#undef SFTDP_HD
}  // namespace sftdp::lora_hash

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/lora.cu): same arguments, all pointers in device memory, plus the
// stream. GEMMs through cuBLASLt (kernels/cuda/gemm.cuh); _bf16: every GEMM's inputs rounded to
// bf16 first (GemmInputs::kBf16), fp32 accumulation. lora_dropout matches the CPU twin bit for bit.
namespace sftdp::cuda {
void lora_fwd(float* out, int ldo, float* u, const float* x, const float* A, const float* B, float scale, int N, int IC,
              int r, int OC, cudaStream_t stream);
void lora_bwd(float* dx, float* dA, float* dB, float* du, const float* dout, int ldo, const float* x, const float* u,
              const float* A, const float* B, float scale, int N, int IC, int r, int OC, cudaStream_t stream);
void lora_fwd_bf16(float* out, int ldo, float* u, const float* x, const float* A, const float* B, float scale, int N,
                   int IC, int r, int OC, cudaStream_t stream);
void lora_bwd_bf16(float* dx, float* dA, float* dB, float* du, const float* dout, int ldo, const float* x,
                   const float* u, const float* A, const float* B, float scale, int N, int IC, int r, int OC,
                   cudaStream_t stream);
void lora_dropout(float* out, const float* inp, const int64_t* rows, const int32_t* index, const uint64_t* key,
                  float p, float keep_scale, int N, int T, int C, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
