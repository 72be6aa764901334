// kernels/cuda/reduce.cuh — deterministic reductions shared by the launchers: a global sum in two
// passes (per-block fp64 partials over fixed chunks, then one block sums them in a fixed order)
// and column sums (per-row-chunk partials, then one thread per column adds them in chunk order).
// Chunk sizes depend only on the problem size, never on the device, so the bits do not either.
#pragma once
#include <cstddef>

#include "kernels/cuda/common.cuh"

namespace sftdp::cuda {

// dst[0] = (or +=, with accumulate) Σ x[i], fp64 accumulation, fixed order.
void sum_into(float* dst, const double* x, size_t n, bool accumulate, cudaStream_t stream);  // (1) (n)
// dst[0] = Σ x[i]² (fp64 accumulation, fixed order).
void sum_squares_into(float* dst, const float* x, size_t n, cudaStream_t stream);            // (1) (n)

// Rows per chunk of the column reductions: partials hold ceil(N / kRowsPerChunk) rows.
constexpr int kRowsPerChunk = 128;
inline int column_chunks(int N) { return static_cast<int>(ceil_div(static_cast<size_t>(N), kRowsPerChunk)); }

// dst[c] += Σ_r partials[r·C + c], r ascending.
void add_column_partials(float* dst, const float* partials, int R, int C,    // (C) += ; (R,C)
                         cudaStream_t stream);
// dst[c] += Σ_n x[n·C + c]: fp32 sums over chunks of kRowsPerChunk rows, then chunk order.
void add_column_sums(float* dst, const float* x, int N, int C,                // (C) += ; (N,C)
                     cudaStream_t stream);

}  // namespace sftdp::cuda
