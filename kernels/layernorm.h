// kernels/layernorm.h — LayerNorm over the last dim, eps 1e-5 (GPT-2). N rows (= B*T), C channels.
// mean/rstd are always fp32 and saved for backward.
// Accumulation: dweight, dbias +=; dinp += as well, because dinp is the residual stream's
// gradient and the block's other branch has already written it (saves one pass, as llm.c).
// Frozen weights (LoRA): dweight and dbias both null, not computed.
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void layernorm_fwd(float* out, float* mean, float* rstd,             // (N,C) (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C);
void layernorm_bwd(float* dinp, float* dweight, float* dbias,        // (N,C) += ; (C) += ; (C) +=
                   const float* dout, const float* inp, const float* weight,  // (N,C) (N,C) (C)
                   const float* mean, const float* rstd,             // (N) (N)
                   int N, int C);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h). layernorm_fwd: out = bf16 of the fp32 twin's out; mean and
// rstd as the fp32 twin's. layernorm_bwd, the whole backward in ONE kernel on the GPU (dout widened from bf16;
// x̂ = (x − mean)·rstd, g = weight·dout):
//   dres[n,c] = (dres_in ? dres_in[n,c] : 0) + rstd·(g − mean_c(g) − x̂·mean_c(g·x̂))   dres may be dres_in
//   dres16 = bf16(dres)                                  what the next GEMMs read (null: not written)
//   dweight[c] += Σ_n dout·x̂, dbias[c] += Σ_n dout     (null both: frozen, not computed)
//   dres_in_sum[c] += Σ_n dres_in[n,c]                  (null, or dres_in null: nothing) — the bias gradient
//                                                          of the Linear layer that wrote into the residual
//                                                          stream whose gradient dres_in is
// Column sums in fp32, deterministic (no atomic adds of values; an order fixed by N and C).
// The GPU twins take C <= 8192 (an 8-column slot per thread, a row per block at most:
// kernels/cuda/norm_act16.cuh).
namespace sftdp::cpu::act16 {
void layernorm_fwd(uint16_t* out, float* mean, float* rstd,               // (N,C) bf16 ; (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C);
void layernorm_bwd(float* dres, uint16_t* dres16,                          // (N,C) = ; (N,C) bf16 = or null
                   float* dweight, float* dbias, float* dres_in_sum,       // (C) += each, or null
                   const float* dres_in, const uint16_t* dout,             // (N,C) or null; (N,C) bf16
                   const float* inp, const float* weight,                  // (N,C) (C)
                   const float* mean, const float* rstd,                   // (N) (N)
                   int N, int C);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void layernorm_fwd(float* out, float* mean, float* rstd,             // (N,C) (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C, cudaStream_t stream);
void layernorm_bwd(float* dinp, float* dweight, float* dbias,        // (N,C) += ; (C) += ; (C) +=
                   const float* dout, const float* inp, const float* weight,  // (N,C) (N,C) (C)
                   const float* mean, const float* rstd,             // (N) (N)
                   int N, int C, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void layernorm_fwd(uint16_t* out, float* mean, float* rstd,               // (N,C) bf16 ; (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C, cudaStream_t stream);
void layernorm_bwd(float* dres, uint16_t* dres16,                          // (N,C) = ; (N,C) bf16 = or null
                   float* dweight, float* dbias, float* dres_in_sum,       // (C) += each, or null
                   const float* dres_in, const uint16_t* dout,             // (N,C) or null; (N,C) bf16
                   const float* inp, const float* weight,                  // (N,C) (C)
                   const float* mean, const float* rstd,                   // (N) (N)
                   int N, int C, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
