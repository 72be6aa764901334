// kernels/cpu/bf16.cpp — bf16 pack and unpack, CPU twins (kernels/bf16.h): the bit arithmetic of
// CUDA's host __float2bfloat16_rn (round to nearest, ties to even; NaN -> 0x7fff) and the exact
// widening back. Plain loops, bitwise what the CUDA twins give.
#include "kernels/bf16.h"

#include <cstring>

namespace sftdp::cpu {

void bf16_pack(uint16_t* out, const float* inp, size_t N) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(N); ++i) {
    uint32_t x;
    std::memcpy(&x, &inp[i], sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
      out[i] = 0x7fff;
      continue;
    }
    const uint32_t remainder = x << 16;  // the 16 bits that are dropped, at the top
    uint16_t r = static_cast<uint16_t>(x >> 16);
    if (remainder > 0x80000000u || (remainder == 0x80000000u && (r & 1u))) ++r;
    out[i] = r;
  }
}

void bf16_unpack(float* out, const uint16_t* inp, size_t N) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(N); ++i) {
    const uint32_t x = uint32_t{inp[i]} << 16;
    std::memcpy(&out[i], &x, sizeof x);
  }
}

void bf16_mirror(int /*slot*/, const float* /*src*/, const uint16_t* /*copy*/, size_t /*n*/) {}

}  // namespace sftdp::cpu
