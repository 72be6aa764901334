// kernels/cpu/act16_util.h — what the act16 CPU twins (kernels/act16.h) share: bf16 rows widened into fp32 copies
// (exact) for the fp32 twins to compute on, and fp32 results rounded once into bf16 storage. Test-only speed: the
// twins check the CUDA twins' roundings, they do not train.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/act16.h"

namespace sftdp::cpu::act16 {

// rows × cols bf16 values at row stride ld, widened to a contiguous fp32 matrix.
inline std::vector<float> widen(const uint16_t* p, size_t rows, size_t cols, size_t ld) {
  std::vector<float> out(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) out[r * cols + c] = ::sftdp::act16::to_float(p[r * ld + c]);
  return out;
}
inline std::vector<float> widen(const uint16_t* p, size_t n) { return widen(p, 1, n, n); }

// The contiguous fp32 matrix x (rows × cols) rounded into bf16 rows at stride ld.
inline void narrow(uint16_t* out, const float* x, size_t rows, size_t cols, size_t ld) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) out[r * ld + c] = ::sftdp::act16::to_bf16(x[r * cols + c]);
}
inline void narrow(uint16_t* out, const std::vector<float>& x) { narrow(out, x.data(), 1, x.size(), x.size()); }

}  // namespace sftdp::cpu::act16
