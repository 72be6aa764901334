// kernels/cuda/adamw.cu — one fused AdamW step over the whole flat parameter buffer, and the
// deterministic sum of squares for the global gradient norm, on the GPU (kernels/adamw.h).
// Elements [0, n_decay) get decoupled weight decay. All state (params, m, v) is fp32.
// sum_squares: fp64 per-block partials over fixed chunks, then one block sums them in a fixed
// order (reduce.cu) — no atomics, so the grad norm has the same bits on every run. adamw_step: the same update
// with its decisions (skip, not finite, clip, 1/W) made on the device from the sums, so a step waits for nothing.
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

// What adamw_step decides, from the three device scalars, in fp64 (every thread the same bits).
struct Decision {
  AdamwStats stats{};
  float grad_scale = 0.f;
  bool update = false;
};
__device__ __forceinline__ Decision decide(const AdamwHyper& h, const float* sums, const float* sumsq) {
  Decision d;
  d.stats.weight_sum = sums[1];
  if (!(d.stats.weight_sum > 0)) {
    d.stats.skipped = 1;
    return d;
  }
  d.stats.loss = sums[0] / d.stats.weight_sum;
  d.stats.grad_norm = sqrt(static_cast<double>(sumsq[0])) / d.stats.weight_sum;
  if (!isfinite(d.stats.loss) || !isfinite(d.stats.grad_norm)) {
    d.stats.nonfinite = 1;
    return d;
  }
  const double clip = h.clip > 0 && d.stats.grad_norm > h.clip ? h.clip / d.stats.grad_norm : 1.0;
  d.grad_scale = static_cast<float>(clip / d.stats.weight_sum);
  d.update = true;
  return d;
}

// adamw_kernel's update with its settings and grad_scale read from device memory (adamw.h's adamw_step).
__global__ void adamw_step_kernel(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay,
                                  const AdamwHyper* hyper, const float* sums, const float* sumsq, AdamwStats* stats) {
  const AdamwHyper h = *hyper;
  const Decision d = decide(h, sums, sumsq);
  if (blockIdx.x == 0 && threadIdx.x == 0) *stats = d.stats;
  if (!d.update) return;  // uniform: every thread decided the same
  const float grad_scale = d.grad_scale;
  const auto step = [&](size_t i, float& p, float& mi, float& vi, float gi) {
    const float g = gi * grad_scale;
    mi = h.b1 * mi + (1.f - h.b1) * g;
    vi = h.b2 * vi + (1.f - h.b2) * g * g;
    const float m_hat = mi * h.inv_bias_correction1;
    const float v_hat = vi * h.inv_bias_correction2;
    const float decay = i < n_decay ? h.weight_decay : 0.f;
    p = p - h.lr * (m_hat / (sqrtf(v_hat) + h.eps) + decay * p);
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

void adamw_step(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay,
                const AdamwHyper* hyper, const float* sums, const float* sumsq, AdamwStats* stats,
                cudaStream_t stream) {
  SFTDP_ASSERT(n_decay <= N, "adamw_step: n_decay exceeds N");
  // At least one block, so that stats are written for an empty buffer too.
  const unsigned blocks = N == 0 ? 1u : vector_blocks(N, Vec<float>::kSize, kBlock);
  SFTDP_LAUNCH(adamw_step_kernel, blocks, kBlock, 0, stream, params, m, v, grads, N, n_decay, hyper, sums, sumsq,
               stats);
  CHECK_LAUNCH();
}

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
