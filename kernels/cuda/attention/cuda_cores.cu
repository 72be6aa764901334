// kernels/cuda/attention/cuda_cores.cu — causal grouped-query attention with the segment mask on the GPU
// (kernels/attention.h), FlashAttention-2's contract: the forward keeps the output and each row's
// log-sum-exp, the backward recomputes the scores. Legend: B batch, T seq, NH query heads, KVH k/v
// heads, HS head size (<= 256), G = NH/KVH, QKV = (NH + 2·KVH)·HS; S = 1, 2, 4 or 8 slices of 32 head
// columns (HS <= 32·S: a template parameter picked from HS at run time); R rows per warp, up to 4 warps
// per block (fewer when T is short), Br = warps·R rows per block.
// No local memory (STYLE.md, GPU speed habits): each lane holds columns s·32 + lane of its warp's R
// rows in registers indexed only by compile-time constants. Tiles of 32 rows (one per lane) sit in
// shared memory, padded to an odd row stride 32·S + 1 so that lanes reading "their" rows hit 32 banks:
//   scores: lane j forms the dot product of each of the warp's rows (read broadcast from shared
//           memory) with tile row j, i in increasing order: a tile's 32 scores, one per lane;
//   sums over a tile's rows (P·V, dS·K, Pᵀ·dO, dSᵀ·Q): each lane adds, for its columns, the visible
//           tile rows in increasing order, their weights read from shared memory.
// Forward, per (b, h, Br query rows): key tiles [c0, c0 + 32) below the block's last row (the causal
// triangle beyond is skipped), tiles no row of the block may see (other segments) skipped too; per
// row the online softmax over each tile: m' = max(m, the tile's visible scores, j increasing), P =
// exp(s − m'), every sum so far scaled by exp(m − m'); each lane sums the P of its own keys, and at the
// end l is the sum of the 32 lane sums, lane 0's first: lse = m + log l.
// Backward, three kernels, no atomics: D[b,h,t] = Σ dO·O per row (FlashAttention-2's Σ_j P·dP);
// dq per query row over key tiles in increasing order; dk and dv per key row, over the k/v head's G
// query heads in increasing h and each head's query tiles in increasing order, a head's sums added to
// the total once complete (the multi-head result on repeated k/v, summed as repeat_kv's transpose).
// P = exp(s − lse), dP = dO·v, dS = P·(dP − D). Keys a row may not see never enter a sum (a NaN there
// stays out). Every sum's order is fixed by the shape, so the bits are the same on every run; the
// scores' and sums' orders do not depend on how many warps a block has.
// Accumulation: out =, lse =, dqkv =.
// What the kernels read and write (Io): fp32 tensors (attention_fwd/bwd); fp32 tensors with q, k, v and dO rounded to
// bf16 as they are read (to nearest even, as the GEMMs' copies; the cuda-bf16 table's fallback for head sizes without
// tensor-core kernels, tensor_cores.cu): the fp32 attention of the rounded inputs, and D = Σ bf16(dO)·O; or bf16
// storage (act16, kernels/act16.h, the same fallback on the bf16 activation path): q|k|v, dO and O bf16, widened
// exactly as read (D = Σ dO·O from the stored values), out and dqkv rounded to bf16 once as written; lse fp32 always.
#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/attention/cuda_cores.h"
#include "kernels/cuda/common.cuh"


namespace sftdp::cuda {
namespace {

constexpr int kMaxHS = 256;
constexpr int kWarps = 4;     // at most, per block
constexpr int kTile = kWarp;  // rows of a shared tile: one per lane

using bf16 = __nv_bfloat16;
// The three ways of reading and writing (see the top of this file): In is the element type of q|k|v, dO and O, Out
// that of out and dqkv; kRound rounds fp32 inputs to bf16 as they are read.
struct Fp32Io {
  using In = float;
  using Out = float;
  static constexpr bool kRound = false;
};
struct RoundedIo {
  using In = float;
  using Out = float;
  static constexpr bool kRound = true;
};
struct Bf16Io {
  using In = bf16;
  using Out = bf16;
  static constexpr bool kRound = false;
};

// One instance of the kernels: its Io, S slices of 32 columns.
template <class Io_, int S_>
struct Config {
  using Io = Io_;
  using In = typename Io::In;
  using Out = typename Io::Out;
  static constexpr int S = S_;
  static constexpr int kWidth = kWarp * S;    // columns of a row held by a warp (>= HS)
  static constexpr int kStride = kWidth + 1;  // padded row of a tile read lane-per-row
  // Rows per warp: query rows (forward, dq) and key rows (dk/dv, four accumulators per column). More
  // rows share each tile and each barrier; fewer keep registers and shared memory in bounds.
  static constexpr int kQueryRows = S <= 2 ? 8 : 8 / S;
  static constexpr int kKeyRows = S == 1 ? 8 : 8 / S;
  // Two 32-row tiles at once (k and v, or q and dO) fit in static shared memory (48 KiB) up to S = 4;
  // at S = 8 the kernels hold one at a time and load the other in its turn.
  static constexpr bool kBothTiles = S <= 4;
  static constexpr int kTileFloats = (kBothTiles ? 2 : 1) * kTile * kStride;
};

// Warps per block for T rows, R per warp: up to kWarps, fewer when T is short.
inline int block_warps(int T, int R) { return static_cast<int>(ceil_div(T, R) < kWarps ? ceil_div(T, R) : kWarps); }

// An element of q|k|v or dO as attention reads it: itself, rounded to bf16 (and widened back exactly), or widened.
template <class Io>
__device__ __forceinline__ float input(typename Io::In x) {
  if constexpr (Io::kRound) return __bfloat162float(__float2bfloat16_rn(x));
  else if constexpr (std::is_same_v<typename Io::In, bf16>) return __bfloat162float(x);
  else return x;
}
// An element of O as stored (D reads it unrounded), and an output element as stored (bf16: rounded once).
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(bf16 x) { return __bfloat162float(x); }
template <class Out>
__device__ __forceinline__ Out output(float x) {
  if constexpr (std::is_same_v<Out, bf16>) return __float2bfloat16_rn(x);
  else return x;
}

// Whether some query of [q0, q1) (at most 32) may see some key of [k0, k1) (ranges clipped to T): a
// block-wide, uniform answer that lets the whole block skip a tile, in one barrier. Thread x < 32
// writes query q0 + x's answer into its slot of slots[call % 2] (the value `call`, or −1) whatever it
// is, so no slot needs clearing; every thread then reads the 32 slots. Call number `call` (0, 1, ...
// within a block) and the parity keep calls apart: call c + 2 writes only after call c + 1's barrier,
// which every reader of call c has passed.
__device__ bool block_any_visible(int call, int q0, int q1, int k0, int k1, const int32_t* seg_row, int* slots) {
  int* slot = slots + (call & 1) * kWarp;
  if (threadIdx.x < kWarp) {
    const int t = q0 + static_cast<int>(threadIdx.x);
    bool any = false;
    if (t < q1) {
      const int32_t seg_t = seg_row ? seg_row[t] : 0;
      for (int t2 = k0; t2 < k1 && t2 <= t && !any; ++t2) any = !seg_row || seg_row[t2] == seg_t;
    }
    slot[threadIdx.x] = any ? call : -1;
  }
  __syncthreads();  // also: every warp is done with the previous tile
  bool any = false;
  for (int x = 0; x < kWarp; ++x) any = any || slot[x] == call;
  return any;
}

// Rows [0, n) of an HS-wide slice (src: its row 0, row stride ld) into `dst` (row stride `stride`)
// as attention reads them; rows [n, rows) zero.
template <class Io>
__device__ void load_rows(float* dst, int stride, const typename Io::In* src, size_t ld, int n, int rows, int HS) {
  for (int idx = threadIdx.x; idx < rows * HS; idx += blockDim.x) {
    const int r = idx / HS, i = idx % HS;
    dst[r * stride + i] = r < n ? input<Io>(src[static_cast<size_t>(r) * ld + i]) : 0.f;
  }
}

// Segment ids of rows [t0, t0 + n) of a tile (0 without a mask).
__device__ void load_segments(int32_t* dst, const int32_t* seg_row, int t0, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = seg_row ? seg_row[t0 + i] : 0;
}

// dot[r] = Σ_i x_r[i]·y[i], i in increasing order, for the warp's R rows x_r (row stride W): y is the
// lane's tile row; 0 where the lane has none (live false).
template <int R>
__device__ __forceinline__ void lane_dots(float (&dot)[R], const float* x, int W, const float* y, bool live, int HS) {
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) dot[r] = 0.f;
  if (!live) return;
  for (int i = 0; i < HS; ++i) {
    const float yi = y[i];
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) dot[r] += x[r * W + i] * yi;
  }
}

// acc[s] += Σ_{j in [j0, j1), seg_tile[j] == seg, increasing} w[j]·tile[j][s·32 + lane] over the lane's
// columns below HS: the visible rows of a tile (the others may hold anything, NaN included).
template <int S>
__device__ __forceinline__ void add_weighted_rows(float (&acc)[S], int j0, int j1, const int32_t* seg_tile, int32_t seg,
                                                  const float* w, const float* tile, int lane, int HS) {
  for (int j = j0; j < j1; ++j) {
    if (seg_tile[j] != seg) continue;
    const float wj = w[j];
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s)
      if (s * kWarp + lane < HS) acc[s] += wj * tile[j * (kWarp * S + 1) + s * kWarp + lane];
  }
}

// What every kernel of one (b, head) needs: grid (row blocks, B·heads).
template <class In>
struct Head {
  int b, h, QKV;
  const In* rows;          // qkv of batch row b
  const int32_t* seg_row;  // its segment ids, or null
  float scale;             // 1/sqrt(HS)
};
template <class In>
__device__ Head<In> head_of(const In* qkv, const int32_t* seg, int T, int heads, int NH, int KVH, int HS) {
  Head<In> hd;
  hd.b = blockIdx.y / heads, hd.h = blockIdx.y % heads;
  hd.QKV = (NH + 2 * KVH) * HS;
  hd.rows = qkv + static_cast<size_t>(hd.b) * T * hd.QKV;
  hd.seg_row = seg ? seg + static_cast<size_t>(hd.b) * T : nullptr;
  hd.scale = 1.f / sqrtf(static_cast<float>(HS));
  return hd;
}

// grid (ceil(T / Br), B·NH), block warps·32 (block_warps). Row t = r0 + warp·R + r.
template <class C>
__global__ void attention_fwd_kernel(typename C::Out* out, float* lse, const typename C::In* qkv, const int32_t* seg,
                                     int T, int NH, int KVH, int HS) {
  using Io = typename C::Io;
  constexpr int S = C::S, R = C::kQueryRows, W = C::kWidth, kMaxRows = kWarps * R;
  __shared__ float q_tile[kMaxRows * W];      // the block's q rows
  __shared__ float kv_tile[C::kTileFloats];   // a key tile's k rows and v rows (or k, then v)
  __shared__ float s_tile[kMaxRows * kTile];  // each row's scores for the tile's keys (−inf: invisible)
  __shared__ float p_tile[kMaxRows * kTile];  // and their P
  __shared__ float l_tile[kMaxRows * kTile];  // at the end: each lane's share of each row's l
  __shared__ int32_t seg_tile[kTile];
  __shared__ int slots[2 * kWarp];
  const auto hd = head_of(qkv, seg, T, NH, NH, KVH, HS);
  const int kvh = hd.h / (NH / KVH), lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows = blockDim.x / kWarp * R, r0 = blockIdx.x * rows, r1 = min(T, r0 + rows), wr0 = r0 + warp * R;
  float* k_tile = kv_tile;
  float* v_tile = C::kBothTiles ? kv_tile + kTile * C::kStride : kv_tile;
  load_rows<Io>(q_tile, W, hd.rows + static_cast<size_t>(r0) * hd.QKV + hd.h * HS, hd.QKV, r1 - r0, rows, HS);
  int32_t seg_t[R];
  float m[R], l[R], shrink[R], acc[R][S];
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) {
    seg_t[r] = hd.seg_row && wr0 + r < T ? hd.seg_row[wr0 + r] : 0;
    m[r] = -INFINITY, l[r] = 0.f, shrink[r] = 1.f;
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s) acc[r][s] = 0.f;
  }
  const auto* k_rows = hd.rows + static_cast<size_t>(NH + kvh) * HS;
  const auto* v_rows = hd.rows + static_cast<size_t>(NH + KVH + kvh) * HS;
  for (int c0 = 0, call = 0; c0 < r1; c0 += kTile, ++call) {
    const int n = min(kTile, T - c0);
    if (!block_any_visible(call, r0, r1, c0, c0 + n, hd.seg_row, slots)) continue;
    load_rows<Io>(k_tile, C::kStride, k_rows + static_cast<size_t>(c0) * hd.QKV, hd.QKV, n, n, HS);
    if constexpr (C::kBothTiles)
      load_rows<Io>(v_tile, C::kStride, v_rows + static_cast<size_t>(c0) * hd.QKV, hd.QKV, n, n, HS);
    load_segments(seg_tile, hd.seg_row, c0, n);
    __syncthreads();
    float dot[R];
    lane_dots(dot, q_tile + warp * R * W, W, k_tile + lane * C::kStride, lane < n, HS);  // q_t·k_j, j = c0 + lane
    int jn[R];  // row r may see keys c0 + [0, jn) (and of them those of its segment)
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) {
      const int t = wr0 + r;
      jn[r] = t < T ? min(n, t - c0 + 1) : 0;
      const bool v = lane < jn[r] && seg_tile[lane] == seg_t[r];
      s_tile[(warp * R + r) * kTile + lane] = v ? hd.scale * dot[r] : -INFINITY;
    }
    __syncwarp();  // the warp's score rows are written
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) {  // the online softmax's step over this tile
      const float* sr = s_tile + (warp * R + r) * kTile;
      float m_tile = -INFINITY;
      for (int j = 0; j < jn[r]; ++j) m_tile = max(m_tile, sr[j]);  // every lane: the same max
      if (m_tile == -INFINITY) jn[r] = 0;                           // the row sees nothing here
      if (jn[r] == 0) continue;                                     // (its state stays as it was)
      const float m_new = max(m[r], m_tile);
      shrink[r] = expf(m[r] - m_new);  // 0 on the first tile seen (m = −inf), 1 if the max stays
      const float p = lane < jn[r] ? expf(sr[lane] - m_new) : 0.f;  // 0 where invisible
      l[r] = l[r] * shrink[r] + p;                                  // the lane's own keys
      m[r] = m_new;
      p_tile[(warp * R + r) * kTile + lane] = p;
    }
    if constexpr (C::kBothTiles) {
      __syncwarp();  // the warp's P rows are written
    } else {
      __syncthreads();  // every warp is done with the k rows (and its P rows are written)
      load_rows<Io>(v_tile, C::kStride, v_rows + static_cast<size_t>(c0) * hd.QKV, hd.QKV, n, n, HS);
      __syncthreads();
    }
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) {
      if (jn[r] == 0) continue;
      SFTDP_UNROLL
      for (int s = 0; s < S; ++s) acc[r][s] *= shrink[r];
      add_weighted_rows<S>(acc[r], 0, jn[r], seg_tile, seg_t[r], p_tile + (warp * R + r) * kTile, v_tile, lane, HS);
    }
  }
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) l_tile[(warp * R + r) * kTile + lane] = l[r];
  __syncwarp();  // the warp's lane sums are written
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) {
    const int t = wr0 + r;
    if (t >= T) continue;
    float sum = 0.f;  // every lane adds the 32 lane sums in the same order: the same bits
    for (int j = 0; j < kTile; ++j) sum += l_tile[(warp * R + r) * kTile + j];
    const float inv = 1.f / sum;  // sum >= 1: t always sees itself
    auto* o = out + (static_cast<size_t>(hd.b) * T + t) * NH * HS + hd.h * HS;
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s)
      if (s * kWarp + lane < HS) o[s * kWarp + lane] = output<typename C::Out>(acc[r][s] * inv);
    if (lane == 0) lse[(static_cast<size_t>(hd.b) * NH + hd.h) * T + t] = m[r] + logf(sum);
  }
}

// D[b,h,t] = Σ_i dO[b,t,h,i]·O[b,t,h,i] (O as stored): one thread per (b, h, t), i in increasing order.
template <class Io>
__global__ void attention_bwd_delta_kernel(float* delta, const typename Io::In* dout, const typename Io::In* out,
                                           int B, int T, int NH, int HS) {
  const size_t n = static_cast<size_t>(B) * NH * T;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = idx % T, h = idx / T % NH, b = idx / (static_cast<size_t>(T) * NH);
    const size_t at = (b * T + t) * NH * HS + h * HS;
    float s = 0.f;
    for (int i = 0; i < HS; ++i) s += input<Io>(dout[at + i]) * widen(out[at + i]);
    delta[idx] = s;
  }
}

// dq row t = scale·Σ_j dS·k_j, dS = P·(dP − D): grid and block as forward.
template <class C>
__global__ void attention_bwd_dq_kernel(typename C::Out* dqkv, const float* delta, const typename C::In* dout,
                                        const typename C::In* qkv, const float* lse, const int32_t* seg, int T, int NH,
                                        int KVH, int HS) {
  using Io = typename C::Io;
  constexpr int S = C::S, R = C::kQueryRows, W = C::kWidth, kMaxRows = kWarps * R;
  __shared__ float q_tile[kMaxRows * W];       // the block's q rows
  __shared__ float g_tile[kMaxRows * W];       // and their dO rows
  __shared__ float kv_tile[C::kTileFloats];    // a key tile's k rows and v rows (or v, then k)
  __shared__ float ds_tile[kMaxRows * kTile];  // dS of each row for the tile's keys
  __shared__ int32_t seg_tile[kTile];
  __shared__ int slots[2 * kWarp];
  const auto hd = head_of(qkv, seg, T, NH, NH, KVH, HS);
  const int kvh = hd.h / (NH / KVH), lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows = blockDim.x / kWarp * R, r0 = blockIdx.x * rows, r1 = min(T, r0 + rows), wr0 = r0 + warp * R;
  const int OC = NH * HS;
  float* k_tile = kv_tile;
  float* v_tile = C::kBothTiles ? kv_tile + kTile * C::kStride : kv_tile;
  load_rows<Io>(q_tile, W, hd.rows + static_cast<size_t>(r0) * hd.QKV + hd.h * HS, hd.QKV, r1 - r0, rows, HS);
  load_rows<Io>(g_tile, W, dout + (static_cast<size_t>(hd.b) * T + r0) * OC + hd.h * HS, OC, r1 - r0, rows, HS);
  int32_t seg_t[R];
  float lse_t[R], delta_t[R], dq[R][S];
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) {
    const int t = wr0 + r;
    const size_t bht = (static_cast<size_t>(hd.b) * NH + hd.h) * T + t;
    seg_t[r] = hd.seg_row && t < T ? hd.seg_row[t] : 0;
    lse_t[r] = t < T ? lse[bht] : 0.f, delta_t[r] = t < T ? delta[bht] : 0.f;
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s) dq[r][s] = 0.f;
  }
  const auto* k_rows = hd.rows + static_cast<size_t>(NH + kvh) * HS;
  const auto* v_rows = hd.rows + static_cast<size_t>(NH + KVH + kvh) * HS;
  for (int c0 = 0, call = 0; c0 < r1; c0 += kTile, ++call) {
    const int n = min(kTile, T - c0);
    if (!block_any_visible(call, r0, r1, c0, c0 + n, hd.seg_row, slots)) continue;
    load_rows<Io>(v_tile, C::kStride, v_rows + static_cast<size_t>(c0) * hd.QKV, hd.QKV, n, n, HS);
    if constexpr (C::kBothTiles)
      load_rows<Io>(k_tile, C::kStride, k_rows + static_cast<size_t>(c0) * hd.QKV, hd.QKV, n, n, HS);
    load_segments(seg_tile, hd.seg_row, c0, n);
    __syncthreads();
    float dp[R], dot[R];
    lane_dots(dp, g_tile + warp * R * W, W, v_tile + lane * C::kStride, lane < n, HS);  // dO_t·v_j, j = c0 + lane
    if constexpr (!C::kBothTiles) {
      __syncthreads();  // every warp is done with the v rows
      load_rows<Io>(k_tile, C::kStride, k_rows + static_cast<size_t>(c0) * hd.QKV, hd.QKV, n, n, HS);
      __syncthreads();
    }
    lane_dots(dot, q_tile + warp * R * W, W, k_tile + lane * C::kStride, lane < n, HS);  // q_t·k_j
    int jn[R];  // row r may see keys c0 + [0, jn) (and of them those of its segment)
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) {
      const int t = wr0 + r;
      jn[r] = t < T ? min(n, t - c0 + 1) : 0;
      const bool v = lane < jn[r] && seg_tile[lane] == seg_t[r];
      const float p = v ? expf(hd.scale * dot[r] - lse_t[r]) : 0.f;
      ds_tile[(warp * R + r) * kTile + lane] = v ? p * (dp[r] - delta_t[r]) * hd.scale : 0.f;
    }
    __syncwarp();  // the warp's dS rows are written
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r)
      add_weighted_rows<S>(dq[r], 0, jn[r], seg_tile, seg_t[r], ds_tile + (warp * R + r) * kTile, k_tile, lane, HS);
  }
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) {
    const int t = wr0 + r;
    if (t >= T) continue;
    auto* d = dqkv + (static_cast<size_t>(hd.b) * T + t) * hd.QKV + hd.h * HS;
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s)
      if (s * kWarp + lane < HS) d[s * kWarp + lane] = output<typename C::Out>(dq[r][s]);
  }
}

// dk, dv of key row j of k/v head kvh: grid (ceil(T / Br), B·KVH), block warps·32 (Br key rows, row
// j = c0 + warp·R + r). Query tiles of 32 queries (lane i: query t0 + i): q rows and dO rows at once
// up to S = 4, else q, then dO, then q again.
template <class C>
__global__ void attention_bwd_dkv_kernel(typename C::Out* dqkv, const float* delta, const typename C::In* dout,
                                         const typename C::In* qkv, const float* lse, const int32_t* seg, int T,
                                         int NH, int KVH, int HS) {
  using Io = typename C::Io;
  constexpr int S = C::S, R = C::kKeyRows, W = C::kWidth, kMaxRows = kWarps * R;
  __shared__ float k_tile[kMaxRows * W];     // the block's k rows
  __shared__ float v_tile[kMaxRows * W];     // and v rows
  __shared__ float qg_tile[C::kTileFloats];  // a query tile's q rows and dO rows (or q, dO, q)
  __shared__ float p_tile[kMaxRows * kTile], ds_tile[kMaxRows * kTile];  // P, dS of each key row
  __shared__ int32_t seg_tile[kTile];
  __shared__ int slots[2 * kWarp];
  const auto hd = head_of(qkv, seg, T, KVH, NH, KVH, HS);
  const int kvh = hd.h, G = NH / KVH, OC = NH * HS, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows = blockDim.x / kWarp * R, c0 = blockIdx.x * rows, c1 = min(T, c0 + rows), wc0 = c0 + warp * R;
  float* q_tile = qg_tile;
  float* g_tile = C::kBothTiles ? qg_tile + kTile * C::kStride : qg_tile;
  load_rows<Io>(k_tile, W, hd.rows + static_cast<size_t>(c0) * hd.QKV + (NH + kvh) * HS, hd.QKV, c1 - c0, rows, HS);
  load_rows<Io>(v_tile, W, hd.rows + static_cast<size_t>(c0) * hd.QKV + (NH + KVH + kvh) * HS, hd.QKV, c1 - c0, rows,
                   HS);
  int32_t seg_c[R];
  float dk[R][S], dv[R][S];
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) {
    seg_c[r] = hd.seg_row && wc0 + r < T ? hd.seg_row[wc0 + r] : 0;
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s) dk[r][s] = dv[r][s] = 0.f;  // (overwritten by the first head's sums)
  }
  int call = 0;
  for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
    float hk[R][S], hv[R][S];
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) {
      SFTDP_UNROLL
      for (int s = 0; s < S; ++s) hk[r][s] = hv[r][s] = 0.f;
    }
    const float* lse_h = lse + (static_cast<size_t>(hd.b) * NH + h) * T;
    const float* delta_h = delta + (static_cast<size_t>(hd.b) * NH + h) * T;
    const auto* q_rows = hd.rows + static_cast<size_t>(h) * HS;
    const auto* g_rows = dout + static_cast<size_t>(hd.b) * T * OC + static_cast<size_t>(h) * HS;
    for (int t0 = c0 / kTile * kTile; t0 < T; t0 += kTile, ++call) {  // from the query tile holding key c0
      const int n = min(kTile, T - t0), t = t0 + lane;                // lane's query
      if (!block_any_visible(call, t0, t0 + n, c0, c1, hd.seg_row, slots)) continue;
      load_rows<Io>(q_tile, C::kStride, q_rows + static_cast<size_t>(t0) * hd.QKV, hd.QKV, n, n, HS);
      if constexpr (C::kBothTiles)
        load_rows<Io>(g_tile, C::kStride, g_rows + static_cast<size_t>(t0) * OC, OC, n, n, HS);
      load_segments(seg_tile, hd.seg_row, t0, n);
      const float lse_i = lane < n ? lse_h[t] : 0.f, delta_i = lane < n ? delta_h[t] : 0.f;
      __syncthreads();
      float p[R], dot[R];
      int i0[R];  // key row r is seen by queries t0 + [i0, n) (and of them those of its segment)
      bool v[R];
      lane_dots(dot, k_tile + warp * R * W, W, q_tile + lane * C::kStride, lane < n, HS);  // k_j·q_t
      SFTDP_UNROLL
      for (int r = 0; r < R; ++r) {
        const int j = wc0 + r;
        i0[r] = j < T ? max(0, j - t0) : n;
        v[r] = lane >= i0[r] && lane < n && seg_tile[lane] == seg_c[r];
        p[r] = v[r] ? expf(hd.scale * dot[r] - lse_i) : 0.f;
      }
      if constexpr (!C::kBothTiles) {
        __syncthreads();  // every warp is done with the q rows
        load_rows<Io>(g_tile, C::kStride, g_rows + static_cast<size_t>(t0) * OC, OC, n, n, HS);
        __syncthreads();
      }
      lane_dots(dot, v_tile + warp * R * W, W, g_tile + lane * C::kStride, lane < n, HS);  // v_j·dO_t
      SFTDP_UNROLL
      for (int r = 0; r < R; ++r) {
        p_tile[(warp * R + r) * kTile + lane] = p[r];
        ds_tile[(warp * R + r) * kTile + lane] = v[r] ? p[r] * (dot[r] - delta_i) * hd.scale : 0.f;
      }
      __syncwarp();  // the warp's P and dS rows are written
      SFTDP_UNROLL
      for (int r = 0; r < R; ++r)
        add_weighted_rows<S>(hv[r], i0[r], n, seg_tile, seg_c[r], p_tile + (warp * R + r) * kTile, g_tile, lane, HS);
      if constexpr (!C::kBothTiles) {
        __syncthreads();  // every warp is done with the dO rows
        load_rows<Io>(q_tile, C::kStride, q_rows + static_cast<size_t>(t0) * hd.QKV, hd.QKV, n, n, HS);
        __syncthreads();
      }
      SFTDP_UNROLL
      for (int r = 0; r < R; ++r)
        add_weighted_rows<S>(hk[r], i0[r], n, seg_tile, seg_c[r], ds_tile + (warp * R + r) * kTile, q_tile, lane, HS);
    }
    SFTDP_UNROLL
    for (int r = 0; r < R; ++r) {  // this head's sums, complete: into the total, in increasing h
      SFTDP_UNROLL
      for (int s = 0; s < S; ++s) {
        dk[r][s] = h == kvh * G ? hk[r][s] : dk[r][s] + hk[r][s];
        dv[r][s] = h == kvh * G ? hv[r][s] : dv[r][s] + hv[r][s];
      }
    }
  }
  SFTDP_UNROLL
  for (int r = 0; r < R; ++r) {
    const int j = wc0 + r;
    if (j >= T) continue;
    auto* d = dqkv + (static_cast<size_t>(hd.b) * T + j) * hd.QKV;
    SFTDP_UNROLL
    for (int s = 0; s < S; ++s) {
      const int i = s * kWarp + lane;
      if (i >= HS) continue;
      d[(NH + kvh) * HS + i] = output<typename C::Out>(dk[r][s]);
      d[(NH + KVH + kvh) * HS + i] = output<typename C::Out>(dv[r][s]);
    }
  }
}

void check_dims(const char* op, int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && NH % KVH == 0 && HS > 0 && HS <= kMaxHS,
               std::string(op) + ": need B >= 0, T > 0, 0 < HS <= 256 and NH a positive multiple of KVH (got B=" +
                   std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                   " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
  SFTDP_ASSERT(static_cast<int64_t>(B) * NH <= 65535, std::string(op) + ": B·NH exceeds gridDim.y (65535)");
}

// f(integral_constant<S>) for the slices HS needs: 32·S >= HS.
template <class F>
void with_slices(int HS, F f) {
  if (HS <= 32) return f(std::integral_constant<int, 1>{});
  if (HS <= 64) return f(std::integral_constant<int, 2>{});
  if (HS <= 128) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

template <class Io>
void forward(typename Io::Out* out, float* lse, const typename Io::In* qkv, const int32_t* seg, int B, int T, int NH,
             int KVH, int HS, cudaStream_t stream) {
  check_dims("attention_fwd", B, T, NH, KVH, HS);
  if (B == 0) return;
  with_slices(HS, [&](auto slices) {
    using Cfg = Config<Io, decltype(slices)::value>;
    const int warps = block_warps(T, Cfg::kQueryRows);
    const dim3 grid(static_cast<unsigned>(ceil_div(T, warps * Cfg::kQueryRows)), static_cast<unsigned>(B * NH));
    SFTDP_LAUNCH(attention_fwd_kernel<Cfg>, grid, warps * kWarp, 0, stream, out, lse, qkv, seg, T, NH, KVH, HS);
    CHECK_LAUNCH();
  });
}

template <class Io>
void backward(typename Io::Out* dqkv, const typename Io::In* dout, const typename Io::In* qkv,
              const typename Io::In* out, const float* lse, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  check_dims("attention_bwd", B, T, NH, KVH, HS);
  if (B == 0) return;
  const size_t rows_bht = static_cast<size_t>(B) * NH * T;
  float* delta = scratch_as<float>(Scratch::kAttnDelta, rows_bht);
  constexpr int kBlock = 256;
  SFTDP_LAUNCH(attention_bwd_delta_kernel<Io>, elementwise_blocks(rows_bht, kBlock), kBlock, 0, stream, delta, dout,
               out, B, T, NH, HS);
  CHECK_LAUNCH();
  with_slices(HS, [&](auto slices) {
    using Cfg = Config<Io, decltype(slices)::value>;
    const int q_warps = block_warps(T, Cfg::kQueryRows), k_warps = block_warps(T, Cfg::kKeyRows);
    const dim3 q_grid(static_cast<unsigned>(ceil_div(T, q_warps * Cfg::kQueryRows)), static_cast<unsigned>(B * NH));
    SFTDP_LAUNCH(attention_bwd_dq_kernel<Cfg>, q_grid, q_warps * kWarp, 0, stream, dqkv, delta, dout, qkv, lse, seg, T,
                 NH, KVH, HS);
    CHECK_LAUNCH();
    const dim3 k_grid(static_cast<unsigned>(ceil_div(T, k_warps * Cfg::kKeyRows)), static_cast<unsigned>(B * KVH));
    SFTDP_LAUNCH(attention_bwd_dkv_kernel<Cfg>, k_grid, k_warps * kWarp, 0, stream, dqkv, delta, dout, qkv, lse, seg, T,
                 NH, KVH, HS);
    CHECK_LAUNCH();
  });
}

}  // namespace

void attention_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
                   cudaStream_t stream) {
  forward<Fp32Io>(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  backward<Fp32Io>(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
}

void attention_fwd_bf16(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                        int HS, cudaStream_t stream) {
  forward<RoundedIo>(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
}

void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  backward<RoundedIo>(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
}

void act16::attention_fwd_cuda_cores(uint16_t* out, float* lse, const uint16_t* qkv, const int32_t* seg, int B, int T,
                                     int NH, int KVH, int HS, cudaStream_t stream) {
  forward<Bf16Io>(reinterpret_cast<bf16*>(out), lse, reinterpret_cast<const bf16*>(qkv), seg, B, T, NH, KVH, HS,
                  stream);
}

void act16::attention_bwd_cuda_cores(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                                     const float* lse, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
                                     cudaStream_t stream) {
  backward<Bf16Io>(reinterpret_cast<bf16*>(dqkv), reinterpret_cast<const bf16*>(dout),
                   reinterpret_cast<const bf16*>(qkv), reinterpret_cast<const bf16*>(out), lse, seg, B, T, NH, KVH, HS,
                   stream);
}

}  // namespace sftdp::cuda
