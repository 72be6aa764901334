// kernels/cpu/attention.cpp — causal grouped-query self-attention, CPU twin (see
// kernels/attention.h). Legend: B batch, T seq, NH query heads, KVH key/value heads, HS head
// size, G = NH/KVH query heads per k/v head, QKV = (NH + 2·KVH)·HS. A qkv row is
// [q (NH·HS) | k (KVH·HS) | v (KVH·HS)]; head h owns the HS-slice h of its part, and query head
// h reads k/v head h/G. out rows are NH·HS wide.
// att (B,NH,T,T) holds softmax probabilities: exactly 0 above the diagonal and across segments.
// Accumulation: dqkv = (overwritten); datt is scratch. The forward splits work over (b, h);
// the backward over (b, k/v head), each visiting its G query heads in increasing h and each
// head t in order, so the pairs write disjoint slices and every sum has one fixed order for
// any thread count.
#include "kernels/attention.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "sftdp/check.h"

namespace sftdp::cpu {

void attention_fwd(float* out, float* att,                // (B,T,NH·HS) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,  // (B,T,QKV) (B,T) or null
                   int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               "attention_fwd: NH must be a positive multiple of KVH");
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const int k_off = NH * HS, v_off = (NH + KVH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float masked = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int kvh = h / G;
      for (int t = 0; t < T; ++t) {
        const size_t bt = static_cast<size_t>(b) * T + t;
        const float* q = qkv + bt * QKV + h * HS;
        float* att_row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        // scores and their max; a position always sees itself, so max is finite
        float max_score = masked;
        for (int t2 = 0; t2 <= t; ++t2) {
          const size_t bt2 = static_cast<size_t>(b) * T + t2;
          if (seg && seg[bt2] != seg[bt]) {
            att_row[t2] = masked;
            continue;
          }
          const float* k = qkv + bt2 * QKV + k_off + kvh * HS;
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
        float* o = out + bt * OC + h * HS;
        for (int i = 0; i < HS; ++i) o[i] = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (static_cast<size_t>(b) * T + t2) * QKV + v_off + kvh * HS;
          const float a = att_row[t2];
          for (int i = 0; i < HS; ++i) o[i] += a * v[i];
        }
      }
    }
  }
}

// Per query head h and row t: datt = dout·vᵀ, dv += att·dout, softmax backward
// dpre = att ⊙ (datt − Σ att·datt), then dq += scale·dpre·k and dk += scale·dpre·q.
// Masked entries have att = 0, so dpre = 0 there and no gradient crosses a segment.
void attention_bwd(float* dqkv, float* datt,             // (B,T,QKV) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,  // (B,T,NH·HS) (B,T,QKV)
                   const float* att,                     // (B,NH,T,T)
                   int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               "attention_bwd: NH must be a positive multiple of KVH");
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const int k_off = NH * HS, v_off = (NH + KVH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int kvh = 0; kvh < KVH; ++kvh) {
      for (int t = 0; t < T; ++t) {  // this (b, kvh) owns these slices: clear them first
        float* row = dqkv + (static_cast<size_t>(b) * T + t) * QKV;
        std::memset(row + kvh * G * HS, 0, static_cast<size_t>(G) * HS * sizeof(float));
        std::memset(row + k_off + kvh * HS, 0, HS * sizeof(float));
        std::memset(row + v_off + kvh * HS, 0, HS * sizeof(float));
      }
      for (int h = kvh * G; h < (kvh + 1) * G; ++h) {  // the group's query heads, in order
        for (int t = 0; t < T; ++t) {
          const size_t bt = static_cast<size_t>(b) * T + t;
          const float* q = qkv + bt * QKV + h * HS;
          float* dq = dqkv + bt * QKV + h * HS;
          const float* dout_t = dout + bt * OC + h * HS;
          const size_t row_off = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
          const float* att_row = att + row_off;
          float* datt_row = datt + row_off;
          float att_dot_datt = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) {
            const size_t bt2 = static_cast<size_t>(b) * T + t2;
            const float* v = qkv + bt2 * QKV + v_off + kvh * HS;
            float* dv = dqkv + bt2 * QKV + v_off + kvh * HS;
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
            const float* k = qkv + bt2 * QKV + k_off + kvh * HS;
            float* dk = dqkv + bt2 * QKV + k_off + kvh * HS;
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
}

}  // namespace sftdp::cpu
