// kernels/cuda/adamw.cu — one fused AdamW step over the whole flat parameter buffer, and the
// deterministic sum of squares for the global gradient norm, on the GPU (kernels/adamw.h).
// Elements [0, n_decay) get decoupled weight decay. All state (params, m, v) is fp32.
// sum_squares: fp64 per-block partials over fixed chunks, then one block sums them in a fixed
// order (reduce.cu) — no atomics, so the grad norm has the same bits on every run.
#include <cmath>
#include <string>

#include "kernels/adamw.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/vec.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// Every array read once and written once per step: streaming loads and stores (vec.cuh), 16-byte
// vectors where the four pointers share an alignment, element by element otherwise.
__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay,
                             float lr, float b1, float b2, float eps, float weight_decay, float inv_bias_correction1,
                             float inv_bias_correction2, float grad_scale) {
  // One element: (p, m, v) from (p, m, v, g); the scalar kernel's expressions, in its order.
  const auto step = [&](size_t i, float& p, float& mi, float& vi, float gi) {
    const float g = gi * grad_scale;
    mi = b1 * mi + (1.f - b1) * g;
    vi = b2 * vi + (1.f - b2) * g * g;
    const float m_hat = mi * inv_bias_correction1;
    const float v_hat = vi * inv_bias_correction2;
    const float decay = i < n_decay ? weight_decay : 0.f;
    p = p - lr * (m_hat / (sqrtf(v_hat) + eps) + decay * p);
  };
  constexpr int V = Vec<float>::kSize;
  vector_loop<V>(
      grid_thread(), grid_threads(), N, vector_head(V, params, m, v, grads),
      [&](size_t i) {
        Vec<float> p = load_vec_cs(params + i), mv = load_vec_cs(m + i), vv = load_vec_cs(v + i);
        const Vec<float> g = load_vec_cs(grads + i);
        SFTDP_UNROLL
        for (int k = 0; k < V; ++k) step(i + k, p[k], mv[k], vv[k], g[k]);
        store_vec_cs(params + i, p);
        store_vec_cs(m + i, mv);
        store_vec_cs(v + i, vv);
      },
      [&](size_t i) {
        float p = params[i], mi = m[i], vi = v[i];
        step(i, p, mi, vi, grads[i]);
        params[i] = p;
        m[i] = mi;
        v[i] = vi;
      });
}

}  // namespace

void adamw_update(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay, float lr,
                  float b1, float b2, float eps, float weight_decay, int t, float grad_scale, cudaStream_t stream) {
  SFTDP_ASSERT(t >= 1, "adamw_update: the step t is 1-based (got " + std::to_string(t) + ")");
  SFTDP_ASSERT(n_decay <= N, "adamw_update: n_decay exceeds N");
  if (N == 0) return;
  // 1 / (1 − βᵗ) in fp64, then rounded once (as the CPU twin does).
  const auto inv_bias_correction1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
  const auto inv_bias_correction2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
  SFTDP_LAUNCH(adamw_kernel, vector_blocks(N, Vec<float>::kSize, kBlock), kBlock, 0, stream, params, m, v, grads, N,
               n_decay, lr, b1, b2, eps, weight_decay, inv_bias_correction1, inv_bias_correction2, grad_scale);
  CHECK_LAUNCH();
}

void sum_squares(float* out, const float* x, size_t N, cudaStream_t stream) {
  sum_squares_into(out, x, N, stream);
}

}  // namespace sftdp::cuda
