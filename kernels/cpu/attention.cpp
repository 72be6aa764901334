// kernels/cpu/attention.cpp — causal grouped-query self-attention without the T×T matrix, CPU twin
// (see kernels/attention.h), after FlashAttention-2. Legend: B batch, T seq, NH query heads, KVH
// key/value heads, HS head size, G = NH/KVH, QKV = (NH + 2·KVH)·HS, Br = kRows query rows per
// tile, Bc = kCols keys per chunk. A qkv row is [q (NH·HS) | k (KVH·HS) | v (KVH·HS)]; head h owns
// the HS-slice h of its part, and query head h reads k/v head h/G. out rows are NH·HS wide.
// A query tile [r0, r1) visits the key chunks of [kmin, r1) in increasing order: keys past r1 are
// above the causal diagonal and keys before kmin (the first position any of its rows may see: the
// first occurrence of their segment ids) in other segments; neither is ever computed. Inside a
// chunk a row's visible keys are one range (packed rows), or are checked key by key (an id that
// recurs); the others are exact zeros. Every product is a single-threaded cblas_sgemm on strided
// views of the rows (no copies).
// Forward, per chunk: S = scale·Q·Kᵀ into a (Br, Bc) tile that stays in L2, an online softmax
// (running max m and sum l per row, vec_exp, 16-lane sums and maxima; the output rescaled when m
// grows), O += P·V; lse = m + log l at the end.
// Backward, per query tile, two passes over its chunks: first P = exp(S − lse) and dP = dO·Vᵀ into
// (Br, kmin..r1) strips and D = Σ P·dP per row; then dS = P·(dP − D)·scale, dq += dS·K, and per
// query head dk += dSᵀ·Q, dv += Pᵀ·dO. D is summed from the P and dP the gradients use rather than
// as FlashAttention-2's Σ dO·O: in fp32 a row with one visible key then has dS = 0 exactly, where
// dO·O against sgemm's dP leaves a rounding residue (1e-6 of the fp64 reference at HS 256 is met
// this way, not the other). The strips cost 2·Br·T floats per thread, linear in T.
// With GQA each query head has its own fp32 dk/dv (scratch), summed into the k/v head in
// increasing h afterwards: the multi-head computation on repeated k/v, bit for bit.
// Threads: forward over (b, h, tile), backward over (b, h) and then (b, k/v head); every sum has
// one fixed order, so the bits do not depend on the thread count.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/vec_math.h"
#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {
using attention_tiles::gemm;
using attention_tiles::kCols;
using attention_tiles::kRows;
using attention_tiles::lane_max;
using attention_tiles::lane_sum;

void check_dims(const char* op, int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               std::string(op) + ": need T, HS > 0 and NH a positive multiple of KVH");
}

// Where row t's visible keys lie (kernels/attention.h): first[t], the first occurrence of seg[t] in
// its batch row (0 without segments), and contiguous[t], whether every key of [first[t], t] is in
// t's segment (always so for packed rows, whose ids do not recur after another id). Then the
// visible keys are exactly [first[t], t]; else each key of that range is checked. Grow-only.
struct Visibility {
  std::vector<int32_t> first;
  std::vector<uint8_t> contiguous;
};
const Visibility& visibility(const int32_t* seg, int B, int T) {
  static thread_local Visibility v;
  static thread_local std::vector<std::pair<int32_t, int32_t>> runs, sorted;  // (id, start)
  v.first.assign(static_cast<size_t>(B) * T, 0);
  v.contiguous.assign(static_cast<size_t>(B) * T, 1);
  if (!seg) return v;
  for (int b = 0; b < B; ++b) {
    const int32_t* s = seg + static_cast<size_t>(b) * T;
    runs.clear();
    for (int t = 0; t < T; ++t)
      if (t == 0 || s[t] != s[t - 1]) runs.emplace_back(s[t], t);
    sorted.assign(runs.begin(), runs.end());
    std::sort(sorted.begin(), sorted.end());
    int32_t* f = v.first.data() + static_cast<size_t>(b) * T;
    uint8_t* c = v.contiguous.data() + static_cast<size_t>(b) * T;
    size_t run = 0;
    for (int t = 0; t < T; ++t) {
      if (run + 1 < runs.size() && runs[run + 1].second == t) ++run;
      // the earliest start of this id: the first (id, start) pair with this id
      f[t] = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(runs[run].first, INT32_MIN))->second;
      c[t] = f[t] == runs[run].second;  // t's own run is the id's first: nothing else in between
    }
  }
  return v;
}

// The first key of tile [r0, r1): the smallest first-visible position of its rows.
int tile_kmin(const int32_t* first_row, int r0, int r1) {
  int k = first_row[r0];
  for (int t = r0 + 1; t < r1; ++t) k = std::min(k, first_row[t]);
  return k;
}

// Row t's entries j of the key chunk [c0, c0 + nc): visible ones lie in [lo, hi], 0 <= lo <= nc
// (hi < lo: none);
// `check` when some inside are not (a recurring segment id), to be tested key by key.
struct RowKeys {
  int lo, hi;
  bool check;
};
RowKeys row_keys(const Visibility& vis, size_t bT, int t, int c0, int nc) {
  return {std::clamp(vis.first[bT + t] - c0, 0, nc), std::min(nc - 1, t - c0), !vis.contiguous[bT + t]};
}

// Forward, per thread: a (Br, Bc) fp32 score tile and the rows' running max and sum (in L2).
struct ForwardTiles {
  float s[kRows * kCols];
  float m[kRows], l[kRows];
};
ForwardTiles& forward_tiles() {
  static thread_local std::vector<ForwardTiles> t(1);
  return t[0];
}

// Backward, per thread: P and dP (then dS) of one query tile over all its keys, (Br, span) each:
// D = Σ_j P·dP needs a row's every key before any dS. Linear in T; grow-only.
struct BackwardStrips {
  std::vector<float> p, dp;
  double d[kRows];
};
BackwardStrips& backward_strips(int T) {
  static thread_local BackwardStrips w;
  const size_t n = static_cast<size_t>(kRows) * T;
  if (w.p.size() < n) w.p.resize(n), w.dp.resize(n);
  return w;
}

}  // namespace

size_t attention_scratch_bytes(int B, int T, int NH, int KVH, int HS, int threads) {
  const size_t per_thread = sizeof(ForwardTiles) + sizeof(BackwardStrips) + 2 * size_t(kRows) * T * sizeof(float);
  const size_t per_head_dkv = KVH < NH ? static_cast<size_t>(B) * NH * T * 2 * HS * sizeof(float) : 0;
  return static_cast<size_t>(threads) * per_thread + per_head_dkv +
         static_cast<size_t>(B) * T * (sizeof(int32_t) + sizeof(uint8_t));
}

void attention_fwd(float* out, float* lse,                // (B,T,NH·HS) (B,NH,T)
                   const float* qkv, const int32_t* seg,  // (B,T,QKV) (B,T) or null
                   int B, int T, int NH, int KVH, int HS) {
  check_dims("attention_fwd", B, T, NH, KVH, HS);
  use_single_threaded_blas();
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const int k_off = NH * HS, v_off = (NH + KVH) * HS, n_tiles = (T + kRows - 1) / kRows;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float masked = -std::numeric_limits<float>::infinity();
  const Visibility& vis = visibility(seg, B, T);
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int tile = 0; tile < n_tiles; ++tile) {
        const int r0 = tile * kRows, r1 = std::min(T, r0 + kRows), n = r1 - r0;
        const size_t bT = static_cast<size_t>(b) * T;
        const float* rows = qkv + bT * QKV;
        const float* q_blk = rows + static_cast<size_t>(r0) * QKV + h * HS;
        const float* k = rows + k_off + (h / G) * HS;
        const float* v = rows + v_off + (h / G) * HS;
        const int32_t* sg = seg ? seg + bT : nullptr;
        float* o = out + (bT + r0) * OC + h * HS;  // (n, HS), row stride OC
        ForwardTiles& w = forward_tiles();
        for (int i = 0; i < n; ++i) {
          w.m[i] = masked, w.l[i] = 0.0f;
          std::memset(o + static_cast<size_t>(i) * OC, 0, HS * sizeof(float));
        }
        const int kmin = tile_kmin(vis.first.data() + bT, r0, r1);
        for (int c0 = kmin; c0 < r1; c0 += kCols) {  // key chunks up to the tile's last row
          const int nc = std::min(kCols, r1 - c0);
          // S(t, j) = scale · q_t·k_{c0+j}
          gemm(false, true, n, nc, HS, scale, q_blk, QKV, k + static_cast<size_t>(c0) * QKV, QKV, 0.0f, w.s, nc);
          for (int i = 0; i < n; ++i) {
            const int t = r0 + i;
            const RowKeys key = row_keys(vis, bT, t, c0, nc);
            float* row = w.s + static_cast<size_t>(i) * nc;
            if (key.check)
              for (int j = key.lo; j <= key.hi; ++j) row[j] = sg[c0 + j] == sg[t] ? row[j] : masked;
            const int len = key.hi - key.lo + 1;
            float* vis_row = row + key.lo;
            const float chunk_max = lane_max(vis_row, len);
            if (chunk_max == masked) {  // nothing visible in this chunk: the row adds nothing
              std::memset(row, 0, nc * sizeof(float));
              continue;
            }
            // Online softmax: rescale what the row summed so far to the new max.
            const float m_new = std::max(chunk_max, w.m[i]);
            std::memset(row, 0, key.lo * sizeof(float));
            const float sum = lane_sum(len, [vis_row, m_new](int j) {  // exp(−inf) is exactly 0
              return vis_row[j] = vec_exp(vis_row[j] - m_new);
            });
            std::memset(row + key.hi + 1, 0, (nc - 1 - key.hi) * sizeof(float));
            if (m_new != w.m[i]) {
              const float alpha = vec_exp(w.m[i] - m_new);  // 0 on the row's first chunk
              float* oi = o + static_cast<size_t>(i) * OC;
              for (int c = 0; c < HS; ++c) oi[c] *= alpha;
              w.l[i] *= alpha;
              w.m[i] = m_new;
            }
            w.l[i] += sum;
          }
          // o += P · v_{c0 .. c0+nc}
          gemm(false, false, n, HS, nc, 1.0f, w.s, nc, v + static_cast<size_t>(c0) * QKV, QKV, 1.0f, o, OC);
        }
        for (int i = 0; i < n; ++i) {  // a row always sees itself: l > 0 and m finite
          const float inv = 1.0f / w.l[i];
          float* oi = o + static_cast<size_t>(i) * OC;
          for (int c = 0; c < HS; ++c) oi[c] *= inv;
          lse[(static_cast<size_t>(b) * NH + h) * T + r0 + i] = w.m[i] + std::log(w.l[i]);
        }
      }
    }
  }
}

void attention_bwd(float* dqkv,                                              // (B,T,QKV) =
                   const float* dout, const float* qkv,                      // (B,T,NH·HS) (B,T,QKV)
                   const float* /*out: the CUDA twin's*/, const float* lse,  // (B,T,NH·HS) (B,NH,T)
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS) {
  check_dims("attention_bwd", B, T, NH, KVH, HS);
  use_single_threaded_blas();
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const int k_off = NH * HS, v_off = (NH + KVH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const Visibility& vis = visibility(seg, B, T);
  // GQA: one fp32 (T, 2·HS) [dk | dv] per (b, query head), summed into its k/v head below. MHA
  // writes straight into dqkv's k/v slices (the same bits: there is one query head per k/v head).
  static std::vector<float> per_head;
  const size_t head_dkv = static_cast<size_t>(T) * 2 * HS;
  if (G > 1 && per_head.size() < static_cast<size_t>(B) * NH * head_dkv)
    per_head.resize(static_cast<size_t>(B) * NH * head_dkv);

#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t bT = static_cast<size_t>(b) * T;
      const float* rows = qkv + bT * QKV;
      float* drows = dqkv + bT * QKV;
      const float* q = rows + h * HS;
      const float* k = rows + k_off + (h / G) * HS;
      const float* v = rows + v_off + (h / G) * HS;
      float* dq = drows + h * HS;
      float *dk, *dv;
      int ld_dkv;
      if (G > 1) {
        dk = per_head.data() + (static_cast<size_t>(b) * NH + h) * head_dkv, dv = dk + HS, ld_dkv = 2 * HS;
        for (int t = 0; t < T; ++t) std::memset(dk + static_cast<size_t>(t) * 2 * HS, 0, 2 * HS * sizeof(float));
      } else {  // this (b, h) owns the k/v head h: clear its slices first
        dk = drows + k_off + h * HS, dv = drows + v_off + h * HS, ld_dkv = QKV;
        for (int t = 0; t < T; ++t) {
          std::memset(dk + static_cast<size_t>(t) * QKV, 0, HS * sizeof(float));
          std::memset(dv + static_cast<size_t>(t) * QKV, 0, HS * sizeof(float));
        }
      }
      const float* dout_h = dout + bT * OC + h * HS;
      const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * T;
      const int32_t* sg = seg ? seg + bT : nullptr;
      BackwardStrips& w = backward_strips(T);
      for (int r0 = 0; r0 < T; r0 += kRows) {
        const int r1 = std::min(T, r0 + kRows), n = r1 - r0;
        const float* q_blk = q + static_cast<size_t>(r0) * QKV;
        const float* dout_blk = dout_h + static_cast<size_t>(r0) * OC;
        float* dq_blk = dq + static_cast<size_t>(r0) * QKV;
        const int kmin = tile_kmin(vis.first.data() + bT, r0, r1), span = r1 - kmin;
        for (int i = 0; i < n; ++i) {
          w.d[i] = 0.0;
          std::memset(dq_blk + static_cast<size_t>(i) * QKV, 0, HS * sizeof(float));
        }
        // Pass 1, chunk by chunk: P = exp(scale·Q·Kᵀ − lse) recomputed, dP = dO·Vᵀ, D += Σ P·dP.
        for (int c0 = kmin; c0 < r1; c0 += kCols) {
          const int nc = std::min(kCols, r1 - c0);
          float* p_c = w.p.data() + (c0 - kmin);
          float* dp_c = w.dp.data() + (c0 - kmin);
          gemm(false, true, n, nc, HS, scale, q_blk, QKV, k + static_cast<size_t>(c0) * QKV, QKV, 0.0f, p_c, span);
          gemm(false, true, n, nc, HS, 1.0f, dout_blk, OC, v + static_cast<size_t>(c0) * QKV, QKV, 0.0f, dp_c, span);
          for (int i = 0; i < n; ++i) {
            const int t = r0 + i;
            const RowKeys key = row_keys(vis, bT, t, c0, nc);
            float* p = p_c + static_cast<size_t>(i) * span;
            float* dp = dp_c + static_cast<size_t>(i) * span;
            const float l = lse_h[t];
            std::fill(p, p + key.lo, 0.0f);
            std::fill(p + std::max(key.hi + 1, key.lo), p + nc, 0.0f);
            if (key.check)  // a masked key: p = exp(−inf) = 0, and its dP (anything, even NaN) 0
              for (int j = key.lo; j <= key.hi; ++j) {
                const bool seen = sg[c0 + j] == sg[t];
                p[j] = seen ? p[j] : -std::numeric_limits<float>::infinity();
                dp[j] = seen ? dp[j] : 0.0f;
              }
            const int len = key.hi - key.lo + 1;
            if (len <= 0) continue;
            float* pv = p + key.lo;
            const float* dpv = dp + key.lo;
            w.d[i] += lane_sum(len, [pv, dpv, l](int j) {  // p = exp(s − lse) in place, and Σ p·dP
              const float e = vec_exp(pv[j] - l);
              pv[j] = e;
              return e * dpv[j];
            });
          }
        }
        // Pass 2: dS = P·(dP − D)·scale in place of dP; dq += dS·K, dk += dSᵀ·Q, dv += Pᵀ·dO.
        for (int c0 = kmin; c0 < r1; c0 += kCols) {
          const int nc = std::min(kCols, r1 - c0);
          const float* p_c = w.p.data() + (c0 - kmin);
          float* ds_c = w.dp.data() + (c0 - kmin);
          for (int i = 0; i < n; ++i) {
            const float* p = p_c + static_cast<size_t>(i) * span;
            float* ds = ds_c + static_cast<size_t>(i) * span;
            const float D = static_cast<float>(w.d[i]);
            // p = 0 where not visible; dP there may be anything (even NaN), so select, not multiply
            for (int j = 0; j < nc; ++j) ds[j] = p[j] != 0.0f ? p[j] * (ds[j] - D) * scale : 0.0f;
          }
          const float* k_c = k + static_cast<size_t>(c0) * QKV;
          gemm(false, false, n, HS, nc, 1.0f, ds_c, span, k_c, QKV, 1.0f, dq_blk, QKV);
          gemm(true, false, nc, HS, n, 1.0f, ds_c, span, q_blk, QKV, 1.0f, dk + static_cast<size_t>(c0) * ld_dkv,
               ld_dkv);
          gemm(true, false, nc, HS, n, 1.0f, p_c, span, dout_blk, OC, 1.0f, dv + static_cast<size_t>(c0) * ld_dkv,
               ld_dkv);
        }
      }
    }
  }
  if (G == 1) return;
    // Each k/v head sums its G query heads' dk and dv in increasing h (repeat_kv's transpose).
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int kvh = 0; kvh < KVH; ++kvh) {
      for (int t = 0; t < T; ++t) {
        float* drow = dqkv + (static_cast<size_t>(b) * T + t) * QKV;
        float* dk = drow + k_off + kvh * HS;
        float* dv = drow + v_off + kvh * HS;
        for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
          const float* src =
              per_head.data() + (static_cast<size_t>(b) * NH + h) * head_dkv + static_cast<size_t>(t) * 2 * HS;
          for (int i = 0; i < HS; ++i) {
            dk[i] = h == kvh * G ? src[i] : dk[i] + src[i];
            dv[i] = h == kvh * G ? src[HS + i] : dv[i] + src[HS + i];
          }
        }
      }
    }
  }
}

}  // namespace sftdp::cpu
