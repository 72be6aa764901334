// kernels/residual.h — out = a + b, elementwise over N. Its backward is the identity (the
// model routes the same gradient to both inputs), so there is no residual_bwd.
#pragma once
#include <cstddef>

namespace sftdp::cpu {
void residual_fwd(float* out, const float* a, const float* b, size_t N);  // (N) (N) (N)
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void residual_fwd(float* out, const float* a, const float* b, size_t N, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
