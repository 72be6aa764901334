// kernels/cuda/attention_tc.cu — the bf16 table's attention (kernels/attention.h) on tensor cores, after
// FlashAttention-2: mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix from shared memory, K/V (and
// in backward Q/dO) tiles staged by cp.async two deep, the online softmax on the accumulator fragments,
// and a backward without atomics. Head sizes 16..128 in steps of 16; others fall back to the CUDA-core
// kernels of attention.cu (attention_bf16::tensor_cores in kernels/attention.h). Legend: B batch, T seq, NH query
// heads, KVH k/v heads, G = NH/KVH, HS head size, QKV = (NH + 2·KVH)·HS, R = HS + 8 (a shared-memory row: 16 bytes of
// padding keep ldmatrix's eight rows in different banks), Tt = 64 (rows per tile, queries and keys).
// Before the kernels: q, k, v (and dO) are cast to bf16 copies (scratch; the same rounding as the bf16
// GEMMs' inputs), and with segments each 64-row tile's (min, max) segment id is found.
// Forward, per (query tile, h, b), 4 warps of 16 query rows: Q's fragments kept in registers; for each
// key tile that the tile may see (kt <= qt: the causal triangle beyond is skipped; with segments, tiles
// whose id ranges do not meet are skipped), in increasing order: S = Q·Kᵀ (raw, fp32), masked to −inf
// where invisible, m_new = max(m, rowmax S), P = exp2(S·scale·log2e − m_new·scale·log2e), α =
// exp2((m − m_new)·scale·log2e), l = l·α + rowsum P (fma), O = O·α + bf16(P)·V; at the end O/l and
// lse = m·scale + log l. A key tile with nothing visible for a row leaves its state exactly as it was,
// so skipping it changes no bit.
// Backward (7 GEMMs, not FlashAttention-2's 5 with atomics): D = Σ bf16(dO)·O per row (a warp per row);
// per (key tile, k/v head, b), 4 warps of 16 keys, over the group's query heads in increasing h and
// their query tiles in increasing order: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dPᵀ = V·dOᵀ,
// dSᵀ = Pᵀ·(dPᵀ − D), dV += bf16(Pᵀ)·dO, dK += bf16(dSᵀ)·Q, then dK ·= scale; per (query tile, h, b):
// S, P, dP, dS as above, dQ += bf16(dS)·K over key tiles in increasing order, then dQ ·= scale. Every
// sum has an order fixed by the shape: the same bits on every run. kernels/cpu/attention_bf16.cpp does
// the same arithmetic (its header lists each rounding). Masked keys inside a visited tile must be
// finite (their P is 0, and 0·NaN is NaN in a product), as for any attention kernel on tensor cores.
// Accumulation: out =, lse =, dqkv =.
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_core.cuh"

// Planted bugs, for tests/cudasim/planted_attention_bugs.cpp only (a simulator build of this file with
// SFTDP_PLANTED_BUGS defined): each must make the kernels' results fail the tests.
#ifdef SFTDP_PLANTED_BUGS
#ifndef SFTDP_CUDA_SIM
#error "SFTDP_PLANTED_BUGS is for the CUDA simulator's tests"
#endif
namespace sftdp::cuda {
// 1 a fragment on the wrong lanes, 2 a missing cp.async wait, 3 a tile skipped that holds visible
// pairs, 4 a wrong log-sum-exp.
int planted_attention_bug = 0;
}  // namespace sftdp::cuda
#define SFTDP_PLANTED(n) (::sftdp::cuda::planted_attention_bug == (n))
#else
#define SFTDP_PLANTED(n) false
#endif

namespace sftdp::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kTile = attention_bf16::kTile;  // 64
constexpr int kWarps = 4, kThreads = kWarps * kWarp;
constexpr float kLog2e = attention_bf16::kLog2e;

// ---- shared pieces --------------------------------------------------------------------------------
// Rows [r0, r0 + kTile) of an HS-wide slice (src: row 0 of the slice, row stride ld) into a (kTile, R)
// shared tile by cp.async, rows past T zero-filled. Not committed: the caller groups them.
template <int HS>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int ld, int r0, int T) {
  constexpr int R = HS + 8, kChunks = HS / 8;  // 16-byte pieces per row
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks, t = r0 + r;
    const bool valid = t < T;
    tc::cp_async_16(dst + r * R + c * 8, src + static_cast<size_t>(valid ? t : 0) * ld + c * 8, valid);
  }
}

// Segment ids of rows [r0, r0 + kTile) into shared memory (ordinary loads: 64 ids are not worth a copy
// engine; visible to other threads after the next barrier). Rows past T get -1.
__device__ __forceinline__ void load_segments(int32_t* dst, const int32_t* seg_row, int r0, int T) {
  for (int r = static_cast<int>(threadIdx.x); r < kTile; r += kThreads) dst[r] = r0 + r < T ? seg_row[r0 + r] : -1;
}

// Tiles a and b of batch row b may hold a visible pair only if their segment-id ranges meet (ranges
// null: no segments). Exact where it matters: a pair of the same id lies in both ranges.
__device__ __forceinline__ bool ranges_meet(const int2* ranges, int tiles, int b, int qt, int kt) {
  if (!ranges) return true;
  const int2 q = ranges[b * tiles + qt], k = ranges[b * tiles + kt];
  if (SFTDP_PLANTED(3) && qt != kt) return q.x < k.y && k.x < q.y;  // misses ranges that only touch
  return q.x <= k.y && k.x <= q.y;
}
// Every id of both tiles is one and the same: nothing inside needs a segment mask.
__device__ __forceinline__ bool one_segment(const int2* ranges, int tiles, int b, int qt, int kt) {
  if (!ranges) return true;
  const int2 q = ranges[b * tiles + qt], k = ranges[b * tiles + kt];
  return q.x == q.y && k.x == k.y && q.x == k.x;
}

// The A fragments (16 rows x 16 columns at column c0) of rows [r0, r0 + 16) of a (., R) tile.
template <int HS>
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16* tile, int r0, int c0) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  tc::ldmatrix<4, false>(a, tile + (r0 + lane % 8 + (lane / 8 % 2) * 8) * (HS + 8) + c0 + (lane / 16) * 8);
}
// B fragments of two n-tiles from rows n0..n0+15 of a (., R) tile read as Bᵀ (k = columns c0..c0+15):
// b[0..1] for rows n0..n0+7, b[2..3] for n0+8..n0+15.
template <int HS>
__device__ __forceinline__ void load_b_rows(uint32_t b[4], const bf16* tile, int n0, int c0) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  tc::ldmatrix<4, false>(b, tile + (n0 + (lane / 16) * 8 + lane % 8) * (HS + 8) + c0 + (lane / 8 % 2) * 8);
}
// B fragments of two n-tiles (columns c0..c0+7, c0+8..c0+15) from rows k0..k0+15 of a (., R) tile read
// as B itself (k = rows): ldmatrix .trans.
template <int HS>
__device__ __forceinline__ void load_b_trans(uint32_t b[4], const bf16* tile, int k0, int c0) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  tc::ldmatrix<4, true>(b, tile + (k0 + (lane / 8 % 2) * 8 + lane % 8) * (HS + 8) + c0 + (lane / 16) * 8);
}

// The C fragments of n-tiles 2·kk and 2·kk + 1 (16 columns) as the A fragment of k-step kk, rounded
// to bf16: a C fragment's (g, 2t..2t+1) and (g+8, 2t..) are exactly A's first and second registers.
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
  a[0] = tc::pack_bf16x2(lo[0], lo[1]);
  a[1] = tc::pack_bf16x2(lo[2], lo[3]);
  a[2] = tc::pack_bf16x2(hi[0], hi[1]);
  a[3] = tc::pack_bf16x2(hi[2], hi[3]);
  if (SFTDP_PLANTED(1)) {  // rows g+8 and columns 8..15 swapped: the wrong fragment registers
    const uint32_t r = a[1];
    a[1] = a[2], a[2] = r;
  }
}

// Max and sum over the four lanes of a quad (the lanes holding one fragment row), butterfly: every
// lane of the quad gets the same bits.
__device__ __forceinline__ float quad_max(float v) {
  v = max(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return max(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The next key tile after kt that query tile qt may see, or -1: key tiles up to the diagonal (causal)
// whose segment ranges meet the query tile's. Every thread of the block gets the same answer.
__device__ __forceinline__ int next_key_tile(const int2* ranges, int tiles, int b, int qt, int kt) {
  for (++kt; kt <= qt; ++kt)
    if (ranges_meet(ranges, tiles, b, qt, kt)) return kt;
  return -1;
}

// K and V rows [kt·64, kt·64 + 64) of k/v head kvh (rows: qkv of the batch row) into stage `stage` of
// the two-stage tiles sk, sv, their segment ids into sseg's stage: one cp.async group.
template <int HS>
__device__ __forceinline__ void load_kv_stage(bf16* sk, bf16* sv, int32_t* sseg, int stage, const bf16* rows,
                                              const int32_t* seg_row, int kt, int T, int NH, int KVH, int kvh) {
  constexpr int R = HS + 8;
  const int QKV = (NH + 2 * KVH) * HS;
  load_tile<HS>(sk + stage * kTile * R, rows + (NH + kvh) * HS, QKV, kt * kTile, T);
  load_tile<HS>(sv + stage * kTile * R, rows + (NH + KVH + kvh) * HS, QKV, kt * kTile, T);
  if (seg_row) load_segments(sseg + stage * kTile, seg_row, kt * kTile, T);
  tc::cp_async_commit();
}

// The backward's two 16x32 products over the head dimension, from shared tiles (R = HS + 8 per row):
// x = A1·B1ᵀ and y = A2·B2ᵀ with A = rows [a0, a0 + 16) of a1, a2 and B = rows [b0, b0 + 32) of b1, b2
// (dK/dV: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ; dQ: S = Q·Kᵀ and dP = dO·Vᵀ). x, y: 4 n-tiles of C fragments, =.
template <int HS>
__device__ __forceinline__ void two_products_16x32(float (&x)[4][4], float (&y)[4][4], const bf16* a1, const bf16* a2,
                                                   int a0, const bf16* b1, const bf16* b2, int b0) {
  SFTDP_UNROLL
  for (int nt = 0; nt < 4; ++nt) {
    SFTDP_UNROLL
    for (int e = 0; e < 4; ++e) x[nt][e] = y[nt][e] = 0.f;
  }
  for (int ks = 0; ks < HS / 16; ++ks) {  // (not unrolled: nothing here is indexed by ks)
    uint32_t xa[4], ya[4];
    load_a<HS>(xa, a1, a0, ks * 16);
    load_a<HS>(ya, a2, a0, ks * 16);
    SFTDP_UNROLL
    for (int np = 0; np < 2; ++np) {
      uint32_t xb[4], yb[4];
      load_b_rows<HS>(xb, b1, b0 + np * 16, ks * 16);
      load_b_rows<HS>(yb, b2, b0 + np * 16, ks * 16);
      tc::mma_bf16_16816(x[2 * np], xa, xb, x[2 * np]);
      tc::mma_bf16_16816(x[2 * np + 1], xa, xb + 2, x[2 * np + 1]);
      tc::mma_bf16_16816(y[2 * np], ya, yb, y[2 * np]);
      tc::mma_bf16_16816(y[2 * np + 1], ya, yb + 2, y[2 * np + 1]);
    }
  }
}

// ---- kernels --------------------------------------------------------------------------------------
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

// grid (tiles, NH, B), block kThreads, dynamic shared memory fwd_smem<HS>().
template <int HS>
__global__ void __launch_bounds__(kThreads, 1)
    attention_tc_fwd_kernel(float* out, float* lse, const bf16* qkv, const int32_t* seg, const int2* ranges, int T,
                            int NH, int KVH, float scale, float scale_log2) {
  constexpr int R = HS + 8, KS = HS / 16, NT = HS / 8;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;                                                                               // (kTile, R)
  bf16* sk = sq + kTile * R;                                                                     // [2] (kTile, R)
  bf16* sv = sk + 2 * kTile * R;                                                                 // [2] (kTile, R)
  int32_t* sseg = reinterpret_cast<int32_t*>(sv + 2 * kTile * R);                                // [2] (kTile)
  const int tiles = static_cast<int>(gridDim.x), qt = tiles - 1 - static_cast<int>(blockIdx.x);  // long rows first
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (NH / KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, r0 = qt * kTile;
  const bf16* rows = qkv + static_cast<size_t>(b) * T * QKV;
  const int32_t* seg_row = seg ? seg + static_cast<size_t>(b) * T : nullptr;

  load_tile<HS>(sq, rows + h * HS, QKV, r0, T);
  tc::cp_async_commit();
  const auto load_kv = [&](int stage, int kt) {
    load_kv_stage<HS>(sk, sv, sseg, stage, rows, seg_row, kt, T, NH, KVH, kvh);
  };
  const auto next_tile = [&](int kt) { return next_key_tile(ranges, tiles, b, qt, kt); };
  int kt = next_tile(-1);  // never -1: the diagonal tile holds every row's own key
  load_kv(0, kt);
  tc::cp_async_wait<1>();  // Q (the first group) has landed
  __syncthreads();
  uint32_t qf[KS][4];
  SFTDP_UNROLL
  for (int ks = 0; ks < KS; ++ks) load_a<HS>(qf[ks], sq, warp * 16, ks * 16);

  const int t0 = r0 + warp * 16 + g, t1 = t0 + 8;
  const int32_t seg0 = seg_row && t0 < T ? seg_row[t0] : 0, seg1 = seg_row && t1 < T ? seg_row[t1] : 0;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[NT][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  for (int stage = 0; kt >= 0; stage ^= 1) {
    const int next = next_tile(kt);
    if (next >= 0) {
      load_kv(stage ^ 1, next);
      if (!SFTDP_PLANTED(2)) tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();  // this stage's tiles (every thread's copies) are in shared memory
    const bf16* K = sk + stage * kTile * R;
    const bf16* V = sv + stage * kTile * R;
    const int32_t* kseg = sseg + stage * kTile;
    const int k0 = kt * kTile;
    float s[8][4];  // S: 16 rows x 64 keys, 8 n-tiles
    SFTDP_UNROLL
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    SFTDP_UNROLL
    for (int ks = 0; ks < KS; ++ks) {
      SFTDP_UNROLL
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4];
        load_b_rows<HS>(kb, K, np * 16, ks * 16);
        tc::mma_bf16_16816(s[2 * np], qf[ks], kb, s[2 * np]);
        tc::mma_bf16_16816(s[2 * np + 1], qf[ks], kb + 2, s[2 * np + 1]);
      }
    }
    // Mask unless every key of the tile is visible to every row of this warp.
    const bool all_visible =
        k0 + kTile - 1 <= r0 + warp * 16 && k0 + kTile <= T && one_segment(ranges, tiles, b, qt, kt);
    if (!all_visible) {
      SFTDP_UNROLL
      for (int nt = 0; nt < 8; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int j = k0 + nt * 8 + 2 * tq + (e & 1), t = e < 2 ? t0 : t1;
          const bool visible = j <= t && j < T && (!seg_row || kseg[j - k0] == (e < 2 ? seg0 : seg1));
          if (!visible) s[nt][e] = -INFINITY;
        }
      }
    }
    float alpha[2], shift[2];
    SFTDP_UNROLL
    for (int i = 0; i < 2; ++i) {
      float mx = m[i];
      SFTDP_UNROLL
      for (int nt = 0; nt < 8; ++nt) mx = max(mx, max(s[nt][2 * i], s[nt][2 * i + 1]));
      mx = quad_max(mx);
      shift[i] = mx == -INFINITY ? 0.f : mx * scale_log2;  // a row that has seen nothing yet: P = 0
      alpha[i] = mx == -INFINITY ? 1.f : exp2f((m[i] - mx) * scale_log2);
      m[i] = mx;
    }
    float rowsum[2] = {0.f, 0.f};
    SFTDP_UNROLL
    for (int nt = 0; nt < 8; ++nt) {
      SFTDP_UNROLL
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(fmaf(s[nt][e], scale_log2, -shift[e / 2]));
        rowsum[e / 2] += s[nt][e];
      }
    }
    SFTDP_UNROLL
    for (int i = 0; i < 2; ++i) l[i] = fmaf(l[i], alpha[i], quad_sum(rowsum[i]));
    SFTDP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      o[nt][0] *= alpha[0], o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1], o[nt][3] *= alpha[1];
    }
    SFTDP_UNROLL
    for (int kk = 0; kk < 4; ++kk) {  // O += bf16(P) · V, 16 keys per k-step
      uint32_t pa[4];
      c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
      SFTDP_UNROLL
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t vb[4];
        load_b_trans<HS>(vb, V, kk * 16, np * 16);
        tc::mma_bf16_16816(o[2 * np], pa, vb, o[2 * np]);
        tc::mma_bf16_16816(o[2 * np + 1], pa, vb + 2, o[2 * np + 1]);
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
    kt = next;
  }
  SFTDP_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int t = i ? t1 : t0;
    if (t >= T) continue;
    const float inv = 1.f / l[i];  // l >= 1: t sees itself
    float* orow = out + (static_cast<size_t>(b) * T + t) * NH * HS + h * HS + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      *reinterpret_cast<float2*>(orow + nt * 8) = make_float2(o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
    if (tq == 0)
      lse[(static_cast<size_t>(b) * NH + h) * T + t] = fmaf(m[i], scale, SFTDP_PLANTED(4) ? log2f(l[i]) : logf(l[i]));
  }
}

// D[b,h,t] = Σ_i bf16(dO)·O over the head's HS values: a warp per (b, t, h) row, lane l summing i = l,
// l + 32, ... by fma, then the warp's butterfly (warp_sum). grid ceil(B·T·NH / kWarps), block kThreads.
__global__ void attention_tc_bwd_delta_kernel(float* delta, const bf16* dout, const float* out, int rows, int T, int NH,
                                              int HS) {
  const int row = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (row >= rows) return;                          // whole warps leave together: the butterfly below is per warp
  const size_t at = static_cast<size_t>(row) * HS;  // (b·T + t)·NH + h rows of HS
  float acc = 0.f;
  for (int i = lane; i < HS; i += kWarp) acc = fmaf(__bfloat162float(dout[at + i]), out[at + i], acc);
  acc = warp_sum(acc);
  const int h = row % NH, bt = row / NH;
  if (lane == 0) delta[(static_cast<size_t>(bt / T) * NH + h) * T + bt % T] = acc;
}

// dK, dV of key tile kt of k/v head kvh: grid (tiles, KVH, B), block kThreads (a warp per 16 keys),
// dynamic shared memory bwd_smem<HS>().
template <int HS>
__global__ void __launch_bounds__(kThreads, 1)
    attention_tc_bwd_dkv_kernel(float* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* delta,
                                const int32_t* seg, const int2* ranges, int T, int NH, int KVH, float scale,
                                float scale_log2) {
  constexpr int R = HS + 8, NT = HS / 8;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sk = smem;                                                 // (kTile, R): this block's keys
  bf16* sv = sk + kTile * R;                                       // (kTile, R)
  bf16* sq = sv + kTile * R;                                       // [2] (kTile, R): a query tile's q rows
  bf16* sdo = sq + 2 * kTile * R;                                  // [2] (kTile, R): and its dO rows
  float* slse = reinterpret_cast<float*>(sdo + 2 * kTile * R);     // [2] (kTile): lse·log2e
  float* sdelta = slse + 2 * kTile;                                // [2] (kTile)
  int32_t* sseg = reinterpret_cast<int32_t*>(sdelta + 2 * kTile);  // [2] (kTile)
  const int tiles = static_cast<int>(gridDim.x), kt = static_cast<int>(blockIdx.x);
  const int kvh = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), G = NH / KVH;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const bf16* rows = qkv + static_cast<size_t>(b) * T * QKV;
  const bf16* drows = dout + static_cast<size_t>(b) * T * OC;
  const int32_t* seg_row = seg ? seg + static_cast<size_t>(b) * T : nullptr;
  const int kb = kt * kTile + warp * 16, j0 = kb + g, j1 = j0 + 8;
  const int32_t sj0 = seg_row && j0 < T ? seg_row[j0] : 0, sj1 = seg_row && j1 < T ? seg_row[j1] : 0;

  load_tile<HS>(sk, rows + (NH + kvh) * HS, QKV, kt * kTile, T);
  load_tile<HS>(sv, rows + (NH + KVH + kvh) * HS, QKV, kt * kTile, T);
  tc::cp_async_commit();
  // Work items: (query head h = kvh·G + item / tiles, query tile item % tiles), increasing.
  const auto next_item = [&](int item) {
    for (++item; item < G * tiles; ++item) {
      const int qt = item % tiles;
      if (qt >= kt && ranges_meet(ranges, tiles, b, qt, kt)) return item;
    }
    return -1;
  };
  const auto load_q = [&](int stage, int item) {
    const int h = kvh * G + item / tiles, q0 = item % tiles * kTile;
    load_tile<HS>(sq + stage * kTile * R, rows + h * HS, QKV, q0, T);
    load_tile<HS>(sdo + stage * kTile * R, drows + h * HS, OC, q0, T);
    const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * T;
    const float* delta_h = delta + (static_cast<size_t>(b) * NH + h) * T;
    for (int r = static_cast<int>(threadIdx.x); r < kTile; r += kThreads) {
      const bool valid = q0 + r < T;
      slse[stage * kTile + r] = valid ? lse_h[q0 + r] * kLog2e : 0.f;
      sdelta[stage * kTile + r] = valid ? delta_h[q0 + r] : 0.f;
    }
    if (seg_row) load_segments(sseg + stage * kTile, seg_row, q0, T);
    tc::cp_async_commit();
  };
  float dk[NT][4], dv[NT][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    SFTDP_UNROLL
    for (int e = 0; e < 4; ++e) dk[nt][e] = dv[nt][e] = 0.f;
  }
  int item = next_item(kt - 1);  // (h = kvh·G, qt = kt): the diagonal tile
  load_q(0, item);
  for (int stage = 0; item >= 0; stage ^= 1) {
    const int next = next_item(item);
    if (next >= 0) {
      load_q(stage ^ 1, next);
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    const int qt = item % tiles, q0 = qt * kTile;
    const bf16* Q = sq + stage * kTile * R;
    const bf16* dO = sdo + stage * kTile * R;
    const float* L = slse + stage * kTile;
    const float* Dq = sdelta + stage * kTile;
    const int32_t* qseg = sseg + stage * kTile;
    const bool all_visible = q0 >= kb + 15 && q0 + kTile <= T && kb + 16 <= T && one_segment(ranges, tiles, b, qt, kt);
    for (int sub = 0; sub < 2; ++sub) {  // 32 queries at a time: 4 n-tiles of Sᵀ and dPᵀ
      float p[4][4], ds[4][4];
      two_products_16x32<HS>(p, ds, sk, sv, warp * 16, Q, dO, sub * 32);  // Sᵀ, dPᵀ
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = sub * 32 + nt * 8 + 2 * tq + (e & 1), q = q0 + c, j = e < 2 ? j0 : j1;
          const bool visible = all_visible || (q < T && j <= q && j < T && (!seg_row || qseg[c] == (e < 2 ? sj0 : sj1)));
          p[nt][e] = visible ? exp2f(fmaf(p[nt][e], scale_log2, -L[c])) : 0.f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - Dq[c]);
        }
      }
      SFTDP_UNROLL
      for (int kk = 0; kk < 2; ++kk) {  // 16 queries per k-step
        uint32_t pa[4], sa[4];
        c_to_a(pa, p[2 * kk], p[2 * kk + 1]);
        c_to_a(sa, ds[2 * kk], ds[2 * kk + 1]);
        SFTDP_UNROLL
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t ob[4], qb[4];
          load_b_trans<HS>(ob, dO, sub * 32 + kk * 16, np * 16);
          load_b_trans<HS>(qb, Q, sub * 32 + kk * 16, np * 16);
          tc::mma_bf16_16816(dv[2 * np], pa, ob, dv[2 * np]);
          tc::mma_bf16_16816(dv[2 * np + 1], pa, ob + 2, dv[2 * np + 1]);
          tc::mma_bf16_16816(dk[2 * np], sa, qb, dk[2 * np]);
          tc::mma_bf16_16816(dk[2 * np + 1], sa, qb + 2, dk[2 * np + 1]);
        }
      }
    }
    __syncthreads();
    item = next;
  }
  SFTDP_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int j = i ? j1 : j0;
    if (j >= T) continue;
    float* drow = dqkv + (static_cast<size_t>(b) * T + j) * QKV + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      *reinterpret_cast<float2*>(drow + (NH + kvh) * HS + nt * 8) =
          make_float2(dk[nt][2 * i] * scale, dk[nt][2 * i + 1] * scale);
      *reinterpret_cast<float2*>(drow + (NH + KVH + kvh) * HS + nt * 8) = make_float2(dv[nt][2 * i], dv[nt][2 * i + 1]);
    }
  }
}

// dQ of query tile qt of head h: grid (tiles, NH, B), block kThreads (a warp per 16 rows), dynamic
// shared memory bwd_smem<HS>().
template <int HS>
__global__ void __launch_bounds__(kThreads, 1)
    attention_tc_bwd_dq_kernel(float* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* delta,
                               const int32_t* seg, const int2* ranges, int T, int NH, int KVH, float scale,
                               float scale_log2) {
  constexpr int R = HS + 8, NT = HS / 8;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;                                                 // (kTile, R)
  bf16* sdo = sq + kTile * R;                                      // (kTile, R)
  bf16* sk = sdo + kTile * R;                                      // [2] (kTile, R)
  bf16* sv = sk + 2 * kTile * R;                                   // [2] (kTile, R)
  int32_t* sseg = reinterpret_cast<int32_t*>(sv + 2 * kTile * R);  // [2] (kTile)
  const int tiles = static_cast<int>(gridDim.x), qt = tiles - 1 - static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (NH / KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, OC = NH * HS, r0 = qt * kTile;
  const bf16* rows = qkv + static_cast<size_t>(b) * T * QKV;
  const int32_t* seg_row = seg ? seg + static_cast<size_t>(b) * T : nullptr;

  load_tile<HS>(sq, rows + h * HS, QKV, r0, T);
  load_tile<HS>(sdo, dout + static_cast<size_t>(b) * T * OC + h * HS, OC, r0, T);
  tc::cp_async_commit();
  const auto load_kv = [&](int stage, int kt) {
    load_kv_stage<HS>(sk, sv, sseg, stage, rows, seg_row, kt, T, NH, KVH, kvh);
  };
  const auto next_tile = [&](int kt) { return next_key_tile(ranges, tiles, b, qt, kt); };
  const int t0 = r0 + warp * 16 + g, t1 = t0 + 8;
  const int32_t seg0 = seg_row && t0 < T ? seg_row[t0] : 0, seg1 = seg_row && t1 < T ? seg_row[t1] : 0;
  const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * T;
  const float* delta_h = delta + (static_cast<size_t>(b) * NH + h) * T;
  const float L[2] = {t0 < T ? lse_h[t0] * kLog2e : 0.f, t1 < T ? lse_h[t1] * kLog2e : 0.f};
  const float Dr[2] = {t0 < T ? delta_h[t0] : 0.f, t1 < T ? delta_h[t1] : 0.f};
  float dq[NT][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NT; ++nt) dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.f;
  int kt = next_tile(-1);
  load_kv(0, kt);
  for (int stage = 0; kt >= 0; stage ^= 1) {
    const int next = next_tile(kt);
    if (next >= 0) {
      load_kv(stage ^ 1, next);
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* K = sk + stage * kTile * R;
    const bf16* V = sv + stage * kTile * R;
    const int32_t* kseg = sseg + stage * kTile;
    const int k0 = kt * kTile;
    const bool all_visible =
        k0 + kTile - 1 <= r0 + warp * 16 && k0 + kTile <= T && one_segment(ranges, tiles, b, qt, kt);
    for (int sub = 0; sub < 2; ++sub) {  // 32 keys at a time
      float p[4][4], ds[4][4];
      two_products_16x32<HS>(p, ds, sq, sdo, warp * 16, K, V, sub * 32);  // S, dP
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = sub * 32 + nt * 8 + 2 * tq + (e & 1), j = k0 + c, t = e < 2 ? t0 : t1;
          const bool visible = all_visible || (j <= t && j < T && (!seg_row || kseg[c] == (e < 2 ? seg0 : seg1)));
          p[nt][e] = visible ? exp2f(fmaf(p[nt][e], scale_log2, -L[e / 2])) : 0.f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - Dr[e / 2]);
        }
      }
      SFTDP_UNROLL
      for (int kk = 0; kk < 2; ++kk) {  // dQ += bf16(dS) · K, 16 keys per k-step
        uint32_t sa[4];
        c_to_a(sa, ds[2 * kk], ds[2 * kk + 1]);
        SFTDP_UNROLL
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t kb[4];
          load_b_trans<HS>(kb, K, sub * 32 + kk * 16, np * 16);
          tc::mma_bf16_16816(dq[2 * np], sa, kb, dq[2 * np]);
          tc::mma_bf16_16816(dq[2 * np + 1], sa, kb + 2, dq[2 * np + 1]);
        }
      }
    }
    __syncthreads();
    kt = next;
  }
  SFTDP_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int t = i ? t1 : t0;
    if (t >= T) continue;
    float* drow = dqkv + (static_cast<size_t>(b) * T + t) * QKV + h * HS + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      *reinterpret_cast<float2*>(drow + nt * 8) = make_float2(dq[nt][2 * i] * scale, dq[nt][2 * i + 1] * scale);
  }
}

// ---- launchers ------------------------------------------------------------------------------------
template <int HS>
constexpr size_t fwd_smem() {  // Q, two stages of K and V, two of segment ids
  return 5 * size_t{kTile} * (HS + 8) * sizeof(bf16) + 2 * kTile * sizeof(int32_t);
}
template <int HS>
constexpr size_t dkv_smem() {  // K, V, two stages of Q and dO; of lse, D and segment ids
  return 6 * size_t{kTile} * (HS + 8) * sizeof(bf16) + 2 * 3 * kTile * sizeof(float);
}
template <int HS>
constexpr size_t dq_smem() {  // Q, dO, two stages of K and V, two of segment ids
  return 6 * size_t{kTile} * (HS + 8) * sizeof(bf16) + 2 * kTile * sizeof(int32_t);
}

// Opts `kernel` in to `bytes` of dynamic shared memory once per process (above 48 KiB CUDA needs it).
void allow_shared(const void* kernel, size_t bytes, bool& done) {
  if (done) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done = true;
}

struct Prepared {
  const bf16* qkv;     // (B, T, QKV) bf16
  const int2* ranges;  // (B, tiles) or null
  int tiles;
  float scale, scale_log2;
};
// The kernels' common inputs: the bf16 copy of qkv and the tiles' segment ranges (scratch).
Prepared prepare(const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS;
  bf16* qkv16 = scratch_as<bf16>(Scratch::kAttnQkv16, n);
  cast_fp32_to_bf16(qkv16, n, qkv, n, n, 1, stream);
  Prepared p{qkv16, nullptr, static_cast<int>(ceil_div(T, kTile)), attention_bf16::scale(HS),
             attention_bf16::scale_log2(HS)};
  if (seg) {
    int2* ranges = scratch_as<int2>(Scratch::kAttnRanges, static_cast<size_t>(B) * p.tiles);
    SFTDP_LAUNCH(attention_tc_segment_ranges_kernel, dim3(p.tiles, B), kTile, 0, stream, ranges, seg, T);
    CHECK_LAUNCH();
    p.ranges = ranges;
  }
  return p;
}

template <int HS>
void forward_hs(float* out, float* lse, const Prepared& p, const int32_t* seg, int B, int T, int NH, int KVH,
                cudaStream_t stream) {
  static bool opted = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_fwd_kernel<HS>), fwd_smem<HS>(), opted);
  SFTDP_LAUNCH(attention_tc_fwd_kernel<HS>, dim3(p.tiles, NH, B), kThreads, fwd_smem<HS>(), stream, out, lse, p.qkv,
               seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
}

template <int HS>
void backward_hs(float* dqkv, const bf16* dout16, const float* lse, const float* delta, const Prepared& p,
                 const int32_t* seg, int B, int T, int NH, int KVH, cudaStream_t stream) {
  static bool opted_dkv = false, opted_dq = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dkv_kernel<HS>), dkv_smem<HS>(), opted_dkv);
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dq_kernel<HS>), dq_smem<HS>(), opted_dq);
  SFTDP_LAUNCH(attention_tc_bwd_dkv_kernel<HS>, dim3(p.tiles, KVH, B), kThreads, dkv_smem<HS>(), stream, dqkv, p.qkv,
               dout16, lse, delta, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(attention_tc_bwd_dq_kernel<HS>, dim3(p.tiles, NH, B), kThreads, dq_smem<HS>(), stream, dqkv, p.qkv,
               dout16, lse, delta, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
}

// f.template operator()<HS>() for the head sizes the tensor-core kernels are built for.
template <class F>
void with_head_size(int HS, F&& f) {
  switch (HS) {
    case 16:
      return f.template operator()<16>();
    case 32:
      return f.template operator()<32>();
    case 48:
      return f.template operator()<48>();
    case 64:
      return f.template operator()<64>();
    case 80:
      return f.template operator()<80>();
    case 96:
      return f.template operator()<96>();
    case 112:
      return f.template operator()<112>();
    case 128:
      return f.template operator()<128>();
  }
  SFTDP_ASSERT(false, "attention_tc: head size " + std::to_string(HS) + " has no tensor-core kernel");
}

void check_dims(const char* op, int B, int T, int NH, int KVH) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && NH % KVH == 0,
               std::string(op) + ": need B >= 0, T > 0 and NH a positive multiple of KVH");
  SFTDP_ASSERT(B <= 65535 && NH <= 65535, std::string(op) + ": B and NH must fit gridDim.z/y (65535)");
}

}  // namespace

void attention_tc_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                      int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS)) return attention_fwd_bf16(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_fwd", B, T, NH, KVH);
  if (B == 0) return;
  const Prepared p = prepare(qkv, seg, B, T, NH, KVH, HS, stream);
  with_head_size(HS, [&]<int kHS>() { forward_hs<kHS>(out, lse, p, seg, B, T, NH, KVH, stream); });
}

void attention_tc_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                      const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_bf16(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_bwd", B, T, NH, KVH);
  if (B == 0) return;
  const Prepared p = prepare(qkv, seg, B, T, NH, KVH, HS, stream);
  const size_t rows = static_cast<size_t>(B) * T * NH, n_out = rows * HS;
  bf16* dout16 = scratch_as<bf16>(Scratch::kAttnDout16, n_out);
  cast_fp32_to_bf16(dout16, n_out, dout, n_out, n_out, 1, stream);
  float* delta = scratch_as<float>(Scratch::kAttnDelta, rows);
  SFTDP_LAUNCH(attention_tc_bwd_delta_kernel, static_cast<unsigned>(ceil_div(rows, kWarps)), kThreads, 0, stream, delta,
               dout16, out, static_cast<int>(rows), T, NH, HS);
  CHECK_LAUNCH();
  with_head_size(HS, [&]<int kHS>() { backward_hs<kHS>(dqkv, dout16, lse, delta, p, seg, B, T, NH, KVH, stream); });
}

}  // namespace sftdp::cuda
