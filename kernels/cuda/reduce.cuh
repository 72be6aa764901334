// kernels/cuda/reduce.cuh — deterministic reductions shared by the launchers: a global sum in two
// passes (per-block fp64 partials over fixed chunks, then one block sums them in a fixed order)
// and column sums (per-row-chunk partials, then one thread per column adds them in chunk order);
// and, for kernels that finish their own reduction in one launch, the last block to finish
// (last_block_to_finish: only a "blocks done" count is atomic, never a value).
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

// ---- one launch: the last block to finish sums the others' partials ----------------------------------
// The count of finished blocks that last_block_to_finish keeps: one unsigned in device memory, 0 between
// launches (zeroed when allocated; each launch's last block wraps it back to 0). One for the stream's
// kernels, which run one at a time (the Scratch slots' assumption).
unsigned* blocks_done_counter(cudaStream_t stream);

// Called by every thread of every block of the grid once the block's partials are written; true, in all
// its threads, for the block that finishes last, which may then read every block's partials (with __ldcg:
// written by other SMs in this launch). llm.c's pattern (and PyTorch's Reduce.cuh): each thread fences its
// own writes, the block counts itself done with one atomicInc whose wrap at the grid size leaves the counter
// at 0 for the next launch, and the last block fences again before it reads. The partials are then summed
// in an order fixed by their indices, never in the order the blocks finished. `finished_before`: a
// __shared__ word of the kernel's (a static in an inline function would be one per program in the
// simulator build, whose __shared__ is a static in a named section).
__device__ __forceinline__ bool last_block_to_finish(unsigned* blocks_done, unsigned& finished_before) {
  __threadfence();  // release: this thread's partials, device-wide, before the count
  __syncthreads();
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
    finished_before = atomicInc(blocks_done, blocks - 1);  // (old >= blocks - 1) ? 0 : old + 1
  __syncthreads();
  const bool last = finished_before == blocks - 1;
  if (last) __threadfence();  // acquire: the other blocks' partials are read after their counts
  return last;
}

}  // namespace sftdp::cuda
