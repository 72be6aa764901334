// kernels/cuda/gelu.cu — GELU, tanh form (GPT-2), on the GPU (kernels/gelu.h). N elements.
// Accumulation: dinp = (overwritten). Accurate tanhf/coshf (no fast-math intrinsics), so results
// track the CPU twin to a few ulp.
#include "kernels/cuda/common.cuh"
#include "kernels/gelu.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // √(2/π)
constexpr float kCubic = 0.044715f;

__global__ void gelu_fwd_kernel(float* out, const float* inp, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
  }
}

// d/dx [0.5·x·(1 + tanh(u))] with u = √(2/π)(x + 0.044715x³):
//   0.5·(1 + tanh u) + 0.5·x·sech²(u)·√(2/π)(1 + 3·0.044715·x²).
__global__ void gelu_bwd_kernel(float* dinp, const float* inp, const float* dout, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float tanh_u = tanhf(u);
    const float cosh_u = coshf(u);
    const float sech2 = 1.f / (cosh_u * cosh_u);
    const float local = 0.5f * (1.f + tanh_u) + x * 0.5f * sech2 * kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
    dinp[i] = local * dout[i];
  }
}

}  // namespace

void gelu_fwd(float* out, const float* inp, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_fwd_kernel<<<elementwise_blocks(N, kBlock), kBlock, 0, stream>>>(out, inp, N);
  CHECK_LAUNCH();
}

void gelu_bwd(float* dinp, const float* inp, const float* dout, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_bwd_kernel<<<elementwise_blocks(N, kBlock), kBlock, 0, stream>>>(dinp, inp, dout, N);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
