// kernels/cuda/cast.cu — bf16 <-> fp32 casts (see cast.cuh), grid-stride loops of 16-byte vectors (8
// elements a step) with scalar heads and tails (vec.cuh); also the bf16 activation storage twins of
// kernels/bf16.h (the same kernels on the 16-bit pattern).
#include "kernels/bf16.h"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/vec.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kCastWidth = 8;  // elements per vector step: 32 bytes of fp32, 16 of bf16

// out[0..8) = bf16(x[0..8)): one 16-byte store; the two 16-byte loads when x is aligned for them
// (kAlignedIn), else eight scalar loads.
template <bool kAlignedIn>
__device__ __forceinline__ void cast8_to_bf16(__nv_bfloat16* out, const float* x) {
  Vec<float> a, b;
  if constexpr (kAlignedIn) {
    a = load_vec(x);
    b = load_vec(x + 4);
  } else {
    SFTDP_UNROLL
    for (int k = 0; k < 4; ++k) {
      a[k] = x[k];
      b[k] = x[4 + k];
    }
  }
  Vec<__nv_bfloat16> y;
  SFTDP_UNROLL
  for (int k = 0; k < 4; ++k) {
    y[k] = __float2bfloat16_rn(a[k]);
    y[4 + k] = __float2bfloat16_rn(b[k]);
  }
  store_vec(out, y);  // plain store: the GEMM that follows reads it
}

// len elements from x to o, dealt out from `first` in steps of `step`: 16-byte vectors where both are
// aligned alike; where they are not (a row at an odd fp32 offset), vector stores with scalar loads; the
// head and tail element by element.
__device__ __forceinline__ void cast_run_to_bf16(__nv_bfloat16* o, const float* x, size_t len, size_t first,
                                                 size_t step) {
  const int both = vector_head(kCastWidth, o, x);
  const auto scalar = [&](size_t i) { o[i] = __float2bfloat16_rn(x[i]); };
  if (both >= 0)
    vector_loop<kCastWidth>(first, step, len, both, [&](size_t i) { cast8_to_bf16<true>(o + i, x + i); }, scalar);
  else
    vector_loop<kCastWidth>(first, step, len, vector_head(kCastWidth, o),
                            [&](size_t i) { cast8_to_bf16<false>(o + i, x + i); }, scalar);
}

// count vectors of len elements, vector j at inp + j·ld_in and out + j·ld_out. Contiguous (one vector, or
// no gaps): one run over the whole grid; else a warp per vector (no index division).
__global__ void fp32_to_bf16_kernel(__nv_bfloat16* out, size_t ld_out, const float* inp, size_t ld_in, size_t len,
                                    size_t count) {
  if (count == 1 || (ld_in == len && ld_out == len)) {
    cast_run_to_bf16(out, inp, len * count, grid_thread(), grid_threads());
    return;
  }
  for_each_row_by_warp(count, [&](size_t j, int lane) {
    cast_run_to_bf16(out + j * ld_out, inp + j * ld_in, len, lane, kWarp);
  });
}

__global__ void bf16_to_fp32_kernel(float* out, const __nv_bfloat16* inp, size_t n) {
  vector_loop<kCastWidth>(
      grid_thread(), grid_threads(), n, vector_head(kCastWidth, out, inp),
      [&](size_t i) {
        const Vec<__nv_bfloat16> x = load_vec(inp + i);
        Vec<float> a, b;
        SFTDP_UNROLL
        for (int k = 0; k < 4; ++k) {
          a[k] = __bfloat162float(x[k]);
          b[k] = __bfloat162float(x[4 + k]);
        }
        store_vec(out + i, a);
        store_vec(out + i + 4, b);
      },
      [&](size_t i) { out[i] = __bfloat162float(inp[i]); });
}

}  // namespace

void cast_fp32_to_bf16(__nv_bfloat16* out, size_t ld_out, const float* inp, size_t ld_in, size_t len,
                       size_t count, cudaStream_t stream) {
  const size_t n = len * count;
  if (n == 0) return;
  SFTDP_ASSERT(ld_in >= len && ld_out >= len, "cast_fp32_to_bf16: a leading dimension is smaller than a vector");
  const bool contiguous = count == 1 || (ld_in == len && ld_out == len);  // as the kernel decides
  const unsigned blocks = contiguous ? vector_blocks(n, kCastWidth, kBlock) : row_blocks(count, kBlock);
  SFTDP_LAUNCH(fp32_to_bf16_kernel, blocks, kBlock, 0, stream, out, ld_out, inp, ld_in, len, count);
  CHECK_LAUNCH();
}

void cast_bf16_to_fp32(float* out, const __nv_bfloat16* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  SFTDP_LAUNCH(bf16_to_fp32_kernel, vector_blocks(n, kCastWidth, kBlock), kBlock, 0, stream, out, inp, n);
  CHECK_LAUNCH();
}

void bf16_pack(uint16_t* out, const float* inp, size_t N, cudaStream_t stream) {
  // __nv_bfloat16 is the 16-bit pattern, nothing more: the storage is the same.
  cast_fp32_to_bf16(reinterpret_cast<__nv_bfloat16*>(out), N, inp, N, N, N == 0 ? 0 : 1, stream);
}

void bf16_unpack(float* out, const uint16_t* inp, size_t N, cudaStream_t stream) {
  cast_bf16_to_fp32(out, reinterpret_cast<const __nv_bfloat16*>(inp), N, stream);
}

void bf16_mirror(int slot, const float* src, const uint16_t* copy, size_t n, cudaStream_t /*stream*/) {
  set_bf16_mirror(slot, src, reinterpret_cast<const __nv_bfloat16*>(copy), n);
}

}  // namespace sftdp::cuda
