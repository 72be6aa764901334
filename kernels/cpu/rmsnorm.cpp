// kernels/cpu/rmsnorm.cpp — RMSNorm over the last dim and Qwen3's per-head q/k RMSNorm, CPU twin
// (see kernels/rmsnorm.h). Legend: N rows (= B·T), C channels, NH q heads, KVH k/v heads,
// HS head size, QKV = (NH + 2·KVH)·HS.
// Accumulation: rmsnorm_bwd dinp +=, dweight +=; qk_rmsnorm_bwd dqkv =, dq_weight +=,
// dk_weight +=. Forwards and input gradients are parallel over rows; weight gradients are
// parallel over channel blocks with rows (and heads) visited in order, so every sum has one
// fixed order whatever the thread count (as layernorm_bwd).
#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace sftdp::cpu {

namespace {
constexpr int kChannelBlock = 64;    // channels one thread owns in rmsnorm's dweight pass
constexpr int kHeadChannelBlock = 16;  // the same for the q/k weights (HS is small: 64–256)

// 1/sqrt(mean(x²) + eps) over n floats, summed in order in fp32.
inline float rms_rstd(const float* x, int n, float eps) {
  float sq = 0.0f;
  for (int c = 0; c < n; ++c) sq += x[c] * x[c];
  return 1.0f / std::sqrt(sq / n + eps);
}

// y = x·s·w over n floats.
inline void rms_apply(float* y, const float* x, const float* w, float s, int n) {
  for (int c = 0; c < n; ++c) y[c] = x[c] * s * w[c];
}

// With x̂ = x·rstd and g = dy·w: dx = rstd·(g − x̂·mean(g·x̂)). Adds (accumulate) or writes.
template <bool kAccumulate>
inline void rms_dinp(float* dx, const float* dy, const float* x, const float* w, float s, int n) {
  float gx_sum = 0.0f;
  for (int c = 0; c < n; ++c) gx_sum += dy[c] * w[c] * x[c] * s;
  const float gx_mean = gx_sum / n;
  for (int c = 0; c < n; ++c) {
    const float v = s * (dy[c] * w[c] - x[c] * s * gx_mean);
    if constexpr (kAccumulate) dx[c] += v;
    else dx[c] = v;
  }
}
}  // namespace

void rmsnorm_fwd(float* out, float* rstd,                // (N,C) (N)
                 const float* inp, const float* weight,  // (N,C) (C)
                 int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float s = rms_rstd(x, C, eps);
    rms_apply(out + static_cast<size_t>(n) * C, x, weight, s, C);
    rstd[n] = s;
  }
}

void rmsnorm_bwd(float* dinp, float* dweight,            // (N,C) += ; (C) +=
                 const float* dout, const float* inp,    // (N,C) (N,C)
                 const float* weight, const float* rstd,  // (C) (N)
                 int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * C;
    rms_dinp<true>(dinp + off, dout + off, inp + off, weight, rstd[n], C);
  }
  if (!dweight) return;  // a frozen weight (LoRA): no gradient

  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {  // rows in order
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      const float s = rstd[n];
      for (int c = c0; c < c1; ++c) dweight[c] += x[c] * s * dy[c];
    }
  }
}

void qk_rmsnorm_fwd(float* out, float* rstd,                       // (N,QKV) (N,NH+KVH)
                    const float* qkv,                              // (N,QKV)
                    const float* q_weight, const float* k_weight,  // (HS) (HS)
                    int N, int NH, int KVH, int HS, float eps) {
  const int QK = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = qkv + n * QKV;
    float* y = out + n * QKV;
    for (int h = 0; h < QK; ++h) {  // q heads, then k heads: contiguous in the row
      const float* xh = x + static_cast<size_t>(h) * HS;
      const float s = rms_rstd(xh, HS, eps);
      rms_apply(y + static_cast<size_t>(h) * HS, xh, h < NH ? q_weight : k_weight, s, HS);
      rstd[static_cast<size_t>(n) * QK + h] = s;
    }
    const size_t v0 = static_cast<size_t>(QK) * HS;
    std::memcpy(y + v0, x + v0, static_cast<size_t>(KVH) * HS * sizeof(float));
  }
}

void qk_rmsnorm_bwd(float* dqkv, float* dq_weight, float* dk_weight,  // (N,QKV) = ; (HS) += ; (HS) +=
                    const float* dout, const float* qkv,              // (N,QKV) (N,QKV)
                    const float* q_weight, const float* k_weight,     // (HS) (HS)
                    const float* rstd,                                // (N,NH+KVH)
                    int N, int NH, int KVH, int HS) {
  const int QK = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = qkv + n * QKV;
    const float* dy = dout + n * QKV;
    float* dx = dqkv + n * QKV;
    for (int h = 0; h < QK; ++h) {
      const size_t o = static_cast<size_t>(h) * HS;
      rms_dinp<false>(dx + o, dy + o, x + o, h < NH ? q_weight : k_weight,
                      rstd[static_cast<size_t>(n) * QK + h], HS);
    }
    const size_t v0 = static_cast<size_t>(QK) * HS;
    std::memcpy(dx + v0, dy + v0, static_cast<size_t>(KVH) * HS * sizeof(float));
  }

  if (!dq_weight) return;  // frozen weights (LoRA): no gradient
  // dq_weight[c] sums rows in order, and within a row its q heads in order; dk_weight likewise.
  const int n_blocks = (HS + kHeadChannelBlock - 1) / kHeadChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kHeadChannelBlock, c1 = std::min(HS, c0 + kHeadChannelBlock);
    for (int n = 0; n < N; ++n) {
      for (int h = 0; h < QK; ++h) {
        const size_t o = n * QKV + static_cast<size_t>(h) * HS;
        const float* x = qkv + o;
        const float* dy = dout + o;
        const float s = rstd[static_cast<size_t>(n) * QK + h];
        float* dw = h < NH ? dq_weight : dk_weight;
        for (int c = c0; c < c1; ++c) dw[c] += x[c] * s * dy[c];
      }
    }
  }
}

}  // namespace sftdp::cpu
