// kernels/encoder.h — token + position embedding. Legend: B batch, T seq, C channels,
// V vocab, maxT rows of the position table. pos == nullptr means positions 0..T-1.
// wpe == nullptr (Llama family: no learned positions) means token embeddings only; then
// encoder_bwd takes dwpe == nullptr and pos is ignored.
// Accumulation: parameter grads (dwte, dwpe) +=. Deterministic: every sum in a fixed order.
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void encoder_fwd(float* out,                                   // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 const float* wte, const float* wpe,           // (V,C) (maxT,C)
                 int B, int T, int C);
void encoder_bwd(float* dwte, float* dwpe,                     // (V,C) += ; (maxT,C) +=
                 const float* dout,                            // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 int B, int T, int C);
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void encoder_fwd(float* out,                                   // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 const float* wte, const float* wpe,           // (V,C) (maxT,C)
                 int B, int T, int C, cudaStream_t stream);
// Synchronises `stream` once (the token and position ids are bucketed on the host).
void encoder_bwd(float* dwte, float* dwpe,                     // (V,C) += ; (maxT,C) +=
                 const float* dout,                            // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 int B, int T, int C, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
