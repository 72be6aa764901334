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
#endif
