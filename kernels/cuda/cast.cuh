// kernels/cuda/cast.cuh — bf16 <-> fp32 conversion (round to nearest even; bf16 -> fp32 is exact).
// Used for bf16 GEMM inputs (gemm.cu) and by callers that keep bf16 copies of tensors.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>

namespace sftdp::cuda {
// `count` vectors of `len` contiguous elements, vector j at inp + j·ld_in and at out + j·ld_out
// (ld_in, ld_out >= len): a strided matrix copied into a buffer with its own leading dimension.
// The gaps between output vectors are not written.
void cast_fp32_to_bf16(__nv_bfloat16* out, size_t ld_out, const float* inp, size_t ld_in, size_t len,
                       size_t count, cudaStream_t stream);
void cast_bf16_to_fp32(float* out, const __nv_bfloat16* inp, size_t n, cudaStream_t stream);  // (n) (n)
}  // namespace sftdp::cuda
