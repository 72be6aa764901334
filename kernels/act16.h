// kernels/act16.h — the bf16 activation path (issue 34, item 2): what the cuda-bf16 table's training
// step stores between its kernels (Ops::act16, kernels/ops.h). Every producer writes the dtype its
// consumer reads: the norms' outputs, q|k|v, attention's output, the MLP's hidden layer and the
// activation gradients that only GEMMs and attention read are bf16; the residual stream and its
// gradient, the norms' statistics, every weight and bias gradient sum, the loss and weight sums and the
// parameters stay fp32 (the GEMMs read the parameters' bf16 copy, kernels/bf16.h's mirrors). All math
// is fp32 (fp64 where the fp32 twins use it); a bf16 value is rounded once, to nearest even, where it
// is stored, and widened exactly where it is read. Each act16 kernel's CPU twin (sftdp::cpu::act16,
// beside the fp32 twin in kernels/cpu/<op>.cpp) makes the same roundings at the same points, so the
// CUDA twin matches it within fp32 summation-order differences, not bf16's.
// A bf16 value is its 16 bits (uint16_t), as in kernels/bf16.h, so the CPU side needs no CUDA header.
#pragma once
#include <cstdint>
#include <cstring>

namespace sftdp::act16 {

// bf16 bits of an fp32 value, rounded to nearest even (NaN: the canonical 0x7fff), and back (exact):
// what __float2bfloat16_rn and __bfloat162float do, for the CPU twins.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// What a Linear layer's forward stores (act16::linear_fwd, kernels/matmul.h).
enum class LinearOut : int {
  kBf16,          // out (bf16) = z
  kBf16Gelu,      // out (bf16) = gelu(z), pre_gelu (bf16) = z: GPT-2's MLP up-projection
  kFp32Residual,  // out (fp32) = residual + z: a projection back into the residual stream
};

}  // namespace sftdp::act16
