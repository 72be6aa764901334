// kernels/kv_cache.h — the key/value cache of generation (sft_generate, src/generate): causal
// grouped-query attention of Tq new tokens at positions [p, p + Tq) against the cached keys and
// values of positions [0, p + Tq), so that a prompt's prefill is one call (Tq = its length) and each
// decoding step another (Tq = 1). One layer's cache holds k and v as (maxT, KVH·HS) rows each, row =
// position. Legend: Tq new tokens, p first new position, NH query heads, KVH key/value heads (NH %
// KVH == 0), HS head size (<= 256), QKV = (NH + 2·KVH)·HS the fused q|k|v row of kernels/attention.h
// (NH q heads, then KVH k heads, then KVH v heads; q and k already rotated by RoPE where the family
// has it).
//   kv_append:        k_cache rows [p, p + Tq) = the k heads of qkv's rows, v_cache rows = the v heads.
//   kv_attention_fwd: out[t, h] = Σ_{j <= p+t} softmax_j(q[t,h]·k[j,g] / sqrt(HS)) v[j,g], g = h / (NH/KVH):
//                     what kernels/attention.h's attention_fwd gives row p + t of the whole sequence.
// Accumulation: every output is overwritten (=). fp32 throughout; no atomics, every sum in an order
// fixed by the shape (the CUDA twin: an online softmax over key tiles of 128, one block per (t, h)).
#pragma once

namespace sftdp::cpu {
void kv_append(float* k_cache, float* v_cache,                  // (maxT, KVH·HS) (maxT, KVH·HS), rows [p, p+Tq) =
               const float* qkv,                                // (Tq, QKV)
               int p, int Tq, int NH, int KVH, int HS);
void kv_attention_fwd(float* out,                               // (Tq, NH·HS) =
                      const float* qkv,                         // (Tq, QKV): the q heads are read
                      const float* k_cache, const float* v_cache,  // (>= p+Tq, KVH·HS) each
                      int p, int Tq, int NH, int KVH, int HS);
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>
// The CUDA twins (kernels/cuda/kv_cache.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void kv_append(float* k_cache, float* v_cache, const float* qkv, int p, int Tq, int NH, int KVH, int HS,
               cudaStream_t stream);
void kv_attention_fwd(float* out, const float* qkv, const float* k_cache, const float* v_cache, int p, int Tq, int NH,
                      int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
