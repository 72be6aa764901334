// kernels/cpu/gelu.cpp — GELU, tanh form, CPU twin (see kernels/gelu.h). dinp = (overwritten).
// Work is cut into fixed blocks (not one chunk per thread) so that which elements run through
// the vector body and which through the scalar tail never depends on the thread count.
#include "kernels/gelu.h"

#include <algorithm>

#include "kernels/cpu/vec_math.h"

namespace sftdp::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr size_t kBlock = 4096;  // elements per work item; a multiple of every vector width
}  // namespace

void gelu_fwd(float* out, const float* inp, size_t N) {  // (N) (N)
  const long long n_blocks = static_cast<long long>((N + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long long blk = 0; blk < n_blocks; ++blk) {
    const size_t lo = static_cast<size_t>(blk) * kBlock, hi = std::min(N, lo + kBlock);
    for (size_t i = lo; i < hi; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      out[i] = x * vec_sigmoid(2.0f * u);  // = 0.5·x·(1 + tanh u)
    }
  }
}

// With s = σ(2u) = 0.5·(1 + tanh u): d/dx [x·s] = s + 2·x·s·(1 − s)·u'(x),
// u'(x) = √(2/π)·(1 + 3·0.044715·x²). 1 − s is computed as σ(−2u), never by subtraction, so
// the far negative tail keeps its relative accuracy.
void gelu_bwd(float* dinp, const float* inp, const float* dout, size_t N) {  // (N) = ; (N) (N)
  const long long n_blocks = static_cast<long long>((N + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long long blk = 0; blk < n_blocks; ++blk) {
    const size_t lo = static_cast<size_t>(blk) * kBlock, hi = std::min(N, lo + kBlock);
    for (size_t i = lo; i < hi; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      const float s = vec_sigmoid(2.0f * u), one_minus_s = vec_sigmoid(-2.0f * u);
      const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
      const float local_grad = s + 2.0f * x * s * one_minus_s * du_dx;
      dinp[i] = local_grad * dout[i];
    }
  }
}

}  // namespace sftdp::cpu
