// kernels/bf16.h — bf16 storage of activations (dtype: bfloat16, SPEC §3): pack rounds fp32 to
// bf16 to nearest even, as __float2bfloat16_rn does (every NaN becomes the canonical 0x7fff);
// unpack widens bf16 to fp32 exactly. N elements; a bf16 value is its 16 bits (uint16_t), so the
// CPU side needs no CUDA header. Elementwise: out = (overwritten).
#pragma once
#include <cstddef>
#include <cstdint>

// bf16_mirror (dtype: bfloat16): from this call until the next one for the same slot (n = 0 clears
// it), GEMMs with bf16 inputs (the cuda-bf16 table's Linear layers, LoRA adapters and the LM head)
// read copy[i] instead of rounding src[i] again, for any operand matrix that lies inside
// [src, src + n) with a leading dimension that is a multiple of 8. The caller promises that
// meanwhile copy holds bf16_pack(src) and nothing writes either range: then the results are bitwise
// those of rounding at every GEMM, one pass over the data instead of one per GEMM that reads it.
// The model's slots: its parameters (refreshed at the start of every pass) and the bf16 copies of
// the activations only GEMMs read (sftdp/model.h). The CPU table's GEMMs never round: no-op there.
namespace sftdp {
enum Bf16MirrorSlot : int { kMirrorParams = 0, kMirrorAct0, kMirrorAct1, kMirrorAct2, kMirrorSlots };
}

namespace sftdp::cpu {
void bf16_pack(uint16_t* out, const float* inp, size_t N);    // (N) = ; (N)
void bf16_unpack(float* out, const uint16_t* inp, size_t N);  // (N) = ; (N)
void bf16_mirror(int slot, const float* src, const uint16_t* copy, size_t n);  // does nothing (see above)
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/cast.cu): same arguments, all pointers in device memory, plus the
// stream they are queued on. Bitwise equal to the CPU twins.
namespace sftdp::cuda {
void bf16_pack(uint16_t* out, const float* inp, size_t N, cudaStream_t stream);
void bf16_unpack(float* out, const uint16_t* inp, size_t N, cudaStream_t stream);
// Registers the mirror with kernels/cuda/gemm.cu (host bookkeeping: the GEMMs queued after it on
// `stream` read copy, which work queued before it on that stream has written).
void bf16_mirror(int slot, const float* src, const uint16_t* copy, size_t n, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
