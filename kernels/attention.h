// kernels/attention.h — causal grouped-query self-attention, scaled by 1/sqrt(HS), that never stores
// the T×T matrix (FlashAttention-2's contract: the forward keeps the output and each row's
// log-sum-exp, the backward recomputes the scores from q, k and that lse).
// B batch, T seq, NH query heads, KVH key/value heads (NH % KVH == 0), HS head size (<= 256).
// qkv rows are QKV = (NH + 2·KVH)·HS wide: NH q heads, then KVH k heads, then KVH v heads.
// Query head h reads k/v head h / (NH/KVH) (GQA; KVH == NH is multi-head attention, which is
// GPT-2 with HS = C/NH). out rows are NH·HS wide.
// With seg (segment ids, may be null) position t attends to t2 <= t only when
// seg[t2] == seg[t]: attention never crosses a packed segment.
// lse[b,h,t] = log Σ_{t2 visible} exp(s(t,t2)), s the scaled score: what backward needs. The
// backward also takes the forward's output: the CUDA twin's D = Σ_j P·dP is FlashAttention-2's
// Σ dO·O; the CPU twin sums D from its own P and dP instead (kernels/cpu/attention.cpp says why).
// Accumulation: out =, lse =; dqkv = (overwritten; a k/v head's gradient sums its NH/KVH query
// heads in increasing h). Deterministic: no atomics, every sum in an order fixed by the shape.
// dtype: bfloat16 (the cuda-bf16 Ops table): the tensor-core kernels (kernels/cuda/attention/tensor_cores.cu) for
// head sizes 16..128 in steps of 16, after FlashAttention-2 with bf16 q, k, v, dO, P and dS as GEMM inputs
// and fp32 accumulation; other head sizes keep the CUDA-core kernel on bf16-rounded inputs.
// cpu::attention_{fwd,bwd}_bf16 compute the same, rounding for rounding (kernels/cpu/attention_bf16.cpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

// What both twins of the bf16 attention share: its tiles, its softmax scale and which head sizes run on
// tensor cores.
namespace sftdp::attention_bf16 {
constexpr int kTile = 64;                        // query rows and keys per tile, aligned at multiples of 64
constexpr float kLog2e = 1.4426950408889634f;   // exp(x) = exp2(x·log2 e)
inline float scale(int HS) { return 1.0f / std::sqrt(static_cast<float>(HS)); }
inline float scale_log2(int HS) { return scale(HS) * kLog2e; }
inline bool tensor_cores(int HS) { return HS >= 16 && HS <= 128 && HS % 16 == 0; }
}  // namespace sftdp::attention_bf16

namespace sftdp::cpu {
void attention_fwd(float* out, float* lse,                // (B,T,NH·HS) (B,NH,T)
                   const float* qkv, const int32_t* seg,  // (B,T,QKV) (B,T) or null
                   int B, int T, int NH, int KVH, int HS);
void attention_bwd(float* dqkv,                          // (B,T,QKV) =
                   const float* dout, const float* qkv,  // (B,T,NH·HS) (B,T,QKV)
                   const float* out, const float* lse,   // (B,T,NH·HS) (B,NH,T): attention_fwd's
                   const int32_t* seg,                   // (B,T) or null
                   int B, int T, int NH, int KVH, int HS);
// Context parallelism (SPEC §1, issue 37): this rank's Tq query rows against Tk gathered keys and
// values in global order (key j is at position j). Query row t is at global position qpos[t] (the
// same for every row b) and sees keys j <= qpos[t] with seg_k[b,j] == seg_q[b,t] (both null: no
// segments). qkv: this rank's rows (B,Tq,QKV), of which the q heads are read; kv: (B,Tk,2·KVH·HS),
// the KVH k heads then the KVH v heads of every position. out (B,Tq,NH·HS) =, lse (B,NH,Tq) =, as
// attention_fwd's for the same positions of the whole sequence.
void attention_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS);
// Its backward: dqkv's q heads (B,Tq,QKV) = the gradient of this rank's queries (its k and v heads are
// not touched: the model puts the reduce-scattered dkv there); dkv (B,Tk,2·KVH·HS) = this rank's part
// of every gathered position's k and v gradient (what its queries saw: the sum over the group's
// ranks is the whole gradient). dout, out, lse: attention_cp_fwd's shapes. Sums in a fixed order
// (positions, then query heads in increasing h): the bits do not depend on the thread count.
void attention_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv, const float* out,
                      const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int B, int Tq,
                      int Tk, int NH, int KVH, int HS);
// The bf16 table's form, as attention_{fwd,bwd}_bf16 below: for head sizes on tensor cores the GPU kernels' tiles,
// roundings and summation orders (a query row's out, lse and dq bitwise the whole-row twin's row at its position;
// the ranks' dkv sum to its dk/dv up to fp32 order), else the fp32 twins on copies of q, k, v and dout rounded to bf16.
void attention_cp_fwd_bf16(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                           const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS);
void attention_cp_bwd_bf16(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                           const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                           const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS);
// Bytes of the CPU twins' own working memory for this shape on `threads` threads (kept between
// calls, grow-only): per thread a (128, 512) score tile and two (128, T) strips of P and dP, and in
// backward one fp32 k and v gradient per query head when KVH < NH. Linear in T: what the memory
// plan counts beside the activations.
size_t attention_scratch_bytes(int B, int T, int NH, int KVH, int HS, int threads);
// The bf16 table's attention (see the top of this file) on the CPU, for tests: same arguments and
// layouts, the GPU's tiles, roundings and summation orders (plain loops; not for training).
void attention_fwd_bf16(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                        int HS);
void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* seg, int B, int T, int NH, int KVH, int HS);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): q, k, v, dO and O read as bf16 where they are (no copies), the
// output and dqkv written as bf16 (one rounding each), D = Σ dO·O from the stored bf16 values; otherwise the
// bf16 table's attention above (tensor cores for HS 16..128 in steps of 16, the CUDA-core kernels elsewhere).
// The CPU twins make the same roundings (kernels/cpu/attention_bf16.cpp).
namespace sftdp::cpu::act16 {
void attention_fwd(uint16_t* out, float* lse,                // (B,T,NH·HS) bf16 ; (B,NH,T)
                   const uint16_t* qkv, const int32_t* seg,    // (B,T,QKV) bf16 ; (B,T) or null
                   int B, int T, int NH, int KVH, int HS);
void attention_bwd(uint16_t* dqkv,                            // (B,T,QKV) bf16 =
                   const uint16_t* dout, const uint16_t* qkv,  // (B,T,NH·HS) bf16 ; (B,T,QKV) bf16
                   const uint16_t* out, const float* lse,      // (B,T,NH·HS) bf16 ; (B,NH,T): the forward's
                   const int32_t* seg,                         // (B,T) or null
                   int B, int T, int NH, int KVH, int HS);
// Context parallelism on the act16 path, for head sizes on tensor cores only: attention_cp_{fwd,bwd}_bf16's
// arithmetic on bf16 q|k|v (B,Tq,QKV) and the gathered bf16 k|v (B,Tk,2·KVH·HS) read where they are (widened
// exactly), out rounded to bf16 once; the backward's dq rounded once into dqkv's q heads (its k/v heads untouched)
// and dkv (B,Tk,2·KVH·HS) in fp32: this rank's part of every gathered position's k/v gradient, which the group's
// reduce-scatter sums before the one rounding into the owner's dqkv. D = Σ dO·O from the stored bf16 values.
void attention_cp_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const uint16_t* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS);
void attention_cp_bwd(uint16_t* dqkv, float* dkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* kv,
                      const uint16_t* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                      const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/attention/cuda_cores.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. Tiles of keys and values in shared memory, fp32 accumulation; they
// match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void attention_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
                   cudaStream_t stream);
void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
// dtype: bfloat16 (the cuda-bf16 Ops table): q, k, v and dout read rounded to bf16 (to nearest
// even), all else fp32 — the fp32 twins above on bf16-rounded inputs, bit for bit.
void attention_fwd_bf16(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                        int HS, cudaStream_t stream);
void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
// Context parallelism's twins on CUDA cores (kernels/cuda/attention/context_parallel.cu): the contracts of the CPU
// twins (fp32, and the bf16 table's for head sizes without tensor-core kernels: q, k, v and dout rounded as read).
void attention_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                      cudaStream_t stream);
void attention_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv, const float* out,
                      const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int B, int Tq,
                      int Tk, int NH, int KVH, int HS, cudaStream_t stream);
void attention_cp_fwd_bf16(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                           const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                           cudaStream_t stream);
void attention_cp_bwd_bf16(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                           const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                           const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream);
// The cuda-bf16 table's entries (kernels/cuda/attention/tensor_cores.cu): tensor cores where
// attention_bf16::tensor_cores(HS), else attention_{fwd,bwd}_bf16 above. The lse is the forward's own
// (natural log), for its own backward.
void attention_tc_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                      int HS, cudaStream_t stream);
void attention_tc_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                      const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
// Context parallelism's entries of the cuda-bf16 table: the same tensor-core kernels with this rank's query rows at
// their global positions against the gathered keys and values (qpos increasing; every query row sees the key at its
// own position), where attention_bf16::tensor_cores(HS), else attention_cp_{fwd,bwd}_bf16 above. The contracts of
// cpu::attention_cp_{fwd,bwd}_bf16. A query row's out, lse and dq are bitwise those of the whole-row kernels'
// row at its position (the key tiles are the same; a tile with nothing visible to a row changes nothing of it).
void attention_tc_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                         const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                         cudaStream_t stream);
void attention_tc_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                         const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                         const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void attention_fwd(uint16_t* out, float* lse,                // (B,T,NH·HS) bf16 ; (B,NH,T)
                   const uint16_t* qkv, const int32_t* seg,    // (B,T,QKV) bf16 ; (B,T) or null
                   int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
void attention_bwd(uint16_t* dqkv,                            // (B,T,QKV) bf16 =
                   const uint16_t* dout, const uint16_t* qkv,  // (B,T,NH·HS) bf16 ; (B,T,QKV) bf16
                   const uint16_t* out, const float* lse,      // (B,T,NH·HS) bf16 ; (B,NH,T): the forward's
                   const int32_t* seg,                         // (B,T) or null
                   int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
void attention_cp_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const uint16_t* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                      cudaStream_t stream);
void attention_cp_bwd(uint16_t* dqkv, float* dkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* kv,
                      const uint16_t* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                      const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
