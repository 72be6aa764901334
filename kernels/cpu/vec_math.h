// kernels/cpu/vec_math.h — exp and tanh written as plain, branch-free float code so that GCC
// vectorises the loops that call them (glibc's expf/tanhf only vectorise under -ffast-math).
// Private to kernels/cpu. Accuracy: exp within ~2 ulp of expf over [-87, 88]; exactly 0 below
// -87.33 (where expf is denormal or 0) and clamped to 2^127·e^... at the top; tanh within ~1e-7
// absolute. The result depends only on the argument, never on the thread count.
#pragma once
#include <bit>
#include <cstdint>

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
  return x < -87.33f ? 0.0f : y;  // select, not branch: keeps the loop vectorisable
}

// tanh(u) = 1 − 2 / (e^{2u} + 1): saturates cleanly to ±1 (e^{2u} → 0 or huge).
inline float vec_tanh(float u) { return 1.0f - 2.0f / (vec_exp(2.0f * u) + 1.0f); }

}  // namespace sftdp::cpu
