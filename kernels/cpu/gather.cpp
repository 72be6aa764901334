// kernels/cpu/gather.cpp — row gather and scatter, CPU twin (see kernels/gather.h). Rows are split
// over OpenMP threads; each row is one memcpy of C floats. Indices are distinct, so no two
// threads write the same row.
#include "kernels/gather.h"

#include <cstddef>
#include <cstring>

namespace sftdp::cpu {

void gather_rows(float* out, const float* inp, const int32_t* idx, int n, int C) {
  const size_t row = static_cast<size_t>(C);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i)
    std::memcpy(out + static_cast<size_t>(i) * row, inp + static_cast<size_t>(idx[i]) * row, row * sizeof(float));
}

void scatter_rows(float* out, const float* inp, const int32_t* idx, int n, int C) {
  const size_t row = static_cast<size_t>(C);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i)
    std::memcpy(out + static_cast<size_t>(idx[i]) * row, inp + static_cast<size_t>(i) * row, row * sizeof(float));
}

void copy_strided_rows(float* out, int ldo, const int32_t* oidx, const float* inp, int ldi, const int32_t* iidx, int n,
                       int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const size_t o = static_cast<size_t>(oidx ? oidx[i] : i), r = static_cast<size_t>(iidx ? iidx[i] : i);
    std::memcpy(out + o * static_cast<size_t>(ldo), inp + r * static_cast<size_t>(ldi),
                static_cast<size_t>(C) * sizeof(float));
  }
}

namespace act16 {  // the same copies of bf16 rows

void gather_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C) {
  const size_t row = static_cast<size_t>(C);
  for (int i = 0; i < n; ++i)
    std::memcpy(out + static_cast<size_t>(i) * row, inp + static_cast<size_t>(idx[i]) * row, row * sizeof(uint16_t));
}

void scatter_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C) {
  const size_t row = static_cast<size_t>(C);
  for (int i = 0; i < n; ++i)
    std::memcpy(out + static_cast<size_t>(idx[i]) * row, inp + static_cast<size_t>(i) * row, row * sizeof(uint16_t));
}


void copy_strided_rows(uint16_t* out, int ldo, const int32_t* oidx, const uint16_t* inp, int ldi, const int32_t* iidx,
                       int n, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    const size_t o = static_cast<size_t>(oidx ? oidx[i] : i), r = static_cast<size_t>(iidx ? iidx[i] : i);
    std::memcpy(out + o * static_cast<size_t>(ldo), inp + r * static_cast<size_t>(ldi),
                static_cast<size_t>(C) * sizeof(uint16_t));
  }
}
}  // namespace act16

}  // namespace sftdp::cpu
