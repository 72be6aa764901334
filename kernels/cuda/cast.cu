// kernels/cuda/cast.cu — bf16 <-> fp32 casts (see cast.cuh), grid-stride loops; also the bf16
// activation storage twins of kernels/bf16.h (the same kernels on the 16-bit pattern).
#include "kernels/bf16.h"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

__global__ void fp32_to_bf16_kernel(__nv_bfloat16* out, size_t ld_out, const float* inp, size_t ld_in, size_t len,
                                    size_t n) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t j = idx / len, i = idx % len;
    out[j * ld_out + i] = __float2bfloat16_rn(inp[j * ld_in + i]);
  }
}

__global__ void bf16_to_fp32_kernel(float* out, const __nv_bfloat16* inp, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(inp[i]);
}

}  // namespace

void cast_fp32_to_bf16(__nv_bfloat16* out, size_t ld_out, const float* inp, size_t ld_in, size_t len,
                       size_t count, cudaStream_t stream) {
  const size_t n = len * count;
  if (n == 0) return;
  SFTDP_ASSERT(ld_in >= len && ld_out >= len, "cast_fp32_to_bf16: a leading dimension is smaller than a vector");
  SFTDP_LAUNCH(fp32_to_bf16_kernel, elementwise_blocks(n, kBlock), kBlock, 0, stream, out, ld_out, inp, ld_in, len, n);
  CHECK_LAUNCH();
}

void cast_bf16_to_fp32(float* out, const __nv_bfloat16* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  SFTDP_LAUNCH(bf16_to_fp32_kernel, elementwise_blocks(n, kBlock), kBlock, 0, stream, out, inp, n);
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
