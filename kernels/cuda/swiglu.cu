// kernels/cuda/swiglu.cu — the SwiGLU gate of the Llama-family MLP on the GPU (kernels/swiglu.h).
// N rows, F hidden width; inp rows are [gate (F) | up (F)]. out = silu(gate)·up with
// silu(g) = g·σ(g), σ(g) = 1/(1 + e^−g). Accumulation: dinp = (overwritten), both halves.
// Accurate expf and IEEE division (no fast-math intrinsics). Elementwise: one writer per element.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/swiglu.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// σ(g) saturates to exactly 0 and 1 (e^−g overflowing to inf gives 0).
__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// Element i enumerates (n, f): gate at n·2F + f, up at n·2F + F + f.
__global__ void swiglu_fwd_kernel(float* out, const float* inp, int F, size_t total) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
    out[i] = g * sigmoid(g) * u;
  }
}

// d gate = dout·up·σ(g)·(1 + g·(1 − σ(g)))  (the derivative of g·σ(g)),  d up = dout·silu(g).
__global__ void swiglu_bwd_kernel(float* dinp, const float* inp, const float* dout, int F, size_t total) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / F, f = i % F;
    const size_t gi = n * 2 * F + f, ui = gi + F;
    const float g = inp[gi], u = inp[ui], s = sigmoid(g), d = dout[i];
    dinp[gi] = d * u * s * (1.f + g * (1.f - s));
    dinp[ui] = d * g * s;
  }
}

void check_dims(const char* op, int N, int F) {
  SFTDP_ASSERT(N >= 0 && F > 0, std::string(op) + ": need N >= 0 and F > 0 (got N=" + std::to_string(N) +
                                    " F=" + std::to_string(F) + ")");
}

}  // namespace

void swiglu_fwd(float* out, const float* inp, int N, int F, cudaStream_t stream) {
  check_dims("swiglu_fwd", N, F);
  const size_t total = static_cast<size_t>(N) * F;
  if (total == 0) return;
  SFTDP_LAUNCH(swiglu_fwd_kernel, elementwise_blocks(total, kBlock), kBlock, 0, stream, out, inp, F, total);
  CHECK_LAUNCH();
}

void swiglu_bwd(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream) {
  check_dims("swiglu_bwd", N, F);
  const size_t total = static_cast<size_t>(N) * F;
  if (total == 0) return;
  SFTDP_LAUNCH(swiglu_bwd_kernel, elementwise_blocks(total, kBlock), kBlock, 0, stream, dinp, inp, dout, F, total);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
