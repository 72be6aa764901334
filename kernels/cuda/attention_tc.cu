// kernels/cuda/attention_tc.cu — the bf16 attention (kernels/attention.h) on tensor cores, after FlashAttention-2:
// mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix from shared memory, K/V (and in backward Q/dO) tiles
// staged by cp.async two deep, the online softmax on the accumulator fragments, a backward without atomics. One set
// of kernels serves both interfaces: the cuda-bf16 table's fp32 one (attention_tc_*: q, k, v and dO cast to bf16
// copies first, out and dqkv written as fp32) and the act16 one (cuda::act16::*: bf16 q|k|v, dO and O read where
// they are, out and dqkv written as bf16, one rounding each); each kernel takes an fp32 and a bf16 output pointer,
// one of them null, and nothing else differs. Head sizes 16..128 in steps of 16; others go to the CUDA-core kernels
// of attention.cu.
// Legend: B batch, T seq, NH query heads, KVH k/v heads, G = NH/KVH, HS head size, QKV = (NH + 2·KVH)·HS,
// R = HS + 8 (a shared-memory row: 16 bytes of padding keep ldmatrix's eight rows in different banks), Tt = 64 (rows
// per tile, queries and keys).
// Blocks of 8 warps, two per SM (__launch_bounds__(256, 2): at most 128 registers, 16 warps/SM): a tile's 64 rows are
// 4 row groups of 16, each shared by a warp pair, warp w and w + 4 ("halves" 0 and 1). Each half computes the
// scores of half the middle dimension (keys in forward and dQ, queries in dK/dV) and accumulates half the output
// columns (HS/2); the pair trades its bf16(P) / bf16(dS) A fragments (and the forward its row maxima and partial row
// sums) through shared memory, so every element is computed once and every sum keeps the one-warp order below.
// With segments each 64-row tile's (min, max) segment id is found first.
// Forward, per (query tile, h, b): Q's fragments in registers (read from shared memory per key tile above HS 64); for
// each key tile that the tile may see (kt <= qt: the causal triangle beyond is skipped; with segments, tiles whose id
// ranges do not meet are skipped), in increasing order: S = Q·Kᵀ (raw, fp32), masked to −inf where invisible,
// m_new = max(m, rowmax S), P = exp2(S·scale·log2e − m_new·scale·log2e), α = exp2((m − m_new)·scale·log2e),
// l = l·α + rowsum P (fma; a lane's sum runs over keys 8n + 2t, 8n + 2t + 1 for n = 0..7, half 1 continuing half
// 0's), O = O·α + bf16(P)·V; at the end O/l and lse = m·scale + log l. A key tile with nothing visible for a row
// leaves its state exactly as it was, so skipping it changes no bit.
// Backward (7 GEMMs, not FlashAttention-2's 5: its dQ is summed over key tiles by atomics, and the deterministic ways
// to sum it from the dK/dV kernel cost a dQ copy per key tile or blocks that wait on each other): D = Σ dO·O per row
// (a warp per row); per (key tile, k/v head, b), over the group's query heads in increasing h and their query tiles
// in increasing order, 32 queries at a time: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dPᵀ = V·dOᵀ,
// dSᵀ = Pᵀ·(dPᵀ − D), dV += bf16(Pᵀ)·dO, dK += bf16(dSᵀ)·Q, then dK ·= scale; per (query tile, h, b): S, P, dP, dS as
// above, dQ += bf16(dS)·K over key tiles in increasing order, then dQ ·= scale. Every sum has an order fixed by the
// shape: the same bits on every run. kernels/cpu/attention_bf16.cpp does the same arithmetic (its header lists each
// rounding). Masked keys inside a visited tile must be finite (their P is 0, and 0·NaN is NaN in a product), as for
// any attention kernel on tensor cores.
// Accumulation: out =, lse =, dqkv =.
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention_cuda_cores.h"
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
// pairs, 4 a wrong log-sum-exp, 5 a fragment taken from the wrong warp of the pair, 6 a missing barrier between a
// warp's fragments written and its partner reading them.
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

// out: fp32 output (the fp32 interface) or null; out16: bf16 output (act16) or null. grid (tiles, NH, B), block
// kThreads, dynamic shared memory fwd_smem<HS>(). Warp w: rows 16·(w % 4) .. + 15 of the tile; half w / 4: keys
// 32·half .. + 31 of each key tile (S, P) and output columns HS/2·half .. + HS/2 − 1 (O).
template <int HS>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attention_tc_fwd_kernel(float* out, bf16* out16, float* lse, const bf16* qkv, const int32_t* seg,
                            const int2* ranges, int T, int NH, int KVH, float scale, float scale_log2) {
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
  const int tiles = static_cast<int>(gridDim.x), qt = tiles - 1 - static_cast<int>(blockIdx.x);  // long rows first
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (NH / KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rg = warp % kRowGroups, half = warp / kRowGroups, partner = warp ^ kRowGroups;
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
  uint32_t qf[kQInRegisters ? KS : 1][4];
  if constexpr (kQInRegisters) {
    SFTDP_UNROLL
    for (int ks = 0; ks < KS; ++ks) load_a<HS>(qf[ks], sq, rg * 16, ks * 16);
  }

  const int t0 = r0 + rg * 16 + g, t1 = t0 + 8;
  const int32_t seg0 = seg_row && t0 < T ? seg_row[t0] : 0, seg1 = seg_row && t1 < T ? seg_row[t1] : 0;
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
    const bool all_visible = k0 + kTile - 1 <= r0 + rg * 16 && k0 + kTile <= T && one_segment(ranges, tiles, b, qt, kt);
    if (!all_visible) {
      SFTDP_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + nt * 8 + 2 * tq + (e & 1), j = k0 + c, t = e < 2 ? t0 : t1;
          const bool visible = j <= t && j < T && (!seg_row || kseg[c] == (e < 2 ? seg0 : seg1));
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
    if (t >= T) continue;
    l[i] = sl[rg * 16 + i * 8 + g];
    const float inv = 1.f / l[i];  // l >= 1: t sees itself
    const size_t at = (static_cast<size_t>(b) * T + t) * NH * HS + h * HS + half * (HS / 2) + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt) store_pair(out, out16, at + nt * 8, o[nt][2 * i] * inv, o[nt][2 * i + 1] * inv);
    if (half == 1 && tq == 0)
      lse[(static_cast<size_t>(b) * NH + h) * T + t] = fmaf(m[i], scale, SFTDP_PLANTED(4) ? log2f(l[i]) : logf(l[i]));
  }
}

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

// dK, dV of key tile kt of k/v head kvh into dqkv (fp32) or dqkv16 (bf16), the other null: grid (tiles, KVH, B),
// block kThreads, dynamic shared memory dkv_smem<HS>(). Warp w: keys 16·(w % 4) .. + 15 of the tile; half w / 4:
// queries 16·half .. + 15 of each 32 (Sᵀ, dPᵀ) and output columns HS/2·half .. (dK, dV).
template <int HS>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attention_tc_bwd_dkv_kernel(float* dqkv, bf16* dqkv16, const bf16* qkv, const bf16* dout, const float* lse,
                                const float* delta, const int32_t* seg, const int2* ranges, int T, int NH, int KVH,
                                float scale, float scale_log2) {
  constexpr int R = HS + 8, NTH = HS / 16;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sk = smem;                                                   // (kTile, R): this block's keys
  bf16* sv = sk + kTile * R;                                         // (kTile, R)
  bf16* sq = sv + kTile * R;                                         // [2] (kTile, R): a query tile's q rows
  bf16* sdo = sq + 2 * kTile * R;                                    // [2] (kTile, R): and its dO rows
  float* slse = reinterpret_cast<float*>(sdo + 2 * kTile * R);       // [2] (kTile): lse·log2e
  float* sdelta = slse + 2 * kTile;                                  // [2] (kTile)
  int32_t* sseg = reinterpret_cast<int32_t*>(sdelta + 2 * kTile);    // [2] (kTile)
  uint32_t* sx = reinterpret_cast<uint32_t*>(sseg + 2 * kTile);      // [kWarps] (kFragWords): bf16(Pᵀ), bf16(dSᵀ)
  const int tiles = static_cast<int>(gridDim.x), kt = static_cast<int>(blockIdx.x);
  const int kvh = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), G = NH / KVH;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rg = warp % kRowGroups, half = warp / kRowGroups, partner = warp ^ kRowGroups;
  const int g = lane / 4, tq = lane % 4, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const bf16* rows = qkv + static_cast<size_t>(b) * T * QKV;
  const bf16* drows = dout + static_cast<size_t>(b) * T * OC;
  const int32_t* seg_row = seg ? seg + static_cast<size_t>(b) * T : nullptr;
  const int kb = kt * kTile + rg * 16, j0 = kb + g, j1 = j0 + 8;
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
  float dk[NTH][4], dv[NTH][4];
  SFTDP_UNROLL
  for (int nt = 0; nt < NTH; ++nt) {
    SFTDP_UNROLL
    for (int e = 0; e < 4; ++e) dk[nt][e] = dv[nt][e] = 0.f;
  }
  int item = next_item(kt - 1);  // (h = kvh·G, qt = kt): the diagonal tile
  load_q(0, item);
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
    const bool all_visible = q0 >= kb + 15 && q0 + kTile <= T && kb + 16 <= T && one_segment(ranges, tiles, b, qt, kt);
    for (int sub = 0; sub < 2; ++sub) {  // 32 queries at a time, 16 per half: 2 n-tiles of Sᵀ and dPᵀ
      const int c0 = sub * 32 + half * 16;
      float p[2][4], ds[2][4];
      two_products<HS, 1>(p, ds, sk, sv, rg * 16, Q, dO, c0);  // Sᵀ, dPᵀ
      SFTDP_UNROLL
      for (int nt = 0; nt < 2; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + nt * 8 + 2 * tq + (e & 1), q = q0 + c, j = e < 2 ? j0 : j1;
          const bool visible =
              all_visible || (q < T && j <= q && j < T && (!seg_row || qseg[c] == (e < 2 ? sj0 : sj1)));
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
    if (j >= T) continue;
    const size_t at = (static_cast<size_t>(b) * T + j) * QKV + half * (HS / 2) + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt) {
      store_pair(dqkv, dqkv16, at + (NH + kvh) * HS + nt * 8, dk[nt][2 * i] * scale, dk[nt][2 * i + 1] * scale);
      store_pair(dqkv, dqkv16, at + (NH + KVH + kvh) * HS + nt * 8, dv[nt][2 * i], dv[nt][2 * i + 1]);
    }
  }
}

// dQ of query tile qt of head h into dqkv (fp32) or dqkv16 (bf16), the other null: grid (tiles, NH, B), block
// kThreads, dynamic shared memory dq_smem<HS>(). Warp w: rows 16·(w % 4) .. + 15 of the tile; half w / 4: keys
// 32·half .. + 31 of each key tile (S, dP) and output columns HS/2·half .. (dQ).
template <int HS>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attention_tc_bwd_dq_kernel(float* dqkv, bf16* dqkv16, const bf16* qkv, const bf16* dout, const float* lse,
                               const float* delta, const int32_t* seg, const int2* ranges, int T, int NH, int KVH,
                               float scale, float scale_log2) {
  constexpr int R = HS + 8, NTH = HS / 16;
  SFTDP_DYNAMIC_SHARED(bf16, smem);
  bf16* sq = smem;                                                 // (kTile, R)
  bf16* sdo = sq + kTile * R;                                      // (kTile, R)
  bf16* sk = sdo + kTile * R;                                      // [2] (kTile, R)
  bf16* sv = sk + 2 * kTile * R;                                   // [2] (kTile, R)
  int32_t* sseg = reinterpret_cast<int32_t*>(sv + 2 * kTile * R);  // [2] (kTile)
  uint32_t* sx = reinterpret_cast<uint32_t*>(sseg + 2 * kTile);    // [kWarps] (kFragWords): bf16(dS)
  const int tiles = static_cast<int>(gridDim.x), qt = tiles - 1 - static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (NH / KVH);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rg = warp % kRowGroups, half = warp / kRowGroups, partner = warp ^ kRowGroups;
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
  const int t0 = r0 + rg * 16 + g, t1 = t0 + 8;
  const int32_t seg0 = seg_row && t0 < T ? seg_row[t0] : 0, seg1 = seg_row && t1 < T ? seg_row[t1] : 0;
  const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * T;
  const float* delta_h = delta + (static_cast<size_t>(b) * NH + h) * T;
  const float L[2] = {t0 < T ? lse_h[t0] * kLog2e : 0.f, t1 < T ? lse_h[t1] * kLog2e : 0.f};
  const float Dr[2] = {t0 < T ? delta_h[t0] : 0.f, t1 < T ? delta_h[t1] : 0.f};
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
    const bool all_visible =
        k0 + kTile - 1 <= r0 + rg * 16 && k0 + kTile <= T && one_segment(ranges, tiles, b, qt, kt);
    for (int kk = 0; kk < 2; ++kk) {  // this half's two k-steps of 16 keys: S, dP, P, dS, bf16(dS)'s A fragment
      float p[2][4], ds[2][4];
      two_products<HS, 1>(p, ds, sq, sdo, rg * 16, K, V, c0 + kk * 16);  // S, dP
      SFTDP_UNROLL
      for (int nt = 0; nt < 2; ++nt) {
        SFTDP_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int c = c0 + kk * 16 + nt * 8 + 2 * tq + (e & 1), j = k0 + c, t = e < 2 ? t0 : t1;
          const bool visible = all_visible || (j <= t && j < T && (!seg_row || kseg[c] == (e < 2 ? seg0 : seg1)));
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
    if (t >= T) continue;
    const size_t at = (static_cast<size_t>(b) * T + t) * QKV + h * HS + half * (HS / 2) + 2 * tq;
    SFTDP_UNROLL
    for (int nt = 0; nt < NTH; ++nt)
      store_pair(dqkv, dqkv16, at + nt * 8, dq[nt][2 * i] * scale, dq[nt][2 * i + 1] * scale);
  }
}

// ---- launchers ------------------------------------------------------------------------------------
// Shared memory past the (kTile, R) bf16 tiles, the same for every head size (bench/cost_model reads HS back from
// the total): forward: two stages of segment ids, the pair's row maxima, partial sums, l and P fragments; dK/dV: two
// stages of lse, D and segment ids, the fragments; dQ: two stages of segment ids, the fragments.
constexpr int kFwdExtraBytes = 2 * kTile * 4 + kWarps * 16 * 4 + kRowGroups * 2 * kWarp * 4 + kRowGroups * 16 * 4 +
                               kWarps * kFragWords * 4;
constexpr int kDkvExtraBytes = 2 * 3 * kTile * 4 + kWarps * kFragWords * 4;
constexpr int kDqExtraBytes = 2 * kTile * 4 + kWarps * kFragWords * 4;
template <int HS>
constexpr size_t fwd_smem() {  // Q, two stages of K and V
  return 5 * size_t{kTile} * (HS + 8) * sizeof(bf16) + kFwdExtraBytes;
}
template <int HS>
constexpr size_t dkv_smem() {  // K, V, two stages of Q and dO
  return 6 * size_t{kTile} * (HS + 8) * sizeof(bf16) + kDkvExtraBytes;
}
template <int HS>
constexpr size_t dq_smem() {  // Q, dO, two stages of K and V
  return 6 * size_t{kTile} * (HS + 8) * sizeof(bf16) + kDqExtraBytes;
}

// Opts `kernel` in to `bytes` of dynamic shared memory once per process (above 48 KiB CUDA needs it).
void allow_shared(const void* kernel, size_t bytes, bool& done) {
  if (done) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done = true;
}

// What every launch of one call shares: the tiles' segment ranges (scratch; null without segments) and the scales.
struct Prepared {
  const int2* ranges;  // (B, tiles) or null
  int tiles;
  float scale, scale_log2;
};
Prepared prepare(const int32_t* seg, int B, int T, int HS, cudaStream_t stream) {
  Prepared p{nullptr, static_cast<int>(ceil_div(T, kTile)), attention_bf16::scale(HS), attention_bf16::scale_log2(HS)};
  if (seg) {
    int2* ranges = scratch_as<int2>(Scratch::kAttnRanges, static_cast<size_t>(B) * p.tiles);
    SFTDP_LAUNCH(attention_tc_segment_ranges_kernel, dim3(p.tiles, B), kTile, 0, stream, ranges, seg, T);
    CHECK_LAUNCH();
    p.ranges = ranges;
  }
  return p;
}

// The bf16 copy of an fp32 tensor that the fp32 interface's kernels read (scratch slot `slot`).
const bf16* bf16_copy(Scratch slot, const float* x, size_t n, cudaStream_t stream) {
  bf16* copy = scratch_as<bf16>(slot, n);
  cast_fp32_to_bf16(copy, n, x, n, n, 1, stream);
  return copy;
}

// An output: fp32 (the fp32 interface) or bf16 (act16); the kernels take both pointers, one of them null.
struct Output {
  float* f32;
  bf16* b16;
};

template <int HS>
void forward_hs(Output out, float* lse, const bf16* qkv, const Prepared& p, const int32_t* seg, int B, int T, int NH,
                int KVH, cudaStream_t stream) {
  static bool opted = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_fwd_kernel<HS>), fwd_smem<HS>(), opted);
  SFTDP_LAUNCH(attention_tc_fwd_kernel<HS>, dim3(p.tiles, NH, B), kThreads, fwd_smem<HS>(), stream, out.f32, out.b16,
               lse, qkv, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
}

template <int HS>
void backward_hs(Output dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* delta,
                 const Prepared& p, const int32_t* seg, int B, int T, int NH, int KVH, cudaStream_t stream) {
  static bool opted_dkv = false, opted_dq = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dkv_kernel<HS>), dkv_smem<HS>(), opted_dkv);
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dq_kernel<HS>), dq_smem<HS>(), opted_dq);
  SFTDP_LAUNCH(attention_tc_bwd_dkv_kernel<HS>, dim3(p.tiles, KVH, B), kThreads, dkv_smem<HS>(), stream, dqkv.f32,
               dqkv.b16, qkv, dout, lse, delta, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(attention_tc_bwd_dq_kernel<HS>, dim3(p.tiles, NH, B), kThreads, dq_smem<HS>(), stream, dqkv.f32,
               dqkv.b16, qkv, dout, lse, delta, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
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

// Both interfaces' forward on bf16 q|k|v.
void forward(Output out, float* lse, const bf16* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
             cudaStream_t stream) {
  const Prepared p = prepare(seg, B, T, HS, stream);
  with_head_size(HS, [&]<int kHS>() { forward_hs<kHS>(out, lse, qkv, p, seg, B, T, NH, KVH, stream); });
}

// Both interfaces' backward on bf16 q|k|v and dO (O: the stored output's type, which D reads).
template <class O>
void backward(Output dqkv, const bf16* dout, const bf16* qkv, const O* out, const float* lse, const int32_t* seg, int B,
              int T, int NH, int KVH, int HS, cudaStream_t stream) {
  const Prepared p = prepare(seg, B, T, HS, stream);
  const size_t rows = static_cast<size_t>(B) * T * NH;
  float* delta = scratch_as<float>(Scratch::kAttnDelta, rows);
  SFTDP_LAUNCH(attention_tc_bwd_delta_kernel<O>, static_cast<unsigned>(ceil_div(rows, kWarps)), kThreads, 0, stream,
               delta, dout, out, static_cast<int>(rows), T, NH, HS);
  CHECK_LAUNCH();
  with_head_size(HS, [&]<int kHS>() {
    backward_hs<kHS>(dqkv, qkv, dout, lse, delta, p, seg, B, T, NH, KVH, stream);
  });
}

}  // namespace

void attention_tc_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                      int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS)) return attention_fwd_bf16(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_fwd", B, T, NH, KVH);
  if (B == 0) return;
  const size_t n = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS;
  forward({out, nullptr}, lse, bf16_copy(Scratch::kAttnQkv16, qkv, n, stream), seg, B, T, NH, KVH, HS, stream);
}

void attention_tc_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                      const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_bf16(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_bwd", B, T, NH, KVH);
  if (B == 0) return;
  const size_t n_qkv = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS, n_out = static_cast<size_t>(B) * T * NH * HS;
  const bf16* qkv16 = bf16_copy(Scratch::kAttnQkv16, qkv, n_qkv, stream);
  const bf16* dout16 = bf16_copy(Scratch::kAttnDout16, dout, n_out, stream);
  backward({dqkv, nullptr}, dout16, qkv16, out, lse, seg, B, T, NH, KVH, HS, stream);
}

namespace act16 {

void attention_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                   int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_fwd_cuda_cores(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("act16::attention_fwd", B, T, NH, KVH);
  if (B == 0) return;
  forward({nullptr, reinterpret_cast<bf16*>(out)}, lse, reinterpret_cast<const bf16*>(qkv), seg, B, T, NH, KVH, HS,
          stream);
}

void attention_bwd(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_cuda_cores(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("act16::attention_bwd", B, T, NH, KVH);
  if (B == 0) return;
  backward({nullptr, reinterpret_cast<bf16*>(dqkv)}, reinterpret_cast<const bf16*>(dout),
           reinterpret_cast<const bf16*>(qkv), reinterpret_cast<const bf16*>(out), lse, seg, B, T, NH, KVH, HS, stream);
}

}  // namespace act16
}  // namespace sftdp::cuda
