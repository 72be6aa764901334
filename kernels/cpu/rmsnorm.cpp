// kernels/cpu/rmsnorm.cpp — RMSNorm over the last dim and Qwen3's per-head q/k RMSNorm, CPU twins, and
// their act16 twins (bf16 where kernels/rmsnorm.h marks it). Legend: N rows (= B·T), C channels, NH q
// heads, KVH k/v heads, HS head size, QKV = (NH + 2·KVH)·HS.
// Accumulation: rmsnorm_bwd dinp +=, dweight +=; qk_rmsnorm_bwd dqkv =, dq_weight +=, dk_weight +=;
// act16::rmsnorm_bwd dres =, dres16 =, dweight +=. Forwards and input gradients are parallel over rows;
// weight gradients are parallel over channel blocks with rows (and heads) visited in order, so every sum
// has one fixed order whatever the thread count (as layernorm_bwd). The act16 twins run the fp32 twins'
// row code on widened bf16 values and round what they store, so act16::rmsnorm_fwd's out is bitwise
// bf16(rmsnorm_fwd's out).
#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/act16.h"

namespace sftdp::cpu {

namespace {
constexpr int kChannelBlock = 64;    // channels one thread owns in rmsnorm's dweight pass
constexpr int kHeadChannelBlock = 16;  // the same for the q/k weights (HS is small: 64–256)

// A value as the math reads it: fp32 as it is, bf16 widened (exact).
inline float widen(float v) { return v; }
inline float widen(uint16_t h) { return ::sftdp::act16::to_float(h); }

// 1/sqrt(mean(x²) + eps) over n values, summed in order in fp32.
template <class X>
inline float rms_rstd(const X* x, int n, float eps) {
  float sq = 0.0f;
  for (int c = 0; c < n; ++c) sq += widen(x[c]) * widen(x[c]);
  return 1.0f / std::sqrt(sq / n + eps);
}

// Each y value x·s·w over n values, handed to store(c, value).
template <class X, class Store>
inline void rms_apply(const X* x, const float* w, float s, int n, Store&& store) {
  for (int c = 0; c < n; ++c) store(c, widen(x[c]) * s * w[c]);
}

// With x̂ = x·rstd and g = dy·w: each dx value rstd·(g − x̂·mean(g·x̂)), handed to store(c, value).
template <class Dy, class X, class Store>
inline void rms_dinp(const Dy* dy, const X* x, const float* w, float s, int n, Store&& store) {
  float gx_sum = 0.0f;
  for (int c = 0; c < n; ++c) gx_sum += widen(dy[c]) * w[c] * widen(x[c]) * s;
  const float gx_mean = gx_sum / n;
  for (int c = 0; c < n; ++c) store(c, s * (widen(dy[c]) * w[c] - widen(x[c]) * s * gx_mean));
}

// dweight[c] += Σ_n x·rstd·dy over the N rows of C, parallel over channel blocks, rows in order.
template <class Dy>
void rms_dweight(float* dweight, const Dy* dout, const float* inp, const float* rstd, int N, int C) {
  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {  // rows in order
      const float* x = inp + static_cast<size_t>(n) * C;
      const Dy* dy = dout + static_cast<size_t>(n) * C;
      const float s = rstd[n];
      for (int c = c0; c < c1; ++c) dweight[c] += x[c] * s * widen(dy[c]);
    }
  }
}

// dq_weight[c] sums rows in order, and within a row its q heads in order; dk_weight likewise.
template <class T>
void qk_dweights(float* dq_weight, float* dk_weight, const T* dout, const T* qkv, const float* rstd, int N, int NH,
                 int KVH, int HS) {
  const int QK = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  const int n_blocks = (HS + kHeadChannelBlock - 1) / kHeadChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kHeadChannelBlock, c1 = std::min(HS, c0 + kHeadChannelBlock);
    for (int n = 0; n < N; ++n) {
      for (int h = 0; h < QK; ++h) {
        const size_t o = n * QKV + static_cast<size_t>(h) * HS;
        const T* x = qkv + o;
        const T* dy = dout + o;
        const float s = rstd[static_cast<size_t>(n) * QK + h];
        float* dw = h < NH ? dq_weight : dk_weight;
        for (int c = c0; c < c1; ++c) dw[c] += widen(x[c]) * s * widen(dy[c]);
      }
    }
  }
}
}  // namespace

void rmsnorm_fwd(float* out, float* rstd,                // (N,C) (N)
                 const float* inp, const float* weight,  // (N,C) (C)
                 int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    const float s = rms_rstd(x, C, eps);
    rms_apply(x, weight, s, C, [y](int c, float v) { y[c] = v; });
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
    float* dx = dinp + off;
    rms_dinp(dout + off, inp + off, weight, rstd[n], C, [dx](int c, float v) { dx[c] += v; });
  }
  if (!dweight) return;  // a frozen weight (LoRA): no gradient
  rms_dweight(dweight, dout, inp, rstd, N, C);
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
      float* yh = y + static_cast<size_t>(h) * HS;
      const float s = rms_rstd(xh, HS, eps);
      rms_apply(xh, h < NH ? q_weight : k_weight, s, HS, [yh](int c, float v) { yh[c] = v; });
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
      float* dxh = dx + o;
      rms_dinp(dy + o, x + o, h < NH ? q_weight : k_weight, rstd[static_cast<size_t>(n) * QK + h], HS,
               [dxh](int c, float v) { dxh[c] = v; });
    }
    const size_t v0 = static_cast<size_t>(QK) * HS;
    std::memcpy(dx + v0, dy + v0, static_cast<size_t>(KVH) * HS * sizeof(float));
  }
  if (!dq_weight) return;  // frozen weights (LoRA): no gradient
  qk_dweights(dq_weight, dk_weight, dout, qkv, rstd, N, NH, KVH, HS);
}

namespace act16 {

void rmsnorm_fwd(uint16_t* out, float* rstd,                // (N,C) bf16 ; (N)
                 const float* inp, const float* weight,     // (N,C) (C)
                 int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    uint16_t* y = out + static_cast<size_t>(n) * C;
    const float s = rms_rstd(x, C, eps);
    rms_apply(x, weight, s, C, [y](int c, float v) { y[c] = ::sftdp::act16::to_bf16(v); });
    rstd[n] = s;
  }
}

// dres = (dres_in ? dres_in : 0) + the fp32 twin's dinp term; dres16 = bf16(dres).
void rmsnorm_bwd(float* dres, uint16_t* dres16, float* dweight,             // (N,C) = ; (N,C) bf16 or null ; (C) +=
                 const float* dres_in, const uint16_t* dout,                // (N,C) or null ; (N,C) bf16
                 const float* inp, const float* weight, const float* rstd,  // (N,C) (C) (N)
                 int N, int C) {
  if (dweight) rms_dweight(dweight, dout, inp, rstd, N, C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * C;
    float* r = dres + off;
    uint16_t* r16 = dres16 ? dres16 + off : nullptr;
    const float* r_in = dres_in ? dres_in + off : nullptr;  // may be r itself: read before written
    rms_dinp(dout + off, inp + off, weight, rstd[n], C, [r, r16, r_in](int c, float v) {
      r[c] = r_in ? r_in[c] + v : v;
      if (r16) r16[c] = ::sftdp::act16::to_bf16(r[c]);
    });
  }
}

void qk_rmsnorm_fwd(uint16_t* out, float* rstd,                          // (N,QKV) bf16 ; (N,NH+KVH)
                    const uint16_t* qkv,                                 // (N,QKV) bf16
                    const float* q_weight, const float* k_weight,        // (HS) (HS)
                    int N, int NH, int KVH, int HS, float eps) {
  const int QK = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const uint16_t* x = qkv + n * QKV;
    uint16_t* y = out + n * QKV;
    for (int h = 0; h < QK; ++h) {
      const uint16_t* xh = x + static_cast<size_t>(h) * HS;
      uint16_t* yh = y + static_cast<size_t>(h) * HS;
      const float s = rms_rstd(xh, HS, eps);
      rms_apply(xh, h < NH ? q_weight : k_weight, s, HS,
                [yh](int c, float v) { yh[c] = ::sftdp::act16::to_bf16(v); });
      rstd[static_cast<size_t>(n) * QK + h] = s;
    }
    const size_t v0 = static_cast<size_t>(QK) * HS;  // v: the same 16 bits
    std::memcpy(y + v0, x + v0, static_cast<size_t>(KVH) * HS * sizeof(uint16_t));
  }
}

void qk_rmsnorm_bwd(uint16_t* dqkv, float* dq_weight, float* dk_weight,  // (N,QKV) bf16 = ; (HS) += ; (HS) +=
                    const uint16_t* dout, const uint16_t* qkv,           // (N,QKV) bf16 ; (N,QKV) bf16
                    const float* q_weight, const float* k_weight,        // (HS) (HS)
                    const float* rstd,                                   // (N,NH+KVH)
                    int N, int NH, int KVH, int HS) {
  const int QK = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const uint16_t* x = qkv + n * QKV;
    const uint16_t* dy = dout + n * QKV;
    uint16_t* dx = dqkv + n * QKV;
    for (int h = 0; h < QK; ++h) {
      const size_t o = static_cast<size_t>(h) * HS;
      uint16_t* dxh = dx + o;
      rms_dinp(dy + o, x + o, h < NH ? q_weight : k_weight, rstd[static_cast<size_t>(n) * QK + h], HS,
               [dxh](int c, float v) { dxh[c] = ::sftdp::act16::to_bf16(v); });
    }
    const size_t v0 = static_cast<size_t>(QK) * HS;
    std::memcpy(dx + v0, dy + v0, static_cast<size_t>(KVH) * HS * sizeof(uint16_t));
  }
  if (!dq_weight) return;  // frozen weights (LoRA): no gradient
  qk_dweights(dq_weight, dk_weight, dout, qkv, rstd, N, NH, KVH, HS);
}

}  // namespace act16

}  // namespace sftdp::cpu
