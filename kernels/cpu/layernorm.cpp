// kernels/cpu/layernorm.cpp — LayerNorm over the last dim (eps 1e-5), CPU twin
// (see kernels/layernorm.h). Legend: N rows (= B·T), C channels.
// Accumulation: dinp +=, dweight +=, dbias +=. The forward and dinp are parallel over rows;
// dweight/dbias are parallel over channel blocks with rows visited in order, so every sum has
// one fixed order whatever the thread count.
#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace sftdp::cpu {

namespace {
constexpr float kEps = 1e-5f;
constexpr int kChannelBlock = 64;  // channels one thread owns in the dweight/dbias pass
}  // namespace

void layernorm_fwd(float* out, float* mean, float* rstd,                    // (N,C) (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    float sum = 0.0f;
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    float sq = 0.0f;  // two-pass variance: no cancellation when |mean| >> spread
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      sq += d * d;
    }
    const float s = 1.0f / std::sqrt(sq / C + kEps);
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

// With x̂ = (x − mean)·rstd and g = dout·weight:
//   dinp = rstd · (g − mean_c(g) − x̂ · mean_c(g·x̂)).
void layernorm_bwd(float* dinp, float* dweight, float* dbias,               // (N,C) += ; (C) += ; (C) +=
                   const float* dout, const float* inp, const float* weight,  // (N,C) (N,C) (C)
                   const float* mean, const float* rstd,                    // (N) (N)
                   int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    const float m = mean[n], s = rstd[n];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float g = dy[c] * weight[c];
      g_sum += g;
      gx_sum += g * (x[c] - m) * s;
    }
    const float g_mean = g_sum / C, gx_mean = gx_sum / C;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      dx[c] += s * (dy[c] * weight[c] - g_mean - xhat * gx_mean);
    }
  }
  if (!dweight) return;  // a frozen weight and bias (LoRA): no gradients

  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {  // rows in order
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      const float m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dbias[c] += dy[c];
        dweight[c] += (x[c] - m) * s * dy[c];
      }
    }
  }
}

}  // namespace sftdp::cpu
