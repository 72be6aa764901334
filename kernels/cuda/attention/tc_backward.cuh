// kernels/cuda/attention/tc_backward.cuh — the tensor-core attention's backward kernels: D = Σ dO·O per row, dK/dV
// per key tile, dQ per query tile, no atomics (tensor_cores.cu describes the algorithm). Part of tensor_cores.cu's
// translation unit.
#pragma once
#include "kernels/cuda/attention/tc_tiles.cuh"

namespace sftdp::cuda {
namespace {

// D[b,h,t] = Σ_i bf16(dO)·O over the head's HS values, O as stored (O: float or bf16): a warp per (b, t, h) row,
// lane l summing i = l, l + 32, ... by fma, then the warp's butterfly (warp_sum). grid ceil(B·T·NH / kWarps),
// block kThreads.
template <class O>
__global__ void attention_tc_bwd_delta_kernel(float* delta, const bf16* dout, const O* out, int rows, int T, int NH,
                                              int HS) {
  const int row = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (row >= rows) return;                          // whole warps leave together: the butterfly below is per warp
  const size_t at = static_cast<size_t>(row) * HS;  // (b·T + t)·NH + h rows of HS
  float acc = 0.f;
  for (int i = lane; i < HS; i += kWarp) acc = fmaf(__bfloat162float(dout[at + i]), widen(out[at + i]), acc);
  acc = warp_sum(acc);
  const int h = row % NH, bt = row / NH;
  if (lane == 0) delta[(static_cast<size_t>(bt / T) * NH + h) * T + bt % T] = acc;
}

// dK, dV of key tile kt of k/v head kvh into dkv (fp32) or dkv16 (bf16), the other null, laid out as geo.lay.kv (dqkv's
// k/v heads for the whole rows): grid (k_tiles, KVH, B), block kThreads, dynamic shared memory dkv_smem<HS>(). Warp w:
// keys 16·(w % 4) .. + 15 of the tile; half w / 4: queries 16·half .. + 15 of each 32 (Sᵀ, dPᵀ) and output columns
// HS/2·half .. (dK, dV). A key tile that none of the queries sees gets zeros.
template <int HS>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attention_tc_bwd_dkv_kernel(float* dkv, bf16* dkv16, const bf16* qkv, const bf16* dout, const float* lse,
                                const float* delta, Layout lay, int Tq, int Tk, int NH, int KVH, float scale,
                                float scale_log2) {
  constexpr int R = HS + 8, NTH = HS / 16;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sk = smem;                                                   // (kTile, R): this block's keys
  bf16* sv = sk + kTile * R;                                         // (kTile, R)
  bf16* sq = sv + kTile * R;                                         // [2] (kTile, R): a query tile's q rows
  bf16* sdo = sq + 2 * kTile * R;                                    // [2] (kTile, R): and its dO rows
  float* slse = reinterpret_cast<float*>(sdo + 2 * kTile * R);       // [2] (kTile): lse·log2e
  float* sdelta = slse + 2 * kTile;                                  // [2] (kTile)
  int32_t* sseg = reinterpret_cast<int32_t*>(sdelta + 2 * kTile);    // [2] (kTile)
  int32_t* spos = sseg + 2 * kTile;                                  // [2] (kTile): the queries' positions
  uint32_t* sx = reinterpret_cast<uint32_t*>(spos + 2 * kTile);      // [kWarps] (kFragWords): bf16(Pᵀ), bf16(dSᵀ)
  const Geometry geo = geometry(lay, Tq, Tk, NH, KVH);
  const int tiles = geo.q_tiles;
  const int kt = static_cast<int>(blockIdx.x);
  const int kvh = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), G = NH / KVH;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rg = warp % kRowGroups, half = warp / kRowGroups, partner = warp ^ kRowGroups;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const bf16* rows = qkv + static_cast<size_t>(b) * Tq * QKV;
  const bf16* drows = dout + static_cast<size_t>(b) * Tq * OC;
  const bf16* kvrows = geo.lay.kv + static_cast<size_t>(b) * Tk * geo.lay.kv_ld;
  const int32_t* seg_row = geo.lay.seg_q ? geo.lay.seg_q + static_cast<size_t>(b) * Tq : nullptr;
  const int32_t* kseg_row = geo.lay.seg_k ? geo.lay.seg_k + static_cast<size_t>(b) * Tk : nullptr;
  const int kb = kt * kTile + rg * 16, j0 = kb + g, j1 = j0 + 8;
  const int32_t sj0 = kseg_row && j0 < Tk ? kseg_row[j0] : 0, sj1 = kseg_row && j1 < Tk ? kseg_row[j1] : 0;

  // Work items: (query head h = kvh·G + item / tiles, query tile item % tiles), increasing, that may see key tile kt.
  const auto next_item = [&](int item) {
    for (++item; item < G * tiles; ++item) {
      const int qt = item % tiles;
      if (last_key_tile(geo, qt) >= kt && ranges_meet(geo, b, qt, kt)) return item;
    }
    return -1;
  };
  const auto load_q = [&](int stage, int item) {
    const int h = kvh * G + item / tiles, q0 = item % tiles * kTile;
    load_tile<HS>(sq + stage * kTile * R, rows + h * HS, QKV, q0, Tq);
    load_tile<HS>(sdo + stage * kTile * R, drows + h * HS, OC, q0, Tq);
    const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * Tq;
    const float* delta_h = delta + (static_cast<size_t>(b) * NH + h) * Tq;
    for (int r = static_cast<int>(threadIdx.x); r < kTile; r += kThreads) {
      const bool valid = q0 + r < Tq;
      slse[stage * kTile + r] = valid ? lse_h[q0 + r] * kLog2e : 0.f;
      sdelta[stage * kTile + r] = valid ? delta_h[q0 + r] : 0.f;
      spos[stage * kTile + r] = position(geo, q0 + r);
    }
    if (seg_row) load_segments(sseg + stage * kTile, seg_row, q0, Tq);
    tc::cp_async_commit();
  };
  float dk[NTH][4], dv[NTH][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NTH; ++nt) {
    SFTDP_UNROLL
    for (int e = 0; e < 4; ++e) dk[nt][e] = dv[nt][e] = 0.f;
  }
  int item = next_item(-1);  // the whole rows: (h = kvh·G, qt = kt), the diagonal tile
  if (item >= 0) {
    load_tile<HS>(sk, kvrows + geo.lay.k_col + kvh * HS, geo.lay.kv_ld, kt * kTile, Tk);
    load_tile<HS>(sv, kvrows + geo.lay.v_col + kvh * HS, geo.lay.kv_ld, kt * kTile, Tk);
    tc::cp_async_commit();
    load_q(0, item);
  }
  for (int stage = 0; item >= 0; stage ^= 1) {
    if (!SFTDP_PLANTED(2)) tc::cp_async_wait<0>();
    __syncthreads();  // this stage (and K, V) in shared memory; every warp is done with the other stage
    const int next = next_item(item);
    if (next >= 0) load_q(stage ^ 1, next);
    const int qt = item % tiles, q0 = qt * kTile;
    const bf16* Q = sq + stage * kTile * R;
    const bf16* dO = sdo + stage * kTile * R;
    const float* L = slse + stage * kTile;
    const float* Dq = sdelta + stage * kTile;
    const int32_t* qseg = sseg + stage * kTile;
    const int32_t* qp = spos + stage * kTile;  // the queries' positions
    const bool all_visible = qp[0] >= kb + 15 && q0 + kTile <= Tq && kb + 16 <= Tk && one_segment(geo, b, qt, kt);
    for (int sub = 0; sub < 2; ++sub) {  // 32 queries at a time, 16 per half: 2 n-tiles of Sᵀ and dPᵀ
      const int c0 = sub * 32 + half * 16;
      float p[2][4], ds[2][4];
      two_products<HS, 1>(p, ds, sk, sv, rg * 16, Q, dO, c0);  // Sᵀ, dPᵀ
      SFTDP_UNROLL
      for (int nt = 0; nt < 2; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + nt * 8 + 2 * tq + (e & 1), j = e < 2 ? j0 : j1;  // qp[c] = -1 past Tq
          const bool visible = all_visible || (j <= qp[c] && j < Tk && (!seg_row || qseg[c] == (e < 2 ? sj0 : sj1)));
          p[nt][e] = visible ? exp2f(fmaf(p[nt][e], scale_log2, -L[c])) : 0.f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - Dq[c]);
        }
      }
      uint32_t pa[4], sa[4];
      c_to_a(pa, p[0], p[1]);
      c_to_a(sa, ds[0], ds[1]);
      if (sub == 1) __syncthreads();  // the partner has read this warp's fragments of the first 32 queries
      put_frag(sx + warp * kFragWords, pa, lane);
      put_frag(sx + warp * kFragWords + 4 * kWarp, sa, lane);
      if (!SFTDP_PLANTED(6)) __syncthreads();  // both halves' fragments are written
      SFTDP_NO_UNROLL
      for (int kk = 0; kk < 2; ++kk) {  // 16 queries per k-step, in increasing order: half 0's, then half 1's
        uint32_t p_frag[4], ds_frag[4];
        const uint32_t* frags = sx + holder(kk, half, warp, partner) * kFragWords;
        get_frag(p_frag, frags, lane);
        get_frag(ds_frag, frags + 4 * kWarp, lane);
        mma_rows<HS, NTH>(dv, p_frag, dO, sub * 32 + kk * 16, half * (HS / 2));
        mma_rows<HS, NTH>(dk, ds_frag, Q, sub * 32 + kk * 16, half * (HS / 2));
      }
    }
    item = next;
  }
  SFTDP_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int j = i ? j1 : j0;
    if (j >= Tk) continue;
    const size_t at = (static_cast<size_t>(b) * Tk + j) * geo.lay.kv_ld + half * (HS / 2) + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt) {
      store_pair(dkv, dkv16, at + geo.lay.k_col + kvh * HS + nt * 8, dk[nt][2 * i] * scale, dk[nt][2 * i + 1] * scale);
      store_pair(dkv, dkv16, at + geo.lay.v_col + kvh * HS + nt * 8, dv[nt][2 * i], dv[nt][2 * i + 1]);
    }
  }
}

// dQ of query tile qt of head h into dqkv's q heads (fp32) or dqkv16's (bf16), the other null (its k/v heads are not
// written here): grid (q_tiles, NH, B), block kThreads, dynamic shared memory dq_smem<HS>(). Warp w: rows
// 16·(w % 4) .. + 15 of the tile; half w / 4: keys
// 32·half .. + 31 of each key tile (S, dP) and output columns HS/2·half .. (dQ).
template <int HS>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attention_tc_bwd_dq_kernel(float* dqkv, bf16* dqkv16, const bf16* qkv, const bf16* dout, const float* lse,
                               const float* delta, Layout lay, int Tq, int Tk, int NH, int KVH, float scale,
                               float scale_log2) {
  constexpr int R = HS + 8, NTH = HS / 16;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;                                                 // (kTile, R)
  bf16* sdo = sq + kTile * R;                                      // (kTile, R)
  bf16* sk = sdo + kTile * R;                                      // [2] (kTile, R)
  bf16* sv = sk + 2 * kTile * R;                                   // [2] (kTile, R)
  int32_t* sseg = reinterpret_cast<int32_t*>(sv + 2 * kTile * R);  // [2] (kTile)
  uint32_t* sx = reinterpret_cast<uint32_t*>(sseg + 2 * kTile);    // [kWarps] (kFragWords): bf16(dS)
  const Geometry geo = geometry(lay, Tq, Tk, NH, KVH);
  const int qt = geo.q_tiles - 1 - static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (NH / KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rg = warp % kRowGroups, half = warp / kRowGroups, partner = warp ^ kRowGroups;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, OC = NH * HS, r0 = qt * kTile;
  const bf16* rows = qkv + static_cast<size_t>(b) * Tq * QKV;
  const int32_t* seg_row = geo.lay.seg_q ? geo.lay.seg_q + static_cast<size_t>(b) * Tq : nullptr;

  load_tile<HS>(sq, rows + h * HS, QKV, r0, Tq);
  load_tile<HS>(sdo, dout + static_cast<size_t>(b) * Tq * OC + h * HS, OC, r0, Tq);
  tc::cp_async_commit();
  const auto load_kv = [&](int stage, int kt) { load_kv_stage<HS>(sk, sv, sseg, stage, geo, b, kvh, kt); };
  const auto next_tile = [&](int kt) { return next_key_tile(geo, b, qt, kt); };
  const int t0 = r0 + rg * 16 + g, t1 = t0 + 8, p0 = position(geo, t0), p1 = position(geo, t1);
  const int p_first = position(geo, r0 + rg * 16);  // the warp's rows' smallest position
  const int32_t seg0 = seg_row && t0 < Tq ? seg_row[t0] : 0, seg1 = seg_row && t1 < Tq ? seg_row[t1] : 0;
  const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * Tq;
  const float* delta_h = delta + (static_cast<size_t>(b) * NH + h) * Tq;
  const float L[2] = {t0 < Tq ? lse_h[t0] * kLog2e : 0.f, t1 < Tq ? lse_h[t1] * kLog2e : 0.f};
  const float Dr[2] = {t0 < Tq ? delta_h[t0] : 0.f, t1 < Tq ? delta_h[t1] : 0.f};
  float dq[NTH][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NTH; ++nt) dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.f;
  int kt = next_tile(-1);
  load_kv(0, kt);
  for (int stage = 0; kt >= 0; stage ^= 1) {
    if (!SFTDP_PLANTED(2)) tc::cp_async_wait<0>();
    __syncthreads();  // Q, dO and this stage in shared memory; every warp is done with the other stage
    const int next = next_tile(kt);
    if (next >= 0) load_kv(stage ^ 1, next);
    const bf16* K = sk + stage * kTile * R;
    const bf16* V = sv + stage * kTile * R;
    const int32_t* kseg = sseg + stage * kTile;
    const int k0 = kt * kTile, c0 = half * 32;  // this half's keys: k0 + c0 ..
    const bool all_visible = k0 + kTile - 1 <= p_first && k0 + kTile <= Tk && one_segment(geo, b, qt, kt);
    for (int kk = 0; kk < 2; ++kk) {  // this half's two k-steps of 16 keys: S, dP, P, dS, bf16(dS)'s A fragment
      float p[2][4], ds[2][4];
      two_products<HS, 1>(p, ds, sq, sdo, rg * 16, K, V, c0 + kk * 16);  // S, dP
      SFTDP_UNROLL
      for (int nt = 0; nt < 2; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + kk * 16 + nt * 8 + 2 * tq + (e & 1), j = k0 + c;
          const bool visible =
              all_visible || (j <= (e < 2 ? p0 : p1) && j < Tk && (!seg_row || kseg[c] == (e < 2 ? seg0 : seg1)));
          p[nt][e] = visible ? exp2f(fmaf(p[nt][e], scale_log2, -L[e / 2])) : 0.f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - Dr[e / 2]);
        }
      }
      uint32_t sa[4];
      c_to_a(sa, ds[0], ds[1]);
      put_frag(sx + warp * kFragWords + kk * 4 * kWarp, sa, lane);
    }
    if (!SFTDP_PLANTED(6)) __syncthreads();  // both halves' fragments are written
    SFTDP_UNROLL
    for (int kk = 0; kk < 4; ++kk) {  // dQ += bf16(dS) · K, 16 keys per k-step, in increasing order
      uint32_t a[4];
      get_frag(a, sx + holder(kk / 2, half, warp, partner) * kFragWords + kk % 2 * 4 * kWarp, lane);
      mma_rows<HS, NTH>(dq, a, K, kk * 16, half * (HS / 2));
    }
    kt = next;
  }
  SFTDP_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int t = i ? t1 : t0;
    if (t >= Tq) continue;
    const size_t at = (static_cast<size_t>(b) * Tq + t) * QKV + h * HS + half * (HS / 2) + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt)
      store_pair(dqkv, dqkv16, at + nt * 8, dq[nt][2 * i] * scale, dq[nt][2 * i + 1] * scale);
  }
}

}  // namespace
}  // namespace sftdp::cuda
