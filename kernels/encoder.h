// kernels/encoder.h — token + position embedding. Legend: B batch, T seq, C channels,
// V vocab, maxT rows of the position table. pos == nullptr means positions 0..T-1.
// wpe == nullptr (Llama family: no learned positions) means token embeddings only; then
// encoder_bwd takes dwpe == nullptr and pos is ignored.
// Accumulation: parameter grads (dwte, dwpe) +=. Deterministic: every sum in a fixed order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sftdp {
// The embedding backward's buckets (encoder_bwd's `buckets`), built on the host from a micro-batch's ids when it is
// uploaded (Model's upload), so that the device needs no sort and the host no wait: which positions bt of the B·T
// add into which table row, each bucket's positions ascending (the order the CPU twin's loop adds them). Layout of
// `out` (ints, n = B·T): [U_tok, U_pos], the token buckets' order (n) | starts (n + 1) | rows (n), then with
// positions (with_pos: GPT-2's wpe) the position buckets the same way. encoder_buckets_ints(n) ints in all.
size_t encoder_buckets_ints(size_t n);
void encoder_buckets(const int32_t* inp, const int32_t* pos, int B, int T, bool with_pos,  // (B,T) (B,T) or null
                     std::vector<int32_t>& out);
}  // namespace sftdp

namespace sftdp::cpu {
void encoder_fwd(float* out,                                   // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 const float* wte, const float* wpe,           // (V,C) (maxT,C)
                 int B, int T, int C);
void encoder_bwd(float* dwte, float* dwpe,                     // (V,C) += ; (maxT,C) +=
                 const float* dout,                            // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 const int32_t* buckets,                       // encoder_buckets of inp, pos, or null
                 int B, int T, int C);
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void encoder_fwd(float* out,                                   // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 const float* wte, const float* wpe,           // (V,C) (maxT,C)
                 int B, int T, int C, cudaStream_t stream);
// With buckets (the device copy of encoder_buckets of these ids) it queues two kernels and waits for nothing; with
// null it copies the ids to the host, waits, buckets them there and uploads them (one stream synchronisation).
void encoder_bwd(float* dwte, float* dwpe,                     // (V,C) += ; (maxT,C) +=
                 const float* dout,                            // (B,T,C)
                 const int32_t* inp, const int32_t* pos,       // (B,T) (B,T) or null
                 const int32_t* buckets,                       // device: encoder_buckets of inp, pos, or null
                 int B, int T, int C, cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
