// kernels/cuda/attention/tc_forward.cuh — the tensor-core attention's forward kernel and the segment-id ranges
// of its tiles (tensor_cores.cu describes the algorithm). Part of tensor_cores.cu's translation unit.
#pragma once
#include "kernels/cuda/attention/tc_tiles.cuh"

namespace sftdp::cuda {
namespace {

// (min, max) segment id of each 64-row tile of each batch row: grid (tiles, B), block kTile.
__global__ void attention_tc_segment_ranges_kernel(int2* ranges, const int32_t* seg, int T) {
  __shared__ int lo[kTile], hi[kTile];
  const int r = static_cast<int>(threadIdx.x), t = static_cast<int>(blockIdx.x) * kTile + r;
  const int32_t* row = seg + static_cast<size_t>(blockIdx.y) * T;
  lo[r] = t < T ? row[t] : INT32_MAX;
  hi[r] = t < T ? row[t] : INT32_MIN;
  for (int half = kTile / 2; half > 0; half /= 2) {
    __syncthreads();
    if (r < half) lo[r] = min(lo[r], lo[r + half]), hi[r] = max(hi[r], hi[r + half]);
  }
  if (r == 0) ranges[blockIdx.y * gridDim.x + blockIdx.x] = make_int2(lo[0], hi[0]);
}

// out: fp32 output (the fp32 interface) or null; out16: bf16 output (act16) or null; qkv: the query rows (B, Tq,
// QKV), of which the q heads are read. grid (q_tiles, NH, B), block kThreads, dynamic shared memory fwd_smem<HS>().
// Warp w: rows 16·(w % 4) .. + 15 of the tile; half w / 4: keys 32·half .. + 31 of each key tile (S, P) and output
// columns HS/2·half .. + HS/2 − 1 (O).
template <int HS>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attention_tc_fwd_kernel(float* out, bf16* out16, float* lse, const bf16* qkv, Layout lay, int Tq, int Tk, int NH,
                            int KVH, float scale, float scale_log2) {
  constexpr int R = HS + 8, KS = HS / 16, NTH = HS / 16;  // NTH: n-tiles of a half's HS/2 columns
  // Q's A fragments stay in registers up to HS 64 (16 of them); above, they are read from shared memory for each
  // key tile, which keeps the kernel within 128 registers without spilling.
  constexpr bool kQInRegisters = HS <= 64;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;                                                   // (kTile, R)
  bf16* sk = sq + kTile * R;                                         // [2] (kTile, R)
  bf16* sv = sk + 2 * kTile * R;                                     // [2] (kTile, R)
  int32_t* sseg = reinterpret_cast<int32_t*>(sv + 2 * kTile * R);    // [2] (kTile)
  float* smax = reinterpret_cast<float*>(sseg + 2 * kTile);          // [kWarps] (16): rows' maxima over a half's keys
  float* spart = smax + kWarps * 16;                                 // [kRowGroups] (2, kWarp): half 0's lane sums of P
  float* sl = spart + kRowGroups * 2 * kWarp;                        // [kRowGroups] (16): l at the end
  uint32_t* sp = reinterpret_cast<uint32_t*>(sl + kRowGroups * 16);  // [kWarps] (kFragWords): bf16(P) fragments
  const Geometry geo = geometry(lay, Tq, Tk, NH, KVH);
  const int qt = geo.q_tiles - 1 - static_cast<int>(blockIdx.x);  // long rows first
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (NH / KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rg = warp % kRowGroups, half = warp / kRowGroups, partner = warp ^ kRowGroups;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, r0 = qt * kTile;
  const bf16* rows = qkv + static_cast<size_t>(b) * Tq * QKV;
  const int32_t* seg_row = geo.lay.seg_q ? geo.lay.seg_q + static_cast<size_t>(b) * Tq : nullptr;

  load_tile<HS>(sq, rows + h * HS, QKV, r0, Tq);
  tc::cp_async_commit();
  const auto load_kv = [&](int stage, int kt) { load_kv_stage<HS>(sk, sv, sseg, stage, geo, b, kvh, kt); };
  const auto next_tile = [&](int kt) { return next_key_tile(geo, b, qt, kt); };
  int kt = next_tile(-1);  // never -1: every row sees its own key
  load_kv(0, kt);
  tc::cp_async_wait<1>();  // Q (the first group) has landed
  __syncthreads();
  uint32_t qf[kQInRegisters ? KS : 1][4];
  if constexpr (kQInRegisters) {
    SFTDP_UNROLL
    for (int ks = 0; ks < KS; ++ks) load_a<HS>(qf[ks], sq, rg * 16, ks * 16);
  }

  const int t0 = r0 + rg * 16 + g, t1 = t0 + 8, p0 = position(geo, t0), p1 = position(geo, t1);
  const int p_first = position(geo, r0 + rg * 16);  // the warp's rows' smallest position (positions increase)
  const int32_t seg0 = seg_row && t0 < Tq ? seg_row[t0] : 0, seg1 = seg_row && t1 < Tq ? seg_row[t1] : 0;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[NTH][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NTH; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  for (int stage = 0; kt >= 0; stage ^= 1) {
    if (!SFTDP_PLANTED(2)) tc::cp_async_wait<0>();
    __syncthreads();  // this stage's tiles (every thread's copies) are in shared memory; the other stage is free
    const int next = next_tile(kt);
    if (next >= 0) load_kv(stage ^ 1, next);  // in flight while this tile computes
    const bf16* K = sk + stage * kTile * R;
    const bf16* V = sv + stage * kTile * R;
    const int32_t* kseg = sseg + stage * kTile;
    const int k0 = kt * kTile, c0 = half * 32;  // this half's keys: k0 + c0 ..
    float s[4][4];                              // S: 16 rows x 32 keys, 4 n-tiles
    SFTDP_UNROLL
    for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    SFTDP_UNROLL
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t qa[4];
      if constexpr (kQInRegisters) {
        SFTDP_UNROLL
        for (int r = 0; r < 4; ++r) qa[r] = qf[ks][r];
      } else {
        load_a<HS>(qa, sq, rg * 16, ks * 16);
      }
      SFTDP_UNROLL
      for (int np = 0; np < 2; ++np) {
        uint32_t kb[4];
        load_b_rows<HS>(kb, K, c0 + np * 16, ks * 16);
        tc::mma_bf16_16816(s[2 * np], qa, kb, s[2 * np]);
        tc::mma_bf16_16816(s[2 * np + 1], qa, kb + 2, s[2 * np + 1]);
      }
    }
    // Mask unless every key of the tile is visible to every row of this warp.
    const bool all_visible = k0 + kTile - 1 <= p_first && k0 + kTile <= Tk && one_segment(geo, b, qt, kt);
    if (!all_visible) {
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + nt * 8 + 2 * tq + (e & 1), j = k0 + c;
          const bool visible = j <= (e < 2 ? p0 : p1) && j < Tk && (!seg_row || kseg[c] == (e < 2 ? seg0 : seg1));
          if (!visible) s[nt][e] = -INFINITY;
        }
      }
    }
    float mx[2];  // the row maxima of this half's keys, then of the tile's (max is exact in any order)
    SFTDP_UNROLL
    for (int i = 0; i < 2; ++i) {
      mx[i] = m[i];
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) mx[i] = max(mx[i], max(s[nt][2 * i], s[nt][2 * i + 1]));
      mx[i] = quad_max(mx[i]);
      if (tq == 0) smax[warp * 16 + i * 8 + g] = mx[i];
    }
    __syncthreads();  // both halves' maxima are written
    float alpha[2], shift[2];
    SFTDP_UNROLL
    for (int i = 0; i < 2; ++i) {
      mx[i] = max(mx[i], smax[partner * 16 + i * 8 + g]);
      shift[i] = mx[i] == -INFINITY ? 0.f : mx[i] * scale_log2;  // a row that has seen nothing yet: P = 0
      alpha[i] = mx[i] == -INFINITY ? 1.f : exp2f((m[i] - mx[i]) * scale_log2);
      m[i] = mx[i];
    }
    float rowsum[2] = {0.f, 0.f};  // this lane's sum of its P: half 0 from 0, half 1 from half 0's (below)
    SFTDP_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      SFTDP_UNROLL
      for (int e = 0; e < 4; ++e) s[nt][e] = exp2f(fmaf(s[nt][e], scale_log2, -shift[e / 2]));
    }
    SFTDP_UNROLL
    for (int kk = 0; kk < 2; ++kk) {  // bf16(P) as the A fragments of this half's two k-steps
      uint32_t pa[4];
      c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
      put_frag(sp + warp * kFragWords + kk * 4 * kWarp, pa, lane);
    }
    if (half == 0) {
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) rowsum[e / 2] += s[nt][e];
      }
      spart[(rg * 2 + 0) * kWarp + lane] = rowsum[0];
      spart[(rg * 2 + 1) * kWarp + lane] = rowsum[1];
    }
    if (!SFTDP_PLANTED(6)) __syncthreads();  // both halves' P fragments and half 0's partial sums are written
    if (half == 1) {  // the row sums, keys in increasing order, and l (half 0 gets l at the end)
      rowsum[0] = spart[(rg * 2 + 0) * kWarp + lane];
      rowsum[1] = spart[(rg * 2 + 1) * kWarp + lane];
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) rowsum[e / 2] += s[nt][e];
      }
      SFTDP_UNROLL
      for (int i = 0; i < 2; ++i) l[i] = fmaf(l[i], alpha[i], quad_sum(rowsum[i]));
    }
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt) {
      o[nt][0] *= alpha[0], o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1], o[nt][3] *= alpha[1];
    }
    SFTDP_UNROLL
    for (int kk = 0; kk < 4; ++kk) {  // O += bf16(P) · V, 16 keys per k-step, in increasing order
      uint32_t a[4];
      get_frag(a, sp + holder(kk / 2, half, warp, partner) * kFragWords + kk % 2 * 4 * kWarp, lane);
      mma_rows<HS, NTH>(o, a, V, kk * 16, half * (HS / 2));
    }
    kt = next;
  }
  if (half == 1 && tq == 0) sl[rg * 16 + g] = l[0], sl[rg * 16 + 8 + g] = l[1];
  __syncthreads();  // l is written
  SFTDP_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int t = i ? t1 : t0;
    if (t >= Tq) continue;
    l[i] = sl[rg * 16 + i * 8 + g];
    const float inv = 1.f / l[i];  // l >= 1: t sees itself
    const size_t at = (static_cast<size_t>(b) * Tq + t) * NH * HS + h * HS + half * (HS / 2) + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt) store_pair(out, out16, at + nt * 8, o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
    if (half == 1 && tq == 0)
      lse[(static_cast<size_t>(b) * NH + h) * Tq + t] = fmaf(m[i], scale, SFTDP_PLANTED(4) ? log2f(l[i]) : logf(l[i]));
  }
}

}  // namespace
}  // namespace sftdp::cuda
