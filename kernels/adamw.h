// kernels/adamw.h — one fused AdamW step over the whole flat parameter buffer, and the
// deterministic sum of squares used for the global gradient norm.
// N parameters; elements [0, n_decay) get decoupled weight decay (>= 2-D weights are laid out
// first), the rest (biases, LayerNorm) do not. g = grads[i] · grad_scale (grad_scale folds the
// division by the global weight sum and the clipping factor). t is the 1-based step for bias
// correction. Update: m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
//   p −= lr · ( m̂ / (√v̂ + eps) + wd · p ),  m̂ = m/(1−b1ᵗ), v̂ = v/(1−b2ᵗ).
#pragma once
#include <cstddef>

namespace sftdp::cpu {
void adamw_update(float* params, float* m, float* v,                   // (N) all updated
                  const float* grads, size_t N, size_t n_decay,        // (N)
                  float lr, float b1, float b2, float eps, float weight_decay, int t,
                  float grad_scale);
// out[0] = Σ x[i]², fixed summation order (fp64 accumulation on the CPU twin).
void sum_squares(float* out, const float* x, size_t N);               // (1) = ; (N)
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
}  // namespace sftdp::cuda
#endif
