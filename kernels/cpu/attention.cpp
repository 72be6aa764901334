// kernels/cpu/attention.cpp — causal multi-head self-attention, CPU twin (see kernels/attention.h).
// Legend: B batch, T seq, C channels, NH heads, HS = C/NH head size. A qkv row is
// [q (C) | k (C) | v (C)]; head h owns the HS-slice [h·HS, (h+1)·HS) of each (llm.c layout).
// att (B,NH,T,T) holds softmax probabilities: exactly 0 above the diagonal and across segments.
// Accumulation: dqkv = (overwritten); datt is scratch. Work is split over (b, h) pairs, which
// write disjoint slices, and each pair visits t in order: deterministic for any thread count.
#include "kernels/attention.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "sftdp/check.h"

namespace sftdp::cpu {

void attention_fwd(float* out, float* att,                // (B,T,C) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,  // (B,T,3C) (B,T) or null
                   int B, int T, int C, int NH) {
  SFTDP_ASSERT(NH > 0 && C % NH == 0, "attention_fwd: C must be a multiple of NH");
  const int HS = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float masked = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        const size_t bt = static_cast<size_t>(b) * T + t;
        const float* q = qkv + bt * C3 + h * HS;
        float* att_row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        // scores and their max; a position always sees itself, so max is finite
        float max_score = masked;
        for (int t2 = 0; t2 <= t; ++t2) {
          const size_t bt2 = static_cast<size_t>(b) * T + t2;
          if (seg && seg[bt2] != seg[bt]) {
            att_row[t2] = masked;
            continue;
          }
          const float* k = qkv + bt2 * C3 + C + h * HS;
          float dot = 0.0f;
          for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
          att_row[t2] = dot * scale;
          if (att_row[t2] > max_score) max_score = att_row[t2];
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          att_row[t2] = std::exp(att_row[t2] - max_score);  // exp(−inf) is exactly 0
          sum += att_row[t2];
        }
        const float inv_sum = 1.0f / sum;
        for (int t2 = 0; t2 <= t; ++t2) att_row[t2] *= inv_sum;
        for (int t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;
        // out = Σ_t2 att[t2] · v[t2]
        float* o = out + bt * C + h * HS;
        for (int i = 0; i < HS; ++i) o[i] = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (static_cast<size_t>(b) * T + t2) * C3 + 2 * C + h * HS;
          const float a = att_row[t2];
          for (int i = 0; i < HS; ++i) o[i] += a * v[i];
        }
      }
    }
  }
}

// Per query row t: datt = dout·vᵀ, dv += att·dout, softmax backward
// dpre = att ⊙ (datt − Σ att·datt), then dq += scale·dpre·k and dk += scale·dpre·q.
// Masked entries have att = 0, so dpre = 0 there and no gradient crosses a segment.
void attention_bwd(float* dqkv, float* datt,             // (B,T,3C) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,  // (B,T,C) (B,T,3C)
                   const float* att,                     // (B,NH,T,T)
                   int B, int T, int C, int NH) {
  SFTDP_ASSERT(NH > 0 && C % NH == 0, "attention_bwd: C must be a multiple of NH");
  const int HS = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {  // this (b, h) owns these slices: clear them first
        float* row = dqkv + (static_cast<size_t>(b) * T + t) * C3 + h * HS;
        std::memset(row, 0, HS * sizeof(float));
        std::memset(row + C, 0, HS * sizeof(float));
        std::memset(row + 2 * C, 0, HS * sizeof(float));
      }
      for (int t = 0; t < T; ++t) {
        const size_t bt = static_cast<size_t>(b) * T + t;
        const float* q = qkv + bt * C3 + h * HS;
        float* dq = dqkv + bt * C3 + h * HS;
        const float* dout_t = dout + bt * C + h * HS;
        const size_t row_off = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const float* att_row = att + row_off;
        float* datt_row = datt + row_off;
        float att_dot_datt = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const size_t bt2 = static_cast<size_t>(b) * T + t2;
          const float* v = qkv + bt2 * C3 + 2 * C + h * HS;
          float* dv = dqkv + bt2 * C3 + 2 * C + h * HS;
          const float a = att_row[t2];
          float d = 0.0f;
          for (int i = 0; i < HS; ++i) {
            d += v[i] * dout_t[i];
            dv[i] += a * dout_t[i];
          }
          datt_row[t2] = d;
          att_dot_datt += a * d;
        }
        for (int t2 = 0; t2 <= t; ++t2) {
          const size_t bt2 = static_cast<size_t>(b) * T + t2;
          const float* k = qkv + bt2 * C3 + C + h * HS;
          float* dk = dqkv + bt2 * C3 + C + h * HS;
          const float dpre = att_row[t2] * (datt_row[t2] - att_dot_datt) * scale;
          datt_row[t2] = dpre;  // scratch now holds the scaled pre-softmax gradient
          for (int i = 0; i < HS; ++i) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
        for (int t2 = t + 1; t2 < T; ++t2) datt_row[t2] = 0.0f;
      }
    }
  }
}

}  // namespace sftdp::cpu
