// kernels/cpu/attention_bf16.cpp — the CPU twin of the bf16 table's attention (kernels/attention.h): for
// head sizes on tensor cores, kernels/cuda/attention/tensor_cores.cu's arithmetic written as plain loops, rounding
// for rounding, so that the two agree to fp32 accumulation order (they are bitwise equal on the CUDA
// simulator). What it reproduces (Tt = 64, scale = 1/√HS, s2 = scale·log2 e, bf16() = round to nearest
// even):
//   an mma step: acc = fp32(acc + Σ_{16 k} a·b), the sum in fp64 (the simulator's model of mma.sync),
//     S and dP over the head dimension in steps of 16, P·V and the gradients over keys / queries in
//     chunks of 16 aligned at multiples of 16;
//   forward: key tiles [kt·64, kt·64 + 64) for kt <= qt whose segment-id ranges meet the query tile's,
//     increasing; S masked to −inf; m' = max(m, S), shift = m'·s2 (0 while m' = −inf), α = exp2((m − m')·s2)
//     (1 while m' = −inf), P = exp2(fma(S, s2, −shift)), the row sum as the GPU's four lanes sum it
//     (lane t: columns 8n + 2t, 8n + 2t + 1 for n = 0..7 in order, then (t0 + t1) + (t2 + t3)),
//     l = fma(l, α, sum), O = O·α then += bf16(P)·bf16(V); out = O·(1/l), lse = fma(m, scale, log l);
//   backward: D = the warp butterfly of 32 lanes' fma sums of bf16(dO)·O (lane l: i = l, l + 32, ...),
//     P = exp2(fma(S, s2, −lse·log2 e)) (0 where invisible), dS = P·(dP − D), dV = Σ bf16(P)·bf16(dO) and
//     dK = scale·Σ bf16(dS)·bf16(q) over the group's heads in increasing h, then queries in increasing
//     chunks; dQ = scale·Σ bf16(dS)·bf16(k) over keys in increasing chunks.
// Context parallelism (attention_cp_{fwd,bwd}_bf16): the same arithmetic for a rank's query rows at their global
// positions against the gathered keys and values (a View says where each is, as the GPU's Layout does).
// Built with -ffp-contract=off (CMakeLists.txt): every other a·b + c rounds twice, as written. Other head
// sizes: the fp32 attention (kernels/cpu/attention.cpp) of bf16-rounded inputs, as the GPU's fallback.
// The act16 twins (cpu::act16::attention_{fwd,bwd}, kernels/act16.h): bf16 q|k|v, dO and O widened exactly, then on
// tensor-core head sizes the same arithmetic (D = Σ dO·O from the stored bf16 O), out and dqkv rounded to bf16 once
// from the fp32 values the fp32 interface would store; other head sizes: the CUDA-core kernels' formulas
// (kernels/cuda/attention/cuda_cores.cu) as plain fp32 loops, D from the stored bf16 values, outputs rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/act16.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu/attention_tiles.h"
#include "sftdp/check.h"

namespace sftdp::cpu {
namespace {

using attention_bf16::kLog2e;
using attention_bf16::kTile;
constexpr int kChunk = 16;  // an mma's k
using attention_tiles::kMasked;

float round_bf16(float x) {
  uint16_t b;
  float r;
  bf16_pack(&b, &x, 1);
  bf16_unpack(&r, &b, 1);
  return r;
}

// One mma step of one output element: acc + Σ_{i<16} a[i·sa]·b[i·sb], in fp64, rounded to fp32 once.
float mma_step(float acc, const float* a, size_t sa, const float* b, size_t sb) {
  double d = acc;
  for (int i = 0; i < kChunk; ++i) d += static_cast<double>(a[i * sa]) * static_cast<double>(b[i * sb]);
  return static_cast<float>(d);
}
// A dot product over HS as the tensor cores take it: HS / 16 chained steps from 0.
float mma_dot(const float* a, const float* b, int HS) {
  float acc = 0.f;
  for (int k = 0; k < HS; k += kChunk) acc = mma_step(acc, a + k, 1, b + k, 1);
  return acc;
}

// Where the queries, keys and values are (the CUDA kernels' Geometry, kernels/cuda/attention/tc_tiles.cuh): the whole
// rows (query row t at position t, K and V the k/v heads of the same rows, Tq = Tk) or context parallelism (Tq query
// rows at increasing positions qpos against Tk gathered rows of K and V). All inputs already rounded to bf16.
struct View {
  const float* q;  // (B, Tq, QKV): the q heads are read
  const float* kv;  // (B, Tk, kv_ld)
  int kv_ld, k_col, v_col;  // the row stride of kv, the columns of k head 0 and v head 0
  const int32_t* qpos;  // (Tq) or null: row t at position t
  const int32_t *seg_q, *seg_k;  // (B, Tq), (B, Tk) or both null
  int B, Tq, Tk, NH, KVH, HS;
  int QKV() const { return (NH + 2 * KVH) * HS; }
  int pos(int t) const { return qpos ? qpos[t] : t; }
  int q_tiles() const { return (Tq + kTile - 1) / kTile; }
  int k_tiles() const { return (Tk + kTile - 1) / kTile; }
  // The last key tile that query tile qt may see: the one holding its last row's position.
  int last_key_tile(int qt) const {
    return std::min(pos(std::min(qt * kTile + kTile - 1, Tq - 1)) / kTile, k_tiles() - 1);
  }
  const float* key(int b, int j, int kvh) const {
    return kv + (static_cast<size_t>(b) * Tk + j) * kv_ld + k_col + kvh * HS;
  }
  const float* value(int b, int j, int kvh) const {
    return kv + (static_cast<size_t>(b) * Tk + j) * kv_ld + v_col + kvh * HS;
  }
};

// Per batch row: the (min, max) segment id of each 64-row tile of the queries and of the keys, and whether a query
// tile's range meets a key tile's.
struct TileRanges {
  std::vector<int32_t> qlo, qhi, klo, khi;
  bool meet(int qt, int kt) const { return qlo.empty() || (qlo[qt] <= khi[kt] && klo[kt] <= qhi[qt]); }
};
void ranges_of(std::vector<int32_t>& lo, std::vector<int32_t>& hi, const int32_t* seg_row, int T) {
  const int tiles = (T + kTile - 1) / kTile;
  lo.assign(tiles, std::numeric_limits<int32_t>::max());
  hi.assign(tiles, std::numeric_limits<int32_t>::min());
  for (int t = 0; t < T; ++t)
    lo[t / kTile] = std::min(lo[t / kTile], seg_row[t]), hi[t / kTile] = std::max(hi[t / kTile], seg_row[t]);
}
TileRanges tile_ranges(const View& v, int b) {
  TileRanges r;
  if (!v.seg_q) return r;
  ranges_of(r.qlo, r.qhi, v.seg_q + static_cast<size_t>(b) * v.Tq, v.Tq);
  ranges_of(r.klo, r.khi, v.seg_k + static_cast<size_t>(b) * v.Tk, v.Tk);
  return r;
}

// Whether query row t of batch row b sees key j.
bool visible(const View& v, int b, int t, int j) {
  return t < v.Tq && j < v.Tk && j <= v.pos(t) &&
         (!v.seg_q || v.seg_k[static_cast<size_t>(b) * v.Tk + j] == v.seg_q[static_cast<size_t>(b) * v.Tq + t]);
}

// Whether position t of one whole row (segment ids seg_row, may be null) sees position j.
bool visible(int t, int j, int T, const int32_t* seg_row) {
  return j <= t && j < T && t < T && (!seg_row || seg_row[j] == seg_row[t]);
}

void check_dims(const char* op, int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               std::string(op) + ": need T, HS > 0 and NH a positive multiple of KVH");
}

// The tensor-core forward (out (B, Tq, NH·HS) =, lse (B, NH, Tq) =).
void tc_forward(float* out, float* lse, const View& v) {
  const int QKV = v.QKV(), G = v.NH / v.KVH, OC = v.NH * v.HS, HS = v.HS, NH = v.NH;
  const float scale = attention_bf16::scale(HS), s2 = attention_bf16::scale_log2(HS);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < v.B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* rows = v.q + static_cast<size_t>(b) * v.Tq * QKV;
      const TileRanges ranges = tile_ranges(v, b);
      std::vector<float> o(HS), s(kTile);
      for (int t = 0; t < v.Tq; ++t) {
        const float* q = rows + static_cast<size_t>(t) * QKV + h * HS;
        float m = kMasked, l = 0.f;
        std::fill(o.begin(), o.end(), 0.f);
        const int qt = t / kTile;
        for (int kt = 0; kt <= v.last_key_tile(qt); ++kt) {
          if (!ranges.meet(qt, kt)) continue;
          const int k0 = kt * kTile;
          float mx = m;
          for (int c = 0; c < kTile; ++c) {
            const int j = k0 + c;
            s[c] = visible(v, b, t, j) ? mma_dot(q, v.key(b, j, h / G), HS) : kMasked;
            mx = std::max(mx, s[c]);  // max is exact in any order
          }
          const float shift = mx == kMasked ? 0.f : mx * s2;
          const float alpha = mx == kMasked ? 1.f : std::exp2((m - mx) * s2);
          m = mx;
          float lane[4] = {0.f, 0.f, 0.f, 0.f};
          for (int n = 0; n < kTile / 8; ++n)
            for (int tq = 0; tq < 4; ++tq)
              for (int e = 0; e < 2; ++e) {
                float& p = s[n * 8 + 2 * tq + e];
                p = std::exp2(std::fma(p, s2, -shift));
                lane[tq] += p;
              }
          l = std::fma(l, alpha, (lane[0] + lane[1]) + (lane[2] + lane[3]));
          for (int i = 0; i < HS; ++i) o[i] *= alpha;
          for (int c = 0; c < kTile; ++c) s[c] = round_bf16(s[c]);
          for (int c0 = 0; c0 < kTile; c0 += kChunk)  // O += bf16(P)·V; keys past Tk are zero rows on the GPU
            for (int i = 0; i < HS; ++i) {
              double d = o[i];
              for (int c = c0; c < c0 + kChunk; ++c)
                if (k0 + c < v.Tk) d += static_cast<double>(s[c]) * v.value(b, k0 + c, h / G)[i];
              o[i] = static_cast<float>(d);
            }
        }
        const float inv = 1.f / l;
        float* orow = out + (static_cast<size_t>(b) * v.Tq + t) * OC + h * HS;
        for (int i = 0; i < HS; ++i) orow[i] = o[i] * inv;
        lse[(static_cast<size_t>(b) * NH + h) * v.Tq + t] = std::fma(m, scale, std::log(l));
      }
    }
}

// The tensor-core backward: dq's q heads (B, Tq, QKV) =, dkv (laid out as v.kv) = dK and dV (the whole rows: dq and
// dkv are the same dqkv). g: the rounded dO (B, Tq, NH·HS); out: the forward's output as D reads it.
void tc_backward(float* dq_rows, float* dkv, const float* g, const float* out, const float* lse, const View& v) {
  const int QKV = v.QKV(), G = v.NH / v.KVH, OC = v.NH * v.HS, HS = v.HS, NH = v.NH, Tq = v.Tq, Tk = v.Tk;
  const float scale = attention_bf16::scale(HS), s2 = attention_bf16::scale_log2(HS);
  const int Tqp = v.q_tiles() * kTile, Tkp = v.k_tiles() * kTile;  // padded to whole tiles, as on the GPU
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < v.B; ++b)
    for (int kvh = 0; kvh < v.KVH; ++kvh) {
      const size_t bTq = static_cast<size_t>(b) * Tq;
      const float* rows = v.q + bTq * QKV;
      const float* grows = g + bTq * OC;
      const TileRanges ranges = tile_ranges(v, b);
      // query tile qt reads key tile kt
      const auto reads = [&](int qt, int kt) { return kt <= v.last_key_tile(qt) && ranges.meet(qt, kt); };
      std::vector<float> P(static_cast<size_t>(Tqp) * Tkp), dS(static_cast<size_t>(Tqp) * Tkp), D(Tq);
      std::vector<float> dk(static_cast<size_t>(Tk) * HS, 0.f), dv(static_cast<size_t>(Tk) * HS, 0.f);
      for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
        for (int t = 0; t < Tq; ++t) {  // D: 32 lanes' fma sums, then the butterfly
          const float* gr = grows + static_cast<size_t>(t) * OC + h * HS;
          const float* orow = out + (bTq + t) * OC + h * HS;
          float lane[32];
          for (int l = 0; l < 32; ++l) {
            lane[l] = 0.f;
            for (int i = l; i < HS; i += 32) lane[l] = std::fma(gr[i], orow[i], lane[l]);
          }
          for (int off = 16; off > 0; off /= 2) {
            float next[32];
            for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ off];
            std::memcpy(lane, next, sizeof lane);
          }
          D[t] = lane[0];
        }
        // P and dS (rounded to bf16, as the GEMMs read them) for every pair; 0 past the ends and where invisible
        std::fill(P.begin(), P.end(), 0.f);
        std::fill(dS.begin(), dS.end(), 0.f);
        const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * Tq;
        for (int t = 0; t < Tq; ++t)
          for (int j = 0; j < Tk; ++j) {
            if (!visible(v, b, t, j) || !reads(t / kTile, j / kTile)) continue;
            const float* q = rows + static_cast<size_t>(t) * QKV + h * HS;
            const float sc = mma_dot(q, v.key(b, j, kvh), HS);
            const float p = std::exp2(std::fma(sc, s2, -(lse_h[t] * kLog2e)));
            const float dp = mma_dot(grows + static_cast<size_t>(t) * OC + h * HS, v.value(b, j, kvh), HS);
            P[static_cast<size_t>(t) * Tkp + j] = round_bf16(p);
            dS[static_cast<size_t>(t) * Tkp + j] = round_bf16(p * (dp - D[t]));
          }
        // dQ of head h: keys in chunks of 16, increasing
        for (int t = 0; t < Tq; ++t) {
          float* dq = dq_rows + (bTq + t) * QKV + h * HS;
          for (int i = 0; i < HS; ++i) {
            float acc = 0.f;
            for (int j0 = 0; j0 < Tkp; j0 += kChunk) {
              if (!reads(t / kTile, j0 / kTile)) continue;  // a tile never read
              double d = acc;
              for (int j = j0; j < j0 + kChunk && j < Tk; ++j)
                d += static_cast<double>(dS[static_cast<size_t>(t) * Tkp + j]) * v.key(b, j, kvh)[i];
              acc = static_cast<float>(d);
            }
            dq[i] = acc * scale;
          }
        }
        // dK, dV of the k/v head: this head's queries in chunks of 16, increasing, after the heads before it
        for (int j = 0; j < Tk; ++j)
          for (int i = 0; i < HS; ++i) {
            float ak = dk[static_cast<size_t>(j) * HS + i], av = dv[static_cast<size_t>(j) * HS + i];
            for (int t0 = 0; t0 < Tqp; t0 += kChunk) {
              if (!reads(t0 / kTile, j / kTile)) continue;  // a tile never read
              double dK = ak, dV = av;
              for (int t = t0; t < t0 + kChunk && t < Tq; ++t) {
                const size_t tj = static_cast<size_t>(t) * Tkp + j;
                dK += static_cast<double>(dS[tj]) * rows[static_cast<size_t>(t) * QKV + h * HS + i];
                dV += static_cast<double>(P[tj]) * grows[static_cast<size_t>(t) * OC + h * HS + i];
              }
              ak = static_cast<float>(dK), av = static_cast<float>(dV);
            }
            dk[static_cast<size_t>(j) * HS + i] = ak, dv[static_cast<size_t>(j) * HS + i] = av;
          }
      }
      for (int j = 0; j < Tk; ++j) {
        float* row = dkv + (static_cast<size_t>(b) * Tk + j) * v.kv_ld;
        for (int i = 0; i < HS; ++i) {
          row[v.k_col + kvh * HS + i] = dk[static_cast<size_t>(j) * HS + i] * scale;
          row[v.v_col + kvh * HS + i] = dv[static_cast<size_t>(j) * HS + i];
        }
      }
    }
}

View whole_rows(const float* x, const int32_t* seg, int B, int T, int NH, int KVH, int HS) {
  return {x, x, (NH + 2 * KVH) * HS, NH * HS, (NH + KVH) * HS, nullptr, seg, seg, B, T, T, NH, KVH, HS};
}

}  // namespace

void attention_fwd_bf16(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                        int HS) {
  check_dims("attention_fwd_bf16", B, T, NH, KVH, HS);
  const std::vector<float> x = attention_tiles::bf16_rounded(qkv, static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS);
  if (!attention_bf16::tensor_cores(HS)) return attention_fwd(out, lse, x.data(), seg, B, T, NH, KVH, HS);
  tc_forward(out, lse, whole_rows(x.data(), seg, B, T, NH, KVH, HS));
}

void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* seg, int B, int T, int NH, int KVH, int HS) {
  check_dims("attention_bwd_bf16", B, T, NH, KVH, HS);
  const std::vector<float> x = attention_tiles::bf16_rounded(qkv, static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS);
  const std::vector<float> g = attention_tiles::bf16_rounded(dout, static_cast<size_t>(B) * T * NH * HS);
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd(dqkv, g.data(), x.data(), out, lse, seg, B, T, NH, KVH, HS);
  tc_backward(dqkv, dqkv, g.data(), out, lse, whole_rows(x.data(), seg, B, T, NH, KVH, HS));
}

void attention_cp_fwd_bf16(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                           const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  check_dims("attention_cp_fwd_bf16", B, Tq, NH, KVH, HS);
  const int KV = 2 * KVH * HS;
  const auto x = attention_tiles::bf16_rounded(qkv, static_cast<size_t>(B) * Tq * (NH + 2 * KVH) * HS);
  const auto k = attention_tiles::bf16_rounded(kv, static_cast<size_t>(B) * Tk * KV);
  if (!attention_bf16::tensor_cores(HS))
    return attention_cp_fwd(out, lse, x.data(), k.data(), qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS);
  tc_forward(out, lse, {x.data(), k.data(), KV, 0, KVH * HS, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS});
}

void attention_cp_bwd_bf16(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                           const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                           const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  check_dims("attention_cp_bwd_bf16", B, Tq, NH, KVH, HS);
  const int KV = 2 * KVH * HS;
  const auto x = attention_tiles::bf16_rounded(qkv, static_cast<size_t>(B) * Tq * (NH + 2 * KVH) * HS);
  const auto k = attention_tiles::bf16_rounded(kv, static_cast<size_t>(B) * Tk * KV);
  const auto g = attention_tiles::bf16_rounded(dout, static_cast<size_t>(B) * Tq * NH * HS);
  if (!attention_bf16::tensor_cores(HS))
    return attention_cp_bwd(dqkv, dkv, g.data(), x.data(), k.data(), out, lse, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH,
                            HS);
  tc_backward(dqkv, dkv, g.data(), out, lse, {x.data(), k.data(), KV, 0, KVH * HS, qpos, seg_q, seg_k, B, Tq, Tk, NH,
                                              KVH, HS});
}

namespace act16 {
namespace {

using sftdp::act16::to_bf16;
using sftdp::act16::to_float;

std::vector<float> widened(const uint16_t* x, size_t n) {
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = to_float(x[i]);
  return r;
}
void round_into(uint16_t* dst, const std::vector<float>& src) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = to_bf16(src[i]);
}

// Head sizes without tensor-core kernels, forward (x: the widened q|k|v): per row s = scale·(q·k), i increasing,
// over the visible keys; m = max s, l = Σ exp(s − m), out = (Σ exp(s − m)·v)·(1/l), lse = m + log l.
void cuda_core_fwd(float* out, float* lse, const float* x, const int32_t* seg, int B, int T, int NH, int KVH, int HS) {
  const int QKV = (NH + 2 * KVH) * HS, G = NH / KVH, OC = NH * HS;
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* rows = x + static_cast<size_t>(b) * T * QKV;
      const int32_t* sg = seg ? seg + static_cast<size_t>(b) * T : nullptr;
      const int ko = (NH + h / G) * HS, vo = (NH + KVH + h / G) * HS;
      std::vector<float> s(T), acc(HS);
      for (int t = 0; t < T; ++t) {
        const float* q = rows + static_cast<size_t>(t) * QKV + h * HS;
        float m = kMasked;
        for (int j = 0; j <= t; ++j) {
          if (!visible(t, j, T, sg)) continue;
          float dot = 0.f;
          for (int i = 0; i < HS; ++i) dot += q[i] * rows[static_cast<size_t>(j) * QKV + ko + i];
          s[j] = scale * dot;
          m = std::max(m, s[j]);
        }
        float l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int j = 0; j <= t; ++j) {
          if (!visible(t, j, T, sg)) continue;
          const float p = std::exp(s[j] - m);
          l += p;
          for (int i = 0; i < HS; ++i) acc[i] += p * rows[static_cast<size_t>(j) * QKV + vo + i];
        }
        const float inv = 1.f / l;
        for (int i = 0; i < HS; ++i) out[(static_cast<size_t>(b) * T + t) * OC + h * HS + i] = acc[i] * inv;
        lse[(static_cast<size_t>(b) * NH + h) * T + t] = m + std::log(l);
      }
    }
}

// Head sizes without tensor-core kernels, backward (g, x, o: the widened dO, q|k|v, O): D = Σ dO·O, i increasing;
// per visible pair P = exp(scale·(q·k) − lse), dP = dO·v, dS = P·(dP − D)·scale; dq = Σ dS·k over keys, dk = Σ dS·q
// and dv = Σ P·dO over the group's heads in increasing h and their queries in increasing t.
void cuda_core_bwd(float* dqkv, const float* g, const float* x, const float* o, const float* lse, const int32_t* seg,
                   int B, int T, int NH, int KVH, int HS) {
  const int QKV = (NH + 2 * KVH) * HS, G = NH / KVH, OC = NH * HS;
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int kvh = 0; kvh < KVH; ++kvh) {
      const size_t bT = static_cast<size_t>(b) * T;
      const float* rows = x + bT * QKV;
      const int32_t* sg = seg ? seg + bT : nullptr;
      const int ko = (NH + kvh) * HS, vo = (NH + KVH + kvh) * HS;
      std::vector<float> dk(static_cast<size_t>(T) * HS, 0.f), dv(static_cast<size_t>(T) * HS, 0.f), dq(HS);
      for (int h = kvh * G; h < (kvh + 1) * G; ++h)
        for (int t = 0; t < T; ++t) {
          const float* q = rows + static_cast<size_t>(t) * QKV + h * HS;
          const float* gt = g + (bT + t) * OC + h * HS;
          const float* ot = o + (bT + t) * OC + h * HS;
          float D = 0.f;
          for (int i = 0; i < HS; ++i) D += gt[i] * ot[i];
          const float L = lse[(static_cast<size_t>(b) * NH + h) * T + t];
          std::fill(dq.begin(), dq.end(), 0.f);
          for (int j = 0; j <= t; ++j) {
            if (!visible(t, j, T, sg)) continue;
            const float* k = rows + static_cast<size_t>(j) * QKV + ko;
            const float* v = rows + static_cast<size_t>(j) * QKV + vo;
            float qk = 0.f, dp = 0.f;
            for (int i = 0; i < HS; ++i) qk += q[i] * k[i], dp += gt[i] * v[i];
            const float p = std::exp(scale * qk - L), ds = p * (dp - D) * scale;
            for (int i = 0; i < HS; ++i) {
              dq[i] += ds * k[i];
              dk[static_cast<size_t>(j) * HS + i] += ds * q[i];
              dv[static_cast<size_t>(j) * HS + i] += p * gt[i];
            }
          }
          std::copy(dq.begin(), dq.end(), dqkv + (bT + t) * QKV + h * HS);
        }
      for (int j = 0; j < T; ++j) {
        std::copy_n(dk.data() + static_cast<size_t>(j) * HS, HS, dqkv + (bT + j) * QKV + ko);
        std::copy_n(dv.data() + static_cast<size_t>(j) * HS, HS, dqkv + (bT + j) * QKV + vo);
      }
    }
}

}  // namespace

void attention_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                   int HS) {
  check_dims("act16::attention_fwd", B, T, NH, KVH, HS);
  const std::vector<float> x = widened(qkv, static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS);
  std::vector<float> o(static_cast<size_t>(B) * T * NH * HS);
  if (attention_bf16::tensor_cores(HS))
    attention_fwd_bf16(o.data(), lse, x.data(), seg, B, T, NH, KVH, HS);  // its rounding of x changes nothing
  else
    cuda_core_fwd(o.data(), lse, x.data(), seg, B, T, NH, KVH, HS);
  round_into(out, o);
}

void attention_bwd(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS) {
  check_dims("act16::attention_bwd", B, T, NH, KVH, HS);
  const size_t n_qkv = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS, n_out = static_cast<size_t>(B) * T * NH * HS;
  const std::vector<float> x = widened(qkv, n_qkv), g = widened(dout, n_out), o = widened(out, n_out);
  std::vector<float> d(n_qkv);
  if (attention_bf16::tensor_cores(HS))
    attention_bwd_bf16(d.data(), g.data(), x.data(), o.data(), lse, seg, B, T, NH, KVH, HS);
  else
    cuda_core_bwd(d.data(), g.data(), x.data(), o.data(), lse, seg, B, T, NH, KVH, HS);
  round_into(dqkv, d);
}

void attention_cp_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const uint16_t* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  check_dims("act16::attention_cp_fwd", B, Tq, NH, KVH, HS);
  SFTDP_ASSERT(attention_bf16::tensor_cores(HS), "act16::attention_cp_fwd: head sizes on tensor cores only");
  const std::vector<float> x = widened(qkv, static_cast<size_t>(B) * Tq * (NH + 2 * KVH) * HS);
  const std::vector<float> k = widened(kv, static_cast<size_t>(B) * Tk * 2 * KVH * HS);
  std::vector<float> o(static_cast<size_t>(B) * Tq * NH * HS);
  attention_cp_fwd_bf16(o.data(), lse, x.data(), k.data(), qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS);
  round_into(out, o);
}

void attention_cp_bwd(uint16_t* dqkv, float* dkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* kv,
                      const uint16_t* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                      const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  check_dims("act16::attention_cp_bwd", B, Tq, NH, KVH, HS);
  SFTDP_ASSERT(attention_bf16::tensor_cores(HS), "act16::attention_cp_bwd: head sizes on tensor cores only");
  const int QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const size_t rows = static_cast<size_t>(B) * Tq, n_out = rows * OC;
  const std::vector<float> x = widened(qkv, rows * QKV), g = widened(dout, n_out), o = widened(out, n_out);
  const std::vector<float> k = widened(kv, static_cast<size_t>(B) * Tk * 2 * KVH * HS);
  std::vector<float> d(rows * QKV);
  attention_cp_bwd_bf16(d.data(), dkv, g.data(), x.data(), k.data(), o.data(), lse, qpos, seg_q, seg_k, B, Tq, Tk, NH,
                        KVH, HS);
  for (size_t r = 0; r < rows; ++r)
    for (int i = 0; i < OC; ++i) dqkv[r * QKV + i] = to_bf16(d[r * QKV + i]);  // the q heads only
}

}  // namespace act16
}  // namespace sftdp::cpu
