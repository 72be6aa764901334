// kernels/cuda/attention/tc_tiles.cuh — the tensor-core attention's constants and shared pieces (tile loads by
// cp.async, segment-id ranges, A/B fragments by ldmatrix, the pair's fragment exchange, the tile GEMMs), for its
// forward (tc_forward.cuh) and backward (tc_backward.cuh) kernels. Parts of one translation unit, included only
// by tensor_cores.cu (which describes the algorithm): everything here stays internal to it.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_core.cuh"

// Planted bugs, for tests/cudasim/planted_attention_bugs.cpp only (a simulator build of these files with
// SFTDP_PLANTED_BUGS defined): each must make the kernels' results fail the tests. 1 a fragment on the wrong lanes,
// 2 a missing cp.async wait, 3 a tile skipped that holds visible pairs, 4 a wrong log-sum-exp, 5 a fragment taken
// from the wrong warp of the pair, 6 a missing barrier between a warp's fragments written and its partner reading
// them.
#ifdef SFTDP_PLANTED_BUGS
#ifndef SFTDP_CUDA_SIM
#error "SFTDP_PLANTED_BUGS is for the CUDA simulator's tests"
#endif
namespace sftdp::cuda {
extern int planted_attention_bug;  // tensor_cores.cu
}  // namespace sftdp::cuda
#define SFTDP_PLANTED(n) (::sftdp::cuda::planted_attention_bug == (n))
#else
#define SFTDP_PLANTED(n) false
#endif

namespace sftdp::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kTile = attention_bf16::kTile;  // 64
constexpr int kRowGroups = kTile / 16;        // 16 rows each, one per warp pair
constexpr int kWarps = 2 * kRowGroups, kThreads = kWarps * kWarp;
constexpr int kBlocksPerSm = 2;  // __launch_bounds__: 128 registers a thread, 16 warps per SM
constexpr float kLog2e = attention_bf16::kLog2e;
// Before a loop that must stay rolled (common.cuh's SFTDP_UNROLL is the opposite): unrolling the head dimension's
// k-steps and dK/dV's two k-steps hoists enough ldmatrix addresses to push the backward past 128 registers
// (kernel_resources.py: spills at HS 128). Nothing in the simulator build, as SFTDP_UNROLL.
#ifdef SFTDP_CUDA_SIM
#define SFTDP_NO_UNROLL
#else
#define SFTDP_NO_UNROLL _Pragma("unroll 1")
#endif
// One warp's bf16 A fragments for two k-steps: (2, 4 registers, kWarp lanes) words.
constexpr int kFragWords = 2 * 4 * kWarp;

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

// Where one launch's queries, keys and values are (tensor_cores.cu fills it in). The whole-row attention: query row t
// at position t, K and V the k/v heads of the same qkv rows (Tq = Tk = T; one segment array and one ranges array for
// both). Context parallelism: this rank's Tq query rows at increasing global positions qpos, against Tk gathered
// keys and values in position order (key j at position j) with their own segment ids. dK and dV are written where K
// and V were read, in the output buffer (dqkv's k/v heads, or the gathered positions' dkv). The shape (Tq, Tk, NH,
// KVH) goes to the kernels as scalars beside it, which the simulator's record shows (bench/cost_model reads them).
struct Layout {
  const int32_t* qpos;       // (Tq) increasing, qpos[t] < Tk; null: query row t is at position t
  const bf16* kv;            // (B, Tk, kv_ld) rows holding K and V
  int kv_ld, k_col, v_col;   // their row stride, and the columns of k head 0 and v head 0
  const int32_t* seg_q;      // (B, Tq) or null
  const int32_t* seg_k;      // (B, Tk); null exactly when seg_q is
  const int2* q_ranges;      // (B, q_tiles) (min, max) segment id of each 64-row query tile, or null
  const int2* k_ranges;      // (B, k_tiles) of each key tile, or null
};
// A launch's layout with its shape, as each kernel assembles it from its arguments.
struct Geometry {
  Layout lay;
  int Tq, Tk, NH, KVH, q_tiles, k_tiles;
};
__device__ __forceinline__ Geometry geometry(const Layout& lay, int Tq, int Tk, int NH, int KVH) {
  return {lay, Tq, Tk, NH, KVH, (Tq + kTile - 1) / kTile, (Tk + kTile - 1) / kTile};
}

// The global position of query row t, -1 past the last row (such a row sees nothing and is never stored).
__device__ __forceinline__ int position(const Geometry& geo, int t) {
  return t >= geo.Tq ? -1 : geo.lay.qpos ? geo.lay.qpos[t] : t;
}
// The last key tile that query tile qt may see: the one holding its last row's position (causal; < Tk).
__device__ __forceinline__ int last_key_tile(const Geometry& geo, int qt) {
  return position(geo, min(qt * kTile + kTile - 1, geo.Tq - 1)) / kTile;
}

// Query tile qt and key tile kt of batch row b may hold a visible pair only if their segment-id ranges meet
// (ranges null: no segments). Exact where it matters: a pair of the same id lies in both ranges.
__device__ __forceinline__ bool ranges_meet(const Geometry& geo, int b, int qt, int kt) {
  if (!geo.lay.q_ranges) return true;
  const int2 q = geo.lay.q_ranges[b * geo.q_tiles + qt], k = geo.lay.k_ranges[b * geo.k_tiles + kt];
  if (SFTDP_PLANTED(3) && qt != kt) return q.x < k.y && k.x < q.y;  // misses ranges that only touch
  return q.x <= k.y && k.x <= q.y;
}
// Every id of both tiles is one and the same: nothing inside needs a segment mask.
__device__ __forceinline__ bool one_segment(const Geometry& geo, int b, int qt, int kt) {
  if (!geo.lay.q_ranges) return true;
  const int2 q = geo.lay.q_ranges[b * geo.q_tiles + qt], k = geo.lay.k_ranges[b * geo.k_tiles + kt];
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
// B fragments of the n-tiles at columns c0..c0+7 (b[0..1]) and, for kNum = 4, c0+8..c0+15 (b[2..3]) from rows
// k0..k0+15 of a (., R) tile read as B itself (k = rows): ldmatrix .trans (.x2 reads lanes 0-15's addresses only).
template <int HS, int kNum = 4>
__device__ __forceinline__ void load_b_trans(uint32_t b[kNum], const bf16* tile, int k0, int c0) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  tc::ldmatrix<kNum, true>(b, tile + (k0 + (lane / 8 % 2) * 8 + lane % 8) * (HS + 8) + c0 + (lane / 16) * 8);
}

// acc (NTH n-tiles: columns c0 .. c0 + 8·NTH of the output) += a · rows k0..k0+15 of a (., R) tile, columns c0..:
// the P·V, dS·K, Pᵀ·dO and dSᵀ·Q steps of one half (NTH = HS/16 n-tiles, odd for HS = 16, 48, 80, 112).
template <int HS, int NTH>
__device__ __forceinline__ void mma_rows(float (&acc)[NTH][4], const uint32_t a[4], const bf16* tile, int k0, int c0) {
  SFTDP_UNROLL
  for (int np = 0; np < NTH / 2; ++np) {
    uint32_t b[4];
    load_b_trans<HS>(b, tile, k0, c0 + np * 16);
    tc::mma_bf16_16816(acc[2 * np], a, b, acc[2 * np]);
    tc::mma_bf16_16816(acc[2 * np + 1], a, b + 2, acc[2 * np + 1]);
  }
  if constexpr (NTH % 2 == 1) {
    uint32_t b[2];
    load_b_trans<HS, 2>(b, tile, k0, c0 + (NTH - 1) * 8);
    tc::mma_bf16_16816(acc[NTH - 1], a, b, acc[NTH - 1]);
  }
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

// A fragment handed to the other warp of the pair through shared memory: register r of lane l at word
// r·kWarp + l (32 lanes store and load 32 consecutive words: no bank conflict). The partner reads it after a
// barrier, in its own lane l, which holds the same fragment elements.
__device__ __forceinline__ void put_frag(uint32_t* slot, const uint32_t a[4], int lane) {
  SFTDP_UNROLL
  for (int r = 0; r < 4; ++r) slot[r * kWarp + lane] = a[r];
}
__device__ __forceinline__ void get_frag(uint32_t a[4], const uint32_t* slot, int lane) {
  SFTDP_UNROLL
  for (int r = 0; r < 4; ++r) a[r] = slot[r * kWarp + lane];
}

// The warp of the pair (this one or its partner) whose fragments hold the k-steps of half `owner`.
__device__ __forceinline__ int holder(int owner, int half, int warp, int partner) {
  if (SFTDP_PLANTED(5)) return warp;  // the wrong warp's fragments for the partner's k-steps
  return owner == half ? warp : partner;
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

// Two output values of a C fragment (adjacent columns, element i of the output) stored where the kernel writes: a
// float2 into out32, or (out32 null) a bf16 pair rounded to nearest even into out16 (one 32-bit store).
__device__ __forceinline__ void store_pair(float* out32, bf16* out16, size_t i, float a, float b) {
  if (out32)
    *reinterpret_cast<float2*>(out32 + i) = make_float2(a, b);
  else
    *reinterpret_cast<uint32_t*>(out16 + i) = tc::pack_bf16x2(a, b);
}
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(bf16 x) { return __bfloat162float(x); }

// The next key tile after kt that query tile qt may see, or -1: key tiles up to its last row's position (causal)
// whose segment ranges meet the query tile's. Every thread of the block gets the same answer.
__device__ __forceinline__ int next_key_tile(const Geometry& geo, int b, int qt, int kt) {
  for (const int last = last_key_tile(geo, qt); ++kt <= last;)
    if (ranges_meet(geo, b, qt, kt)) return kt;
  return -1;
}

// K and V rows [kt·64, kt·64 + 64) of k/v head kvh of batch row b into stage `stage` of the two-stage tiles sk, sv,
// their segment ids into sseg's stage: one cp.async group.
template <int HS>
__device__ __forceinline__ void load_kv_stage(bf16* sk, bf16* sv, int32_t* sseg, int stage, const Geometry& geo, int b,
                                              int kvh, int kt) {
  constexpr int R = HS + 8;
  const bf16* rows = geo.lay.kv + static_cast<size_t>(b) * geo.Tk * geo.lay.kv_ld;
  load_tile<HS>(sk + stage * kTile * R, rows + geo.lay.k_col + kvh * HS, geo.lay.kv_ld, kt * kTile, geo.Tk);
  load_tile<HS>(sv + stage * kTile * R, rows + geo.lay.v_col + kvh * HS, geo.lay.kv_ld, kt * kTile, geo.Tk);
  if (geo.lay.seg_k)
    load_segments(sseg + stage * kTile, geo.lay.seg_k + static_cast<size_t>(b) * geo.Tk, kt * kTile, geo.Tk);
  tc::cp_async_commit();
}

// The backward's two 16x(16·NP) products over the head dimension, from shared tiles (R = HS + 8 per row):
// x = A1·B1ᵀ and y = A2·B2ᵀ with A = rows [a0, a0 + 16) of a1, a2 and B = rows [b0, b0 + 16·NP) of b1, b2
// (dK/dV: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ; dQ: S = Q·Kᵀ and dP = dO·Vᵀ). x, y: 2·NP n-tiles of C fragments, =.
template <int HS, int NP>
__device__ __forceinline__ void two_products(float (&x)[2 * NP][4], float (&y)[2 * NP][4], const bf16* a1,
                                             const bf16* a2, int a0, const bf16* b1, const bf16* b2, int b0) {
  SFTDP_UNROLL
  for (int nt = 0; nt < 2 * NP; ++nt) {
    SFTDP_UNROLL
    for (int e = 0; e < 4; ++e) x[nt][e] = y[nt][e] = 0.f;
  }
  SFTDP_NO_UNROLL
  for (int ks = 0; ks < HS / 16; ++ks) {  // (not unrolled: nothing here is indexed by ks)
    uint32_t xa[4];
    load_a<HS>(xa, a1, a0, ks * 16);
    SFTDP_UNROLL
    for (int np = 0; np < NP; ++np) {
      uint32_t xb[4];
      load_b_rows<HS>(xb, b1, b0 + np * 16, ks * 16);
      tc::mma_bf16_16816(x[2 * np], xa, xb, x[2 * np]);
      tc::mma_bf16_16816(x[2 * np + 1], xa, xb + 2, x[2 * np + 1]);
    }
  }
  SFTDP_NO_UNROLL
  for (int ks = 0; ks < HS / 16; ++ks) {  // then y: fewer fragments live at once
    uint32_t ya[4];
    load_a<HS>(ya, a2, a0, ks * 16);
    SFTDP_UNROLL
    for (int np = 0; np < NP; ++np) {
      uint32_t yb[4];
      load_b_rows<HS>(yb, b2, b0 + np * 16, ks * 16);
      tc::mma_bf16_16816(y[2 * np], ya, yb, y[2 * np]);
      tc::mma_bf16_16816(y[2 * np + 1], ya, yb + 2, y[2 * np + 1]);
    }
  }
}

}  // namespace
}  // namespace sftdp::cuda
