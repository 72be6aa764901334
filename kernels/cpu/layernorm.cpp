// kernels/cpu/layernorm.cpp — LayerNorm over the last dim (eps 1e-5), CPU twin, and its act16 twin
// (bf16 out, dout and dres16; see kernels/layernorm.h). Legend: N rows (= B·T), C channels.
// Accumulation: dinp +=, dweight +=, dbias +=; act16: dres =, dres16 =, dweight, dbias, dres_in_sum +=.
// The forward and dinp are parallel over rows; the column sums are parallel over channel blocks with
// rows visited in order, so every sum has one fixed order whatever the thread count.
#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/act16.h"

namespace sftdp::cpu {

namespace {
constexpr float kEps = 1e-5f;
constexpr int kChannelBlock = 64;  // channels one thread owns in the dweight/dbias pass

// One row x of C: its mean and rstd, and each out value (x − mean)·rstd·w + b handed to store(c, value):
// the fp32 twin stores it, the act16 twin rounds it to bf16, so that its out is bitwise bf16(fp32 out).
template <class Store>
inline void layernorm_row(const float* x, const float* weight, const float* bias, int C, float* mean, float* rstd,
                          Store&& store) {
  float sum = 0.0f;
  for (int c = 0; c < C; ++c) sum += x[c];
  const float m = sum / C;
  float sq = 0.0f;  // two-pass variance: no cancellation when |mean| >> spread
  for (int c = 0; c < C; ++c) {
    const float d = x[c] - m;
    sq += d * d;
  }
  const float s = 1.0f / std::sqrt(sq / C + kEps);
  for (int c = 0; c < C; ++c) store(c, (x[c] - m) * s * weight[c] + bias[c]);
  *mean = m;
  *rstd = s;
}
}  // namespace

void layernorm_fwd(float* out, float* mean, float* rstd,                    // (N,C) (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* y = out + static_cast<size_t>(n) * C;
    layernorm_row(inp + static_cast<size_t>(n) * C, weight, bias, C, &mean[n], &rstd[n],
                  [y](int c, float v) { y[c] = v; });
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

namespace act16 {

void layernorm_fwd(uint16_t* out, float* mean, float* rstd,                   // (N,C) bf16 ; (N) (N)
                   const float* inp, const float* weight, const float* bias,  // (N,C) (C) (C)
                   int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    uint16_t* y = out + static_cast<size_t>(n) * C;
    layernorm_row(inp + static_cast<size_t>(n) * C, weight, bias, C, &mean[n], &rstd[n],
                  [y](int c, float v) { y[c] = ::sftdp::act16::to_bf16(v); });
  }
}

// The fp32 twin's formulas with dout widened from bf16 and dinp's "+=" replaced by dres = dres_in + (or =):
//   dres = (dres_in ? dres_in : 0) + rstd·(g − mean_c(g) − x̂·mean_c(g·x̂)),
// g = dout·w, x̂ = (x − mean)·rstd.
void layernorm_bwd(float* dres, uint16_t* dres16,                     // (N,C) = ; (N,C) bf16 = or null
                   float* dweight, float* dbias, float* dres_in_sum,  // (C) += each, or null
                   const float* dres_in, const uint16_t* dout,        // (N,C) or null ; (N,C) bf16
                   const float* inp, const float* weight,             // (N,C) (C)
                   const float* mean, const float* rstd,              // (N) (N)
                   int N, int C) {
  using ::sftdp::act16::to_bf16;
  using ::sftdp::act16::to_float;
  // The column sums first: dres may be dres_in, which the row pass overwrites.
  float* const dres_sum = dres_in ? dres_in_sum : nullptr;
  if (dweight || dbias || dres_sum) {
    const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; ++blk) {
      const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
      for (int n = 0; n < N; ++n) {  // rows in order
        const size_t row = static_cast<size_t>(n) * C;
        const float m = mean[n], s = rstd[n];
        for (int c = c0; c < c1; ++c) {
          const float dy = to_float(dout[row + c]);
          if (dbias) dbias[c] += dy;
          if (dweight) dweight[c] += (inp[row + c] - m) * s * dy;
          if (dres_sum) dres_sum[c] += dres_in[row + c];
        }
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    const float* x = inp + row;
    const uint16_t* dy = dout + row;
    const float m = mean[n], s = rstd[n];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float g = to_float(dy[c]) * weight[c];
      g_sum += g;
      gx_sum += g * (x[c] - m) * s;
    }
    const float g_mean = g_sum / C, gx_mean = gx_sum / C;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float v = s * (to_float(dy[c]) * weight[c] - g_mean - xhat * gx_mean);
      const float r = dres_in ? dres_in[row + c] + v : v;
      dres[row + c] = r;
      if (dres16) dres16[row + c] = to_bf16(r);
    }
  }
}

}  // namespace act16

}  // namespace sftdp::cpu
