// kernels/cpu/attention_cp.cpp — context-parallel attention's CPU twin (kernels/attention.h): this rank's
// Tq query rows (at global positions qpos) against Tk gathered keys, after kernels/cpu/attention.cpp's
// FlashAttention-2 tiles. Legend: G = NH/KVH, QKV = (NH + 2·KVH)·HS, KV = 2·KVH·HS, Br = 128 query rows per
// tile, Bc = 512 keys per chunk. A tile [r0, r1) of the rank's rows sees keys [0, max qpos + 1): its two
// chunks of positions are each contiguous, so a tile's keys past its last position are never computed.
// Keys above a row's position, or in another segment, are exact zeros (segments checked key by key).
// Every product is a single-threaded cblas_sgemm on strided views (no copies).
// Forward, per (b, h, tile) and key chunk: S = scale·Q·Kᵀ in a (Br, Bc) tile, an online softmax (running
// max m and sum l, vec_exp, 16-lane sums and maxima), O += P·V; lse = m + log l at the end.
// Backward, per (b, k/v head), its G query heads in increasing h, per query tile two passes over the keys:
// P = exp(S − lse) and dP = dO·Vᵀ into (Br, span) strips and D = Σ P·dP per row (as attention.cpp: a row
// with one visible key then has dS = 0 exactly); then dS = P·(dP − D)·scale, dq = dS·K, dk += dSᵀ·Q,
// dv += Pᵀ·dO straight into dkv (one thread owns a k/v head of a row: no per-head copies).
// Every sum has one fixed order: the bits do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/vec_math.h"
#include "sftdp/check.h"

namespace sftdp::cpu {
namespace {

using attention_tiles::gemm;
using attention_tiles::kCols;
using attention_tiles::kMasked;
using attention_tiles::kRows;
using attention_tiles::lane_max;
using attention_tiles::lane_sum;

void check_dims(const char* op, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B >= 0 && Tq > 0 && Tk > 0 && NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               std::string(op) + ": need Tq, Tk, HS > 0 and NH a positive multiple of KVH");
}

// The keys a tile of rows [r0, r1) may see: [0, last] with last the largest of their positions (capped).
int tile_keys(const int32_t* qpos, int r0, int r1, int Tk) {
  int last = 0;
  for (int t = r0; t < r1; ++t) last = std::max(last, qpos[t]);
  return std::min(last + 1, Tk);
}

// Row t's score row over key chunk [c0, c0 + nc): entries past its position set to −inf (and, with segments,
// those of another segment); returns how many leading entries may be visible (the rest are masked).
int mask_row(float* row, int t, int c0, int nc, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k_b,
             size_t bTq) {
  const int len = std::clamp(qpos[t] - c0 + 1, 0, nc);
  for (int j = len; j < nc; ++j) row[j] = kMasked;
  if (seg_q) {
    const int32_t s = seg_q[bTq + t];
    for (int j = 0; j < len; ++j) row[j] = seg_k_b[c0 + j] == s ? row[j] : kMasked;
  }
  return len;
}

struct ForwardTile {
  float s[kRows * kCols];
  float m[kRows], l[kRows];
};

struct BackwardStrips {
  std::vector<float> p, dp;
  double d[kRows];
};

}  // namespace

void attention_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  check_dims("attention_cp_fwd", B, Tq, Tk, NH, KVH, HS);
  use_single_threaded_blas();
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, KV = 2 * KVH * HS, OC = NH * HS;
  const int n_tiles = (Tq + kRows - 1) / kRows;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    static thread_local std::vector<ForwardTile> tile_store(1);
    ForwardTile& w = tile_store[0];
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int tile = 0; tile < n_tiles; ++tile) {
          const int r0 = tile * kRows, r1 = std::min(Tq, r0 + kRows), n = r1 - r0;
          const size_t bTq = static_cast<size_t>(b) * Tq, bTk = static_cast<size_t>(b) * Tk;
          const float* q_blk = qkv + (bTq + r0) * QKV + static_cast<size_t>(h) * HS;
          const float* k = kv + bTk * KV + static_cast<size_t>(h / G) * HS;
          const float* v = k + static_cast<size_t>(KVH) * HS;
          const int32_t* sk = seg_k ? seg_k + bTk : nullptr;
          float* o = out + (bTq + r0) * OC + static_cast<size_t>(h) * HS;
          for (int i = 0; i < n; ++i) {
            w.m[i] = kMasked, w.l[i] = 0.0f;
            std::memset(o + static_cast<size_t>(i) * OC, 0, HS * sizeof(float));
          }
          const int keys = tile_keys(qpos, r0, r1, Tk);
          for (int c0 = 0; c0 < keys; c0 += kCols) {
            const int nc = std::min(kCols, keys - c0);
            gemm(false, true, n, nc, HS, scale, q_blk, QKV, k + static_cast<size_t>(c0) * KV, KV, 0.0f, w.s, nc);
            for (int i = 0; i < n; ++i) {
              float* row = w.s + static_cast<size_t>(i) * nc;
              const int len = mask_row(row, r0 + i, c0, nc, qpos, seg_q, sk, bTq);
              const float chunk_max = lane_max(row, len);
              if (chunk_max == kMasked) {  // nothing visible in this chunk: the row adds nothing
                std::memset(row, 0, nc * sizeof(float));
                continue;
              }
              const float m_new = std::max(chunk_max, w.m[i]);
              const float sum = lane_sum(len, [row, m_new](int j) { return row[j] = vec_exp(row[j] - m_new); });
              std::memset(row + len, 0, (nc - len) * sizeof(float));
              if (m_new != w.m[i]) {
                const float alpha = vec_exp(w.m[i] - m_new);  // 0 on the row's first visible chunk
                float* oi = o + static_cast<size_t>(i) * OC;
                for (int c = 0; c < HS; ++c) oi[c] *= alpha;
                w.l[i] *= alpha;
                w.m[i] = m_new;
              }
              w.l[i] += sum;
            }
            gemm(false, false, n, HS, nc, 1.0f, w.s, nc, v + static_cast<size_t>(c0) * KV, KV, 1.0f, o, OC);
          }
          for (int i = 0; i < n; ++i) {
            float* oi = o + static_cast<size_t>(i) * OC;
            const float inv = w.l[i] > 0 ? 1.0f / w.l[i] : 0.0f;
            for (int c = 0; c < HS; ++c) oi[c] *= inv;
            lse[(static_cast<size_t>(b) * NH + h) * Tq + r0 + i] = w.l[i] > 0 ? w.m[i] + std::log(w.l[i]) : kMasked;
          }
        }
  }
}

void attention_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                      const float* /*out: the CUDA twin's*/, const float* lse, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  check_dims("attention_cp_bwd", B, Tq, Tk, NH, KVH, HS);
  use_single_threaded_blas();
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, KV = 2 * KVH * HS, OC = NH * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    static thread_local BackwardStrips w;
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int kvh = 0; kvh < KVH; ++kvh) {
        const size_t bTq = static_cast<size_t>(b) * Tq, bTk = static_cast<size_t>(b) * Tk;
        const float* k = kv + bTk * KV + static_cast<size_t>(kvh) * HS;
        const float* v = k + static_cast<size_t>(KVH) * HS;
        float* dk = dkv + bTk * KV + static_cast<size_t>(kvh) * HS;
        float* dv = dk + static_cast<size_t>(KVH) * HS;
        for (int j = 0; j < Tk; ++j) {
          std::memset(dk + static_cast<size_t>(j) * KV, 0, HS * sizeof(float));
          std::memset(dv + static_cast<size_t>(j) * KV, 0, HS * sizeof(float));
        }
        const int32_t* sk = seg_k ? seg_k + bTk : nullptr;
        for (int h = kvh * G; h < (kvh + 1) * G; ++h)
          for (int r0 = 0; r0 < Tq; r0 += kRows) {
            const int r1 = std::min(Tq, r0 + kRows), n = r1 - r0, span = tile_keys(qpos, r0, r1, Tk);
            if (w.p.size() < static_cast<size_t>(kRows) * span) w.p.resize(static_cast<size_t>(kRows) * span),
                                                                 w.dp.resize(static_cast<size_t>(kRows) * span);
            const float* q_blk = qkv + (bTq + r0) * QKV + static_cast<size_t>(h) * HS;
            const float* dout_blk = dout + (bTq + r0) * OC + static_cast<size_t>(h) * HS;
            float* dq_blk = dqkv + (bTq + r0) * QKV + static_cast<size_t>(h) * HS;
            const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * Tq;
            for (int i = 0; i < n; ++i) w.d[i] = 0.0;
            // Pass 1: P = exp(scale·Q·Kᵀ − lse), dP = dO·Vᵀ, D = Σ P·dP.
            for (int c0 = 0; c0 < span; c0 += kCols) {
              const int nc = std::min(kCols, span - c0);
              float* p_c = w.p.data() + c0;
              float* dp_c = w.dp.data() + c0;
              gemm(false, true, n, nc, HS, scale, q_blk, QKV, k + static_cast<size_t>(c0) * KV, KV, 0.0f, p_c, span);
              gemm(false, true, n, nc, HS, 1.0f, dout_blk, OC, v + static_cast<size_t>(c0) * KV, KV, 0.0f, dp_c, span);
              for (int i = 0; i < n; ++i) {
                float* p = p_c + static_cast<size_t>(i) * span;
                float* dp = dp_c + static_cast<size_t>(i) * span;
                const int len = mask_row(p, r0 + i, c0, nc, qpos, seg_q, sk, bTq);
                const float l = lse_h[r0 + i];
                w.d[i] += lane_sum(nc, [p, dp, l, len](int j) {  // masked keys: p = 0, and their dP (any) ignored
                  const float e = j < len ? vec_exp(p[j] - l) : 0.0f;
                  p[j] = e;
                  return e != 0.0f ? e * dp[j] : 0.0f;
                });
              }
            }
            // Pass 2: dS = P·(dP − D)·scale in place of dP; dq = dS·K, dk += dSᵀ·Q, dv += Pᵀ·dO.
            for (int i = 0; i < n; ++i) std::memset(dq_blk + static_cast<size_t>(i) * QKV, 0, HS * sizeof(float));
            for (int c0 = 0; c0 < span; c0 += kCols) {
              const int nc = std::min(kCols, span - c0);
              const float* p_c = w.p.data() + c0;
              float* ds_c = w.dp.data() + c0;
              for (int i = 0; i < n; ++i) {
                const float* p = p_c + static_cast<size_t>(i) * span;
                float* ds = ds_c + static_cast<size_t>(i) * span;
                const float D = static_cast<float>(w.d[i]);
                for (int j = 0; j < nc; ++j) ds[j] = p[j] != 0.0f ? p[j] * (ds[j] - D) * scale : 0.0f;
              }
              gemm(false, false, n, HS, nc, 1.0f, ds_c, span, k + static_cast<size_t>(c0) * KV, KV, 1.0f, dq_blk, QKV);
              gemm(true, false, nc, HS, n, 1.0f, ds_c, span, q_blk, QKV, 1.0f, dk + static_cast<size_t>(c0) * KV, KV);
              gemm(true, false, nc, HS, n, 1.0f, p_c, span, dout_blk, OC, 1.0f, dv + static_cast<size_t>(c0) * KV, KV);
            }
          }
      }
  }
}

}  // namespace sftdp::cpu
