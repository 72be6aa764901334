// kernels/cuda/gelu.cuh — GELU, tanh form (GPT-2), and its derivative, per element on the device (accurate expf,
// IEEE division): gelu.cu's kernels and the kernels that apply GELU inside another operation (gemm.cu's act16
// epilogue fallback), so that every GPU GELU is the same one.
#pragma once

namespace sftdp::cuda {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

// σ(z) = 1 / (1 + e^{−z}): saturates to exactly 0 and 1, no cancellation.
__device__ __forceinline__ float gelu_sigmoid(float z) { return 1.f / (1.f + expf(-z)); }

// x·σ(2u) = 0.5·x·(1 + tanh u), u = √(2/π)(x + 0.044715x³).
__device__ __forceinline__ float gelu(float x) {
  return x * gelu_sigmoid(2.f * kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
}

// d/dx [x·s] = s + 2·x·s·(1 − s)·√(2/π)(1 + 3·0.044715·x²), s = σ(2u), 1 − s = σ(−2u).
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float s = gelu_sigmoid(2.f * u), one_minus_s = gelu_sigmoid(-2.f * u);
  const float du_dx = kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
  return s + 2.f * x * s * one_minus_s * du_dx;
}

}  // namespace sftdp::cuda
