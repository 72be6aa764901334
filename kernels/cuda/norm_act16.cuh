// kernels/cuda/norm_act16.cuh — what the act16 norms (kernels/act16.h; layernorm.cu, rmsnorm.cu) share on
// the GPU. A row of W columns (a norm's row, or one q/k head) is handled by a group of P threads, each owning
// one 8-column slot of it: 8 contiguous columns moved as 16-byte vectors (two of fp32, one of bf16) where
// W % 8 == 0 and every pointer is 16-byte aligned (kVec), else the columns t, t + P, ..., t + 7P (coalesced
// scalars). P = ceil(W / 8) rounded up to a power of two (<= 32) or to whole warps, so W <= 8192 (1024
// threads). A block holds G such groups. Group sums run in a fixed order (a butterfly over the group's
// lanes, then its warps in order); a backward's column sums are kept per group in shared memory (each
// column has one owner thread: no race), merged in group order into one partial per block, and the last
// block to finish adds the partials in block order into the += outputs (reduce.cuh's
// last_block_to_finish): one launch, no atomic adds of values, the same bits whatever the block order.
// Memory is read as stored (bf16 widened exactly) and bf16 is rounded to nearest even where it is stored.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/tensor_core.cuh"  // SFTDP_DYNAMIC_SHARED

namespace sftdp::cuda::norm_act16 {

constexpr int kSlot = 8;                               // columns a thread owns in a row
constexpr int kMaxThreads = 1024;                      // one group per block at most: rows of 8192 columns
constexpr int kMaxWidth = kSlot * kMaxThreads;
constexpr int kFwdThreads = 256;                       // a forward block's size: G rows at a time
constexpr int kBwdThreads = 1024;                      // a backward block's: one per kRowsPerChunk rows
constexpr int kGroupSumScratch = 2 * 2 * kWarp;        // group_sum's `red` for K <= 2

// ---- host: the launch's shape ------------------------------------------------------------------------
// Threads per row of W columns: one slot each, rounded up to a power of two within a warp (a group is an
// aligned segment of one warp) or to whole warps.
inline int row_threads(int W) {
  const int slots = static_cast<int>(ceil_div(static_cast<size_t>(W), kSlot));
  if (slots > kWarp) return static_cast<int>(ceil_div(static_cast<size_t>(slots), kWarp)) * kWarp;
  int p = 1;
  while (p < slots) p *= 2;
  return p;
}
// Groups (rows in flight) of P threads in a block of about `target` threads, at most `max_groups`; a whole
// number of warps either way (P < 32 is a power of two, so G·P is 32·k when G·P >= 32).
inline int row_groups(int P, int target, int max_groups) {
  int G = P >= target ? 1 : target / P;
  if (G > max_groups) G = max_groups;
  while (G * P % kWarp != 0) ++G;
  return G;
}
__host__ __device__ constexpr int padded_width(int W) { return (W + 3) / 4 * 4; }  // whole float4s

template <class... P>
inline bool aligned16(const P*... p) {  // null counts as aligned (an output not written)
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// Opts `kernel` in to `bytes` of dynamic shared memory above CUDA's default 48 KiB, once per larger size.
inline void allow_dynamic_shared(const void* kernel, size_t bytes, size_t& allowed) {
  if (bytes <= allowed || bytes <= (size_t{48} << 10)) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  allowed = bytes;
}

// ---- device: a thread's slot -------------------------------------------------------------------------
// Column k of thread t's slot (P threads per row); at or past the row's W it is not there.
template <bool kVec>
__device__ __forceinline__ int slot_col(int t, int k, int P) {
  return kVec ? kSlot * t + k : t + k * P;
}

__device__ __forceinline__ float widen_bf16(uint32_t bits) { return __uint_as_float(bits << 16); }  // exact
__device__ __forceinline__ uint32_t bf16_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// The slot's values of `row` (fp32, or bf16 widened); 0 where a column is not there.
template <bool kVec>
__device__ __forceinline__ void load_slot(float (&v)[kSlot], const float* row, int t, int P, int W) {
  if constexpr (kVec) {
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
    if (kSlot * t < W) {
      a = reinterpret_cast<const float4*>(row)[2 * t];
      b = reinterpret_cast<const float4*>(row)[2 * t + 1];
    }
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k) {
      const int c = t + k * P;
      v[k] = c < W ? row[c] : 0.f;
    }
  }
}
template <bool kVec>
__device__ __forceinline__ void load_slot(float (&v)[kSlot], const uint16_t* row, int t, int P, int W) {
  if constexpr (kVec) {
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    if (kSlot * t < W) u = reinterpret_cast<const uint4*>(row)[t];
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
    SFTDP_UNROLL
    for (int i = 0; i < 4; ++i) {  // little-endian: the lower-numbered column in the low half
      v[2 * i] = widen_bf16(words[i] & 0xffffu);
      v[2 * i + 1] = widen_bf16(words[i] >> 16);
    }
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k) {
      const int c = t + k * P;
      v[k] = c < W ? widen_bf16(row[c]) : 0.f;
    }
  }
}

template <bool kVec>
__device__ __forceinline__ void store_slot(float* row, const float (&v)[kSlot], int t, int P, int W) {
  if constexpr (kVec) {
    if (kSlot * t >= W) return;
    reinterpret_cast<float4*>(row)[2 * t] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(row)[2 * t + 1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k)
      if (t + k * P < W) row[t + k * P] = v[k];
  }
}
// Rounded to bf16, to nearest even.
template <bool kVec>
__device__ __forceinline__ void store_slot(uint16_t* row, const float (&v)[kSlot], int t, int P, int W) {
  if constexpr (kVec) {
    if (kSlot * t >= W) return;
    uint32_t words[4];
    SFTDP_UNROLL
    for (int i = 0; i < 4; ++i) words[i] = bf16_bits(v[2 * i]) | (bf16_bits(v[2 * i + 1]) << 16);
    reinterpret_cast<uint4*>(row)[t] = make_uint4(words[0], words[1], words[2], words[3]);
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k)
      if (t + k * P < W) row[t + k * P] = static_cast<uint16_t>(bf16_bits(v[k]));
  }
}
// The slot's 16-bit words copied as they are (a v head passed through).
template <bool kVec>
__device__ __forceinline__ void copy_slot(uint16_t* dst, const uint16_t* src, int t, int P, int W) {
  if constexpr (kVec) {
    if (kSlot * t < W) reinterpret_cast<uint4*>(dst)[t] = reinterpret_cast<const uint4*>(src)[t];
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k)
      if (t + k * P < W) dst[t + k * P] = src[t + k * P];
  }
}

// ---- device: sums over a row group, column sums ----------------------------------------------------
// Σ of v[0..K) over the P threads of this thread's group, the same bits in each: a butterfly over the
// group's lanes (P <= 32), or each warp's butterfly and then the group's warps in order through `red`
// (P > 32, whole warps). Every thread of the block calls it at the same point. `red`: kGroupSumScratch
// floats, its halves used in turn (`parity`): a half is written again two calls later, after a barrier
// that every reader of it has passed.
template <int K>
__device__ __forceinline__ void group_sum(float (&v)[K], int P, float* red, int& parity) {
  static_assert(K >= 1 && 2 * K * kWarp <= kGroupSumScratch, "group_sum: K sums need 2·K·32 floats of red");
  if (P <= kWarp) {
    for (int offset = P / 2; offset > 0; offset >>= 1) {
      SFTDP_UNROLL
      for (int k = 0; k < K; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], offset);
    }
    return;
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float* buf = red + parity * K * kWarp;
  parity ^= 1;
  SFTDP_UNROLL
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  if (lane == 0) {
    SFTDP_UNROLL
    for (int k = 0; k < K; ++k) buf[k * kWarp + warp] = v[k];
  }
  __syncthreads();
  const int warps = P / kWarp, first = warp / warps * warps;
  SFTDP_UNROLL
  for (int k = 0; k < K; ++k) {
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += buf[k * kWarp + first + w];
    v[k] = s;
  }
}

// acc_row[c] += v[k] over the slot's columns (the thread's own: nobody else touches them until a barrier).
template <bool kVec>
__device__ __forceinline__ void add_slot(float* acc_row, const float (&v)[kSlot], int t, int P, int W) {
  if constexpr (kVec) {
    if (kSlot * t >= W) return;
    float4* a = reinterpret_cast<float4*>(acc_row) + 2 * t;
    const float4 lo = a[0], hi = a[1];
    a[0] = make_float4(lo.x + v[0], lo.y + v[1], lo.z + v[2], lo.w + v[3]);
    a[1] = make_float4(hi.x + v[4], hi.y + v[5], hi.z + v[6], hi.w + v[7]);
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k)
      if (t + k * P < W) acc_row[t + k * P] += v[k];
  }
}

// Zeroes the block's column sums: G groups × S sums × Wp floats (Wp a multiple of 4, 16-byte aligned).
__device__ __forceinline__ void zero_column_sums(float* acc, int n_float4) {
  for (int i = threadIdx.x; i < n_float4; i += blockDim.x)
    reinterpret_cast<float4*>(acc)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  __syncthreads();
}

// After every group has added its rows into acc (G groups × S sums × Wp, Wp = padded_width(W)): this block's
// partial of sum s, Σ_g acc[g][s][c] in group order, goes to partials[(s·R + block)·Wp + c] (R blocks); the
// block that finishes last then adds Σ_r partials[(s·R + r)·Wp + c], r ascending, into dst[s][c] for c < W.
// dst[s] null: sum s is not wanted (nothing written for it). Every thread of every block calls it;
// `finished_before` is a __shared__ word of the kernel's (last_block_to_finish).
template <int S>
__device__ void finish_column_sums(float* const (&dst)[S], float* partials, unsigned* blocks_done,
                                   unsigned& finished_before, const float* acc, int G, int W) {
  const int Wp = padded_width(W), n4 = Wp / 4;
  const unsigned R = gridDim.x;
  __syncthreads();  // every group's column sums are complete
  SFTDP_UNROLL
  for (int s = 0; s < S; ++s) {
    if (!dst[s]) continue;
    float4* out = reinterpret_cast<float4*>(partials + (static_cast<size_t>(s) * R + blockIdx.x) * Wp);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int g = 0; g < G; ++g) {
        const float4 a = reinterpret_cast<const float4*>(acc + (static_cast<size_t>(g) * S + s) * Wp)[i];
        sum = make_float4(sum.x + a.x, sum.y + a.y, sum.z + a.z, sum.w + a.w);
      }
      out[i] = sum;
    }
  }
  if (!last_block_to_finish(blocks_done, finished_before)) return;
  SFTDP_UNROLL
  for (int s = 0; s < S; ++s) {
    if (!dst[s]) continue;
    const float* base = partials + static_cast<size_t>(s) * R * Wp;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (unsigned r = 0; r < R; ++r) {  // L2, not L1: the other blocks wrote them in this launch
        const float4 a = __ldcg(reinterpret_cast<const float4*>(base + static_cast<size_t>(r) * Wp) + i);
        sum = make_float4(sum.x + a.x, sum.y + a.y, sum.z + a.z, sum.w + a.w);
      }
      const float parts[4] = {sum.x, sum.y, sum.z, sum.w};
      SFTDP_UNROLL
      for (int j = 0; j < 4; ++j)
        if (4 * i + j < W) dst[s][4 * i + j] += parts[j];
    }
  }
}

}  // namespace sftdp::cuda::norm_act16
