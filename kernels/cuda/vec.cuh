// kernels/cuda/vec.cuh — 16-byte vectors for the memory-bound kernels (llm.c's Packed128; STYLE.md "Data
// moves in 128-bit pieces"). Vec<T> is 16 bytes of T (4 floats, 8 bf16 or uint16_t, 2 doubles); load_vec /
// store_vec move one in a single 128-bit access (ld.global.v4 / st.global.v4), the _cs variants with the
// streaming hint (evict first: data read or written once). vector_head() says where a vector path can
// start for a set of pointers; vector_loop() splits [0, n) into aligned vectors and a scalar head and tail
// and deals them out in a stride loop; for_each_row_by_warp() gives each warp of the grid its rows. Every
// element keeps its own arithmetic and one writer, so results are the scalar kernels' bits whatever the
// split or the grid. In the simulator build every vector access checks its alignment as a GPU does: a
// misaligned one fails the launch with cudaErrorMisalignedAddress (cudasim/launch.h).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace sftdp::cuda {

constexpr int kVecBytes = 16;

template <class T>
struct alignas(kVecBytes) Vec {
  static constexpr int kSize = static_cast<int>(kVecBytes / sizeof(T));
  T v[kSize];
  __device__ __forceinline__ T& operator[](int i) { return v[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
static_assert(sizeof(Vec<float>) == kVecBytes && sizeof(Vec<__nv_bfloat16>) == kVecBytes &&
                  sizeof(Vec<uint16_t>) == kVecBytes && sizeof(Vec<double>) == kVecBytes,
              "a Vec is 16 bytes");

// The storage types of the elementwise kernels, computed in fp32: float as it is, bf16 widened (exact)
// and rounded back to nearest even.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_float(float x) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>, "float or bf16 storage");
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return __float2bfloat16_rn(x);
}

// In the simulator build each access takes its caller's source line for the misalignment report.
#ifdef SFTDP_CUDA_SIM
#define SFTDP_VEC_SITE , const char *file = __builtin_FILE(), int line = __builtin_LINE()
#else
#define SFTDP_VEC_SITE
#endif

namespace vec_detail {
// The 16 bytes of a Vec as one int4 (both 16-byte aligned): what a 128-bit access moves. Through the
// int4 lvalue, not memcpy, so the compiler keeps the alignment and emits one v4 access.
template <class T>
__device__ __forceinline__ int4& bits(Vec<T>& v) {
  return *reinterpret_cast<int4*>(&v);
}
template <class T>
__device__ __forceinline__ const int4& bits(const Vec<T>& v) {
  return *reinterpret_cast<const int4*>(&v);
}
}  // namespace vec_detail

// p: 16-byte aligned global memory (load_vec and store_vec), read or written by the next ops as usual.
template <class T>
__device__ __forceinline__ Vec<T> load_vec(const T* p SFTDP_VEC_SITE) {
#ifdef SFTDP_CUDA_SIM
  Vec<T> v;
  if (::sftdp::sim::check_vector_access(p, kVecBytes, /*store=*/false, file, line))
    std::memcpy(static_cast<void*>(&v), static_cast<const void*>(p), sizeof v);
  else
    std::memset(static_cast<void*>(&v), 0, sizeof v);
  return v;
#else
  Vec<T> v;
  vec_detail::bits(v) = *reinterpret_cast<const int4*>(p);
  return v;
#endif
}
// Streaming load (ld.global.cs): global memory read once, kept out of the way of the cache.
template <class T>
__device__ __forceinline__ Vec<T> load_vec_cs(const T* p SFTDP_VEC_SITE) {
#ifdef SFTDP_CUDA_SIM
  return load_vec(p, file, line);
#else
  Vec<T> v;
  vec_detail::bits(v) = __ldcs(reinterpret_cast<const int4*>(p));
  return v;
#endif
}
template <class T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T>& v SFTDP_VEC_SITE) {
#ifdef SFTDP_CUDA_SIM
  if (::sftdp::sim::check_vector_access(p, kVecBytes, /*store=*/true, file, line))
    std::memcpy(static_cast<void*>(p), static_cast<const void*>(&v), sizeof v);
#else
  // st.global.wb.v4 (the default policy) as one instruction: a plain int4 store may be split into four
  // scalar ones (seen in swiglu_fwd_kernel's PTX, nvcc 13.0) when the compiler loses track of the alignment.
  __stwb(reinterpret_cast<int4*>(p), vec_detail::bits(v));
#endif
}
// Streaming store (st.global.cs): what no kernel of this step reads again soon.
template <class T>
__device__ __forceinline__ void store_vec_cs(T* p, const Vec<T>& v SFTDP_VEC_SITE) {
#ifdef SFTDP_CUDA_SIM
  store_vec(p, v, file, line);
#else
  __stcs(reinterpret_cast<int4*>(p), vec_detail::bits(v));
#endif
}

// The first element h in [0, width) at which every pointer p + h (in its own element type) is 16-byte
// aligned: a vector path stepping `width` elements at a time can start there. -1 if there is none (the
// pointers are misaligned relative to each other, or one is not aligned even to its element).
// `width`·sizeof(each element) must be a multiple of 16 for the later steps to stay aligned.
template <class... P>
__host__ __device__ __forceinline__ int vector_head(int width, const P*... p) {
  for (int h = 0; h < width; ++h)
    if (((reinterpret_cast<uintptr_t>(p + h) % kVecBytes == 0) && ...)) return h;
  return -1;
}

// [0, n) as vectors of V elements from `head` (vector_head's answer; -1 or > n: none) and scalars (the
// head before them, the tail after), dealt out in a stride loop: this thread takes items first,
// first + step, ... and calls vec_op(i) for a vector (elements i .. i+V-1, i - head a multiple of V) and
// scalar_op(i) for a single element. Divisions only by the constant V (shifts): no 64-bit division.
template <int V, class VecOp, class ScalarOp>
__device__ __forceinline__ void vector_loop(size_t first, size_t step, size_t n, int head, VecOp&& vec_op,
                                            ScalarOp&& scalar_op) {
  static_assert(V > 0 && (V & (V - 1)) == 0, "a power-of-two vector width");
  const bool vectors = head >= 0 && static_cast<size_t>(head) <= n;
  const size_t h = vectors ? static_cast<size_t>(head) : 0, nvec = vectors ? (n - h) / V : 0;
  for (size_t k = first; k < nvec; k += step) vec_op(h + k * V);
  const size_t tail_begin = h + nvec * V, scalars = n - nvec * V;
  for (size_t s = first; s < scalars; s += step) scalar_op(s < h ? s : tail_begin + (s - h));
}

// This thread's place in a grid-stride loop over the whole grid.
__device__ __forceinline__ size_t grid_thread() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ size_t grid_threads() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// Rows [0, rows) dealt out to the grid's warps (blockDim.x a multiple of 32): warp w takes rows w,
// w + warps, ...; row_op(row, lane) runs on all 32 lanes of the warp for each.
template <class RowOp>
__device__ __forceinline__ void for_each_row_by_warp(size_t rows, RowOp&& row_op) {
  const size_t warp = grid_thread() / kWarp, warps = grid_threads() / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (size_t r = warp; r < rows; r += warps) row_op(r, lane);
}

// Blocks of `block` threads for a warp per row over `rows` rows (rows > 0).
inline unsigned row_blocks(size_t rows, int block) { return elementwise_blocks(rows * kWarp, block); }
// Blocks for a stride loop over n elements taken V at a time (n > 0).
inline unsigned vector_blocks(size_t n, int V, int block) {
  return elementwise_blocks(ceil_div(n, static_cast<size_t>(V)), block);
}

}  // namespace sftdp::cuda
