// kernels/cuda/residual.cu — out = a + b elementwise on the GPU (kernels/residual.h). N elements;
// out may alias a or b (each element is read before it is written, by the same thread).
#include "kernels/cuda/common.cuh"
#include "kernels/residual.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

__global__ void residual_fwd_kernel(float* out, const float* a, const float* b, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

}  // namespace

void residual_fwd(float* out, const float* a, const float* b, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  SFTDP_LAUNCH(residual_fwd_kernel, elementwise_blocks(N, kBlock), kBlock, 0, stream, out, a, b, N);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
