// kernels/swiglu.h — the SwiGLU gate of the Llama-family MLP. inp rows are the fused
// gate/up projection, (N, 2F): [gate (F) | up (F)]; out (N,F) = silu(gate)·up with
// silu(x) = x/(1 + e^−x). Accumulation: dinp = (overwritten), both halves.
#pragma once
#include <cstdint>
namespace sftdp::cpu {
void swiglu_fwd(float* out, const float* inp, int N, int F);                     // (N,F) (N,2F)
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int N, int F);  // (N,2F) = ; (N,2F) (N,F)
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): the fp32 twins' math on widened bf16 values, results rounded.
namespace sftdp::cpu::act16 {
void swiglu_fwd(uint16_t* out, const uint16_t* inp, int N, int F);                        // (N,F) ; (N,2F)
void swiglu_bwd(uint16_t* dinp, const uint16_t* inp, const uint16_t* dout, int N, int F);  // (N,2F) = ; (N,2F) (N,F)
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>
// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void swiglu_fwd(float* out, const float* inp, int N, int F, cudaStream_t stream);
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void swiglu_fwd(uint16_t* out, const uint16_t* inp, int N, int F, cudaStream_t stream);                        // (N,F) ; (N,2F)
void swiglu_bwd(uint16_t* dinp, const uint16_t* inp, const uint16_t* dout, int N, int F, cudaStream_t stream);  // (N,2F) = ; (N,2F) (N,F)
}  // namespace sftdp::cuda::act16
#endif
