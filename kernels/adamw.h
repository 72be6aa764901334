// kernels/adamw.h — one fused AdamW step over the whole flat parameter buffer, and the
// deterministic sum of squares used for the global gradient norm.
// N parameters; elements [0, n_decay) get decoupled weight decay (>= 2-D weights are laid out
// first), the rest (biases, LayerNorm) do not. g = grads[i] · grad_scale (grad_scale folds the
// division by the global weight sum and the clipping factor). t is the 1-based step for bias
// correction. Update: m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
//   p −= lr · ( m̂ / (√v̂ + eps) + wd · p ),  m̂ = m/(1−b1ᵗ), v̂ = v/(1−b2ᵗ).
#pragma once
#include <cstddef>
#include <cstdint>

namespace sftdp {
// One step's settings as adamw_step reads them from device memory: written by the host before the step (a step
// captured as a CUDA graph then replays with the next step's values). Bias corrections 1 / (1 − βᵗ) in fp64, rounded
// once; clip = gradient_clipping_threshold (0: none), in fp64 as the host's decision used it.
struct AdamwHyper {
  float lr, b1, b2, eps, weight_decay, inv_bias_correction1, inv_bias_correction2;
  double clip;
};
// What adamw_step decided, written by one thread, read back by the host after the step.
struct AdamwStats {
  double loss, grad_norm, weight_sum;  // loss = loss sum / W, grad_norm = ‖g‖/W; 0 when skipped
  int32_t skipped, nonfinite;          // W = 0: no update; loss or grad_norm not finite: no update
};
}  // namespace sftdp

namespace sftdp::cpu {
void adamw_update(float* params, float* m, float* v,                   // (N) all updated
                  const float* grads, size_t N, size_t n_decay,        // (N)
                  float lr, float b1, float b2, float eps, float weight_decay, int t,
                  float grad_scale);
// out[0] = Σ x[i]², fixed summation order (fp64 accumulation on the CPU twin).
void sum_squares(float* out, const float* x, size_t N);               // (1) = ; (N)
// The whole update once the gradient sums are final, decided where it runs (no host round trip, SPEC §1): with
// W = sums[1] (the global weight sum), in fp64: no update when !(W > 0); loss = sums[0]/W, grad_norm = √sumsq[0]/W;
// no update when either is not finite; clip = clip/grad_norm where 0 < clip < grad_norm, else 1; then
// adamw_update(…, grad_scale = float(clip/W)) with hyper's settings. stats: what was decided. The same arithmetic
// as a host computing grad_scale from those sums, so the results are bitwise adamw_update's.
void adamw_step(float* params, float* m, float* v,                     // (N) all updated
                const float* grads, size_t N, size_t n_decay,          // (N)
                const AdamwHyper* hyper, const float* sums,            // (1) (2): loss sum, weight sum
                const float* sumsq, AdamwStats* stats);                // (1): sum_squares of grads ; (1) =
}  // namespace sftdp::cpu

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void adamw_update(float* params, float* m, float* v,                   // (N) all updated
                  const float* grads, size_t N, size_t n_decay,        // (N)
                  float lr, float b1, float b2, float eps, float weight_decay, int t,
                  float grad_scale, cudaStream_t stream);
// out[0] = Σ x[i]²: per-block fp64 partials, then one block sums them in a fixed order.
void sum_squares(float* out, const float* x, size_t N, cudaStream_t stream);  // (1) = ; (N)
// Every thread decides (the same fp64 arithmetic on the same three device scalars), block 0's thread 0 writes stats.
void adamw_step(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay,
                const AdamwHyper* hyper, const float* sums, const float* sumsq, AdamwStats* stats,
                cudaStream_t stream);
}  // namespace sftdp::cuda
#endif
