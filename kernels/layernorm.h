// kernels/layernorm.h — LayerNorm over the last dim, eps 1e-5 (GPT-2). N rows (= B*T), C channels.
// mean/rstd are always fp32 and saved for backward.
// Accumulation: dweight, dbias +=; dinp += as well, because dinp is the residual stream's
// gradient and the block's other branch has already written it (saves one pass, as llm.c).
// Frozen weights (LoRA): dweight and dbias both null, not computed.
#pragma once

namespace sftdp::cpu {
void layernorm_fwd(float* out, float* mean, float* rstd,             // (N,C) (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C);
void layernorm_bwd(float* dinp, float* dweight, float* dbias,        // (N,C) += ; (C) += ; (C) +=
                   const float* dout, const float* inp, const float* weight,  // (N,C) (N,C) (C)
                   const float* mean, const float* rstd,             // (N) (N)
                   int N, int C);
}  // namespace sftdp::cpu

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
#endif
