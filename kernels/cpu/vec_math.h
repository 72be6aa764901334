// kernels/cpu/vec_math.h — exp and sigmoid written as plain, branch-free float code so that GCC
// vectorises the loops that call them (glibc's expf/tanhf only vectorise under -ffast-math).
// Private to kernels/cpu. Accuracy: exp within ~2 ulp of expf over [-87.33, 88.37], exactly 0
// below (where expf is denormal or 0) and +inf above; sigmoid within a few ulp (relative).
// The result depends only on the argument, never on the thread count.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

namespace sftdp::cpu {

// e^x with Cody–Waite range reduction x = n·ln2 + r, |r| <= ln2/2, and the Cephes degree-6
// minimax polynomial for e^r; 2^n is built directly in the exponent bits.
inline float vec_exp(float x) {
  const float lo = x > -87.33f ? x : -87.33f;  // ternaries, not fmin/fmax: those carry NaN
  const float clamped = lo < 88.37f ? lo : 88.37f;  // rules that block vectorisation
  // Round to nearest by adding 1.5·2^23 (std::floor does not vectorise while trapping-math is on).
  const float shifted = clamped * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  float r = clamped - n * 0.693359375f;  // ln2 split in two: the high part is exact in float
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float y = er * two_n;
  // selects, not branches: they keep the calling loop vectorisable
  const float high = x > 88.37f ? std::numeric_limits<float>::infinity() : y;
  return x < -87.33f ? 0.0f : high;
}

// σ(z) = 1 / (1 + e^{−z}); saturates to exactly 1 and 0, with no cancellation anywhere.
// GELU uses it because 0.5·(1 + tanh u) = σ(2u) and 1 − tanh²u = 4·σ(2u)·(1 − σ(2u)).
inline float vec_sigmoid(float z) { return 1.0f / (1.0f + vec_exp(-z)); }

}  // namespace sftdp::cpu
