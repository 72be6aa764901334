// kernels/bf16.h — bf16 storage of activations (dtype: bfloat16, SPEC §3): pack rounds fp32 to
// bf16 to nearest even, as __float2bfloat16_rn does (every NaN becomes the canonical 0x7fff);
// unpack widens bf16 to fp32 exactly. N elements; a bf16 value is its 16 bits (uint16_t), so the
// CPU side needs no CUDA header. Elementwise: out = (overwritten).
#pragma once
#include <cstddef>
#include <cstdint>

namespace sftdp::cpu {
void bf16_pack(uint16_t* out, const float* inp, size_t N);    // (N) = ; (N)
void bf16_unpack(float* out, const uint16_t* inp, size_t N);  // (N) = ; (N)
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/cast.cu): same arguments, all pointers in device memory, plus the
// stream they are queued on. Bitwise equal to the CPU twins.
namespace sftdp::cuda {
void bf16_pack(uint16_t* out, const float* inp, size_t N, cudaStream_t stream);
void bf16_unpack(float* out, const uint16_t* inp, size_t N, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
