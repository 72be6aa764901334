// kernels/rope.h — rotary position embeddings on the q and k heads of fused qkv rows, in
// Hugging Face's rotate_half layout (the layout of HF Llama/Qwen q_proj/k_proj weights, so they
// load unpermuted). qkv is (B,T,QKV) with QKV = (NH + 2·KVH)·HS: NH q heads, KVH k heads, then
// KVH v heads (untouched). For one head vector x, i < HS/2 and angle a = pos·inv_freq[i]:
//   x'[i] = x[i]·cos a − x[i+HS/2]·sin a,   x'[i+HS/2] = x[i+HS/2]·cos a + x[i]·sin a.
// pos = positions[b·T+t] when positions is non-null (packed segments restart at 0), else t.
// The angle is formed in double precision (double(pos)·double(inv_freq[i])) and its cos/sin
// taken in double, then rounded to float, in both twins: the CPU twin by libm, the CUDA twin by its
// own reduction modulo π/2 and Taylor series (kernels/cuda/rope.cu), within one double ulp of each
// other, so the floats agree except where that ulp straddles a float rounding boundary (rare).
// inv_freq (HS/2 floats, device memory) comes from the model (rope_theta, llama3 scaling).
// Both passes work in place. rope_bwd applies the transpose rotation (angle −a) to the q and k
// heads of dqkv: the gradient with respect to the un-rotated q and k.
#pragma once
#include <cstdint>
namespace sftdp::cpu {
void rope_fwd(float* qkv,                                          // (B,T,QKV) in place
              const int32_t* positions, const float* inv_freq,     // (B,T) or null; (HS/2)
              int B, int T, int NH, int KVH, int HS);
void rope_bwd(float* dqkv,                                         // (B,T,QKV) in place
              const int32_t* positions, const float* inv_freq,     // (B,T) or null; (HS/2)
              int B, int T, int NH, int KVH, int HS);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): the fp32 twins' rotation on widened bf16 values, each result
// rounded to bf16 in place.
namespace sftdp::cpu::act16 {
void rope_fwd(uint16_t* qkv,                                       // (B,T,QKV) bf16, in place
              const int32_t* positions, const float* inv_freq,      // (B,T) or null; (HS/2)
              int B, int T, int NH, int KVH, int HS);
void rope_bwd(uint16_t* dqkv,                                      // (B,T,QKV) bf16, in place
              const int32_t* positions, const float* inv_freq,      // (B,T) or null; (HS/2)
              int B, int T, int NH, int KVH, int HS);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>
// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void rope_fwd(float* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH,
              int KVH, int HS, cudaStream_t stream);
void rope_bwd(float* dqkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH,
              int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void rope_fwd(uint16_t* qkv,                                       // (B,T,QKV) bf16, in place
              const int32_t* positions, const float* inv_freq,      // (B,T) or null; (HS/2)
              int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
void rope_bwd(uint16_t* dqkv,                                      // (B,T,QKV) bf16, in place
              const int32_t* positions, const float* inv_freq,      // (B,T) or null; (HS/2)
              int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
