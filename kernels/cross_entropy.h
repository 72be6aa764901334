// kernels/cross_entropy.h — masked cross-entropy, fused with its backward (SPEC §1).
// N rows (= B*T), V vocab. For each row n with weight w = weights[n]:
//   loss_n = w · (−log softmax(logits[n])[targets[n]])
// sums[0] += Σ loss_n (the loss SUM), sums[1] += Σ w (the weight SUM). Nothing is divided.
// If dlogits is not null it receives w · (softmax − onehot(target)) (= ; may alias logits, in
// place). Rows with w == 0 get dlogits = 0 and add nothing. Sums are reduced in a fixed order
// (deterministic; the CPU twin accumulates in fp64).
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void cross_entropy_fwd_bwd(float* sums,                                  // (2) +=
                           float* dlogits,                               // (N,V) = or null
                           const float* logits,                          // (N,V)
                           const int32_t* targets, const float* weights,  // (N) (N)
                           int N, int V);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): logits bf16 at row stride ld (>= V: the LM head pads V to a
// multiple of 64), the softmax and the two sums in fp32/fp64 as the fp32 twin, dlogits = bf16(w·(p − onehot))
// in place (dlogits may equal logits; columns V..ld untouched). At most two launches on the GPU.
namespace sftdp::cpu::act16 {
void cross_entropy_fwd_bwd(float* sums,                                  // (2) +=
                           uint16_t* dlogits, const uint16_t* logits,    // (N,ld) bf16 = or null ; (N,ld) bf16
                           int ld,                                       // row stride >= V
                           const int32_t* targets, const float* weights,  // (N) (N)
                           int N, int V);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
// One block per row (online max and sum), then a fixed-order fp64 reduction: no atomics.
void cross_entropy_fwd_bwd(float* sums,                                  // (2) +=
                           float* dlogits,                               // (N,V) = or null
                           const float* logits,                          // (N,V)
                           const int32_t* targets, const float* weights,  // (N) (N)
                           int N, int V, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void cross_entropy_fwd_bwd(float* sums,                                  // (2) +=
                           uint16_t* dlogits, const uint16_t* logits,    // (N,ld) bf16 = or null ; (N,ld) bf16
                           int ld,                                       // row stride >= V
                           const int32_t* targets, const float* weights,  // (N) (N)
                           int N, int V, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
