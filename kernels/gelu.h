// kernels/gelu.h — GELU, tanh form (GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// N elements. Accumulation: dinp = (overwritten).
#pragma once
#include <cstddef>

namespace sftdp::cpu {
void gelu_fwd(float* out, const float* inp, size_t N);                    // (N) (N)
void gelu_bwd(float* dinp, const float* inp, const float* dout, size_t N);  // (N) = ; (N) (N)
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void gelu_fwd(float* out, const float* inp, size_t N, cudaStream_t stream);
void gelu_bwd(float* dinp, const float* inp, const float* dout, size_t N, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
