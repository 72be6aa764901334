// kernels/attention.h — causal multi-head self-attention, scaled by 1/sqrt(HS).
// B batch, T seq, C channels, NH heads, HS = C/NH. qkv rows hold q, k, v (each C wide).
// With seg (segment ids, may be null) position t attends to t2 <= t only when
// seg[t2] == seg[t]: attention never crosses a packed segment.
// att holds the softmax probabilities (masked entries exactly 0), saved for backward.
// Accumulation: dqkv = (overwritten). datt is scratch of att's shape.
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void attention_fwd(float* out, float* att,                   // (B,T,C) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,     // (B,T,3C) (B,T) or null
                   int B, int T, int C, int NH);
void attention_bwd(float* dqkv, float* datt,                 // (B,T,3C) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,      // (B,T,C) (B,T,3C)
                   const float* att,                         // (B,NH,T,T)
                   int B, int T, int C, int NH);
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
// cuBLAS(Lt) strided-batched GEMMs (always fp32) plus masked-softmax kernels.
void attention_fwd(float* out, float* att,                   // (B,T,C) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,     // (B,T,3C) (B,T) or null
                   int B, int T, int C, int NH, cudaStream_t stream);
void attention_bwd(float* dqkv, float* datt,                 // (B,T,3C) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,      // (B,T,C) (B,T,3C)
                   const float* att,                         // (B,NH,T,T)
                   int B, int T, int C, int NH, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
