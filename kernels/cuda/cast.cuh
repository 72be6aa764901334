// kernels/cuda/cast.cuh — bf16 <-> fp32 conversion of n elements (round to nearest even; bf16 ->
// fp32 is exact). Used for bf16 GEMM inputs and by callers that keep bf16 copies of tensors.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>

namespace sftdp::cuda {
void cast_fp32_to_bf16(__nv_bfloat16* out, const float* inp, size_t n, cudaStream_t stream);  // (n) (n)
void cast_bf16_to_fp32(float* out, const __nv_bfloat16* inp, size_t n, cudaStream_t stream);  // (n) (n)
}  // namespace sftdp::cuda
