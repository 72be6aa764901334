// kernels/attention.h — causal grouped-query self-attention, scaled by 1/sqrt(HS).
// B batch, T seq, NH query heads, KVH key/value heads (NH % KVH == 0), HS head size.
// qkv rows are QKV = (NH + 2·KVH)·HS wide: NH q heads, then KVH k heads, then KVH v heads.
// Query head h reads k/v head h / (NH/KVH) (GQA; KVH == NH is multi-head attention, which is
// GPT-2 with HS = C/NH). out rows are NH·HS wide.
// With seg (segment ids, may be null) position t attends to t2 <= t only when
// seg[t2] == seg[t]: attention never crosses a packed segment.
// att holds the softmax probabilities (masked entries exactly 0), saved for backward.
// Accumulation: dqkv = (overwritten; a k/v head's gradient sums its NH/KVH query heads in
// increasing h). datt is scratch of att's shape.
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void attention_fwd(float* out, float* att,                   // (B,T,NH·HS) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,     // (B,T,QKV) (B,T) or null
                   int B, int T, int NH, int KVH, int HS);
void attention_bwd(float* dqkv, float* datt,                 // (B,T,QKV) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,      // (B,T,NH·HS) (B,T,QKV)
                   const float* att,                         // (B,NH,T,T)
                   int B, int T, int NH, int KVH, int HS);
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
// cuBLAS(Lt) strided-batched GEMMs (always fp32) plus masked-softmax kernels.
void attention_fwd(float* out, float* att,                   // (B,T,NH·HS) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,     // (B,T,QKV) (B,T) or null
                   int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
void attention_bwd(float* dqkv, float* datt,                 // (B,T,QKV) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,      // (B,T,NH·HS) (B,T,QKV)
                   const float* att,                         // (B,NH,T,T)
                   int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
