// kernels/cpu/attention_tiles.h — what the CPU attention twins (attention.cpp, attention_cp.cpp,
// attention_bf16.cpp) share: FlashAttention-2's tile sizes, 16-lane row sums and maxima in one fixed
// order (vectorisable; the bits do not depend on the thread count), row-major sgemm on strided views,
// and the bf16-rounded copy the bf16 table's kernels read. Internal to kernels/cpu/.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/blas.h"

namespace sftdp::cpu::attention_tiles {

constexpr int kRows = 128;  // Br: query rows per tile; fixed, so results depend on T only
constexpr int kCols = 512;  // Bc: keys per chunk: a (Br, Bc) fp32 score tile is 256 KiB, in L2
constexpr int kLanes = 16;  // independent fp32 accumulators of a row sum: element j to lane j mod 16
constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Σ_{j<n} f(j) in a fixed order: element j to lane j mod 16, then the lanes in order. Vectorisable,
// and ~4x less rounding than one running sum over a long row.
template <class F>
inline float lane_sum(int n, F f) {
  float lane[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += f(j + l);
  for (int l = 0; j < n; ++j, ++l) lane[l] += f(j);
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

// max_{j<n} x[j] (−inf for n <= 0), lane by lane as lane_sum, so that it vectorises.
inline float lane_max(const float* x, int n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = kMasked;
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  for (int l = 0; j < n; ++j, ++l) lane[l] = x[j] > lane[l] ? x[j] : lane[l];
  float m = kMasked;
  for (int l = 0; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  return m;
}

// Row-major C(M,N) = alpha·op(A)·op(B) + beta·C on strided views (single-threaded: kernels/cpu/blas.h).
inline void gemm(bool a_t, bool b_t, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, a_t ? CblasTrans : CblasNoTrans, b_t ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
              lda, B, ldb, beta, C, ldc);
}

// n floats rounded to bf16 (to nearest even) and widened back: what the bf16 table's kernels read.
inline std::vector<float> bf16_rounded(const float* x, size_t n) {
  std::vector<uint16_t> bits(n);
  std::vector<float> r(n);
  bf16_pack(bits.data(), x, n);
  bf16_unpack(r.data(), bits.data(), n);
  return r;
}

}  // namespace sftdp::cpu::attention_tiles
