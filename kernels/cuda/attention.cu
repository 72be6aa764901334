// kernels/cuda/attention.cu — causal grouped-query attention with the segment mask on the GPU
// (kernels/attention.h), FlashAttention-2's contract: the forward keeps the output and each row's
// log-sum-exp, the backward recomputes the scores. Legend: B batch, T seq, NH query heads, KVH k/v
// heads, HS head size (<= 256), G = NH/KVH, QKV = (NH + 2·KVH)·HS; Bq query rows per block (one
// thread each), Bk key rows per shared-memory tile (Bk·HS·2 floats <= kTileFloats: 16 keys at HS
// 256, 64 at HS <= 64). The scores never exist beyond one thread's current key.
// Forward, per (b, h, query tile): key tiles [c0, c0 + Bk) for c0 below the tile's last row (the
// causal triangle beyond it is skipped), tiles no row of the block may see (other segments)
// skipped too; each thread keeps its q row, an online softmax (max m, sum l) and its output row,
// keys visited in increasing order. lse = m + log l.
// Backward, three kernels, no atomics: D[b,h,t] = Σ dO·O per row (FlashAttention-2's Σ_j P·dP);
// dq per query row over key tiles in increasing order; dk and dv per key row, over the k/v head's G query
// heads in increasing h and each head's query tiles in increasing order, a head's sums added to
// the total once complete (the multi-head result on repeated k/v, summed as repeat_kv's
// transpose). P = exp(s − lse), dP = dO·v, dS = P·(dP − D); every sum's order is fixed by the
// shape, so the bits are the same on every run. Accumulation: out =, lse =, dqkv =.
// bf16 inputs (the kBf16 instances, Ops table cuda-bf16): q, k, v and dO are rounded to bf16 as
// they are read (to nearest even, as the GEMMs' copies), everything else as fp32: the fp32
// attention of the rounded inputs, and D = Σ bf16(dO)·O.
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kMaxHS = 256;
constexpr int kBq = 64;            // query (or key) rows per block: one thread each
constexpr int kTileFloats = 8192;  // shared tile: two (rows, HS) fp32 matrices, 32 KiB
__host__ __device__ inline int tile_rows(int HS) { return kTileFloats / (2 * HS) < 64 ? kTileFloats / (2 * HS) : 64; }

// An input element as attention reads it: itself, or rounded to bf16 (and widened back exactly).
template <bool kBf16>
__device__ __forceinline__ float input(float x) {
  if constexpr (kBf16) return __bfloat162float(__float2bfloat16_rn(x));
  return x;
}

// May row t (seg_t its id) attend to key t2 of the same batch row?
__device__ __forceinline__ bool visible(int t2, int t, const int32_t* seg_row, int32_t seg_t) {
  return t2 <= t && (seg_row == nullptr || seg_row[t2] == seg_t);
}

// 1 when any row of [t_begin, t_end) may see any key of [k_begin, k_end) (the tiles' ranges are
// clipped to T): a block-wide, uniform answer that lets the whole block skip a tile.
__device__ int block_any_visible(int t, bool active, int k_begin, int k_end, const int32_t* seg_row, int* flag) {
  __syncthreads();  // the previous tile's readers are done with `flag`
  if (threadIdx.x == 0) *flag = 0;
  __syncthreads();
  if (active) {
    const int32_t seg_t = seg_row ? seg_row[t] : 0;
    for (int t2 = k_begin; t2 < k_end && t2 <= t; ++t2)
      if (visible(t2, t, seg_row, seg_t)) {
        *flag = 1;  // every writer writes 1
        break;
      }
  }
  __syncthreads();
  return *flag;
}

// Loads rows [c0, c0 + n) of two HS-wide slices of qkv-like rows (row stride `ld`) into tile (n, HS) x 2.
template <bool kBf16>
__device__ void load_tile(float* tile, const float* a, const float* b, int ld, int c0, int n, int HS) {
  for (int idx = threadIdx.x; idx < n * HS; idx += blockDim.x) {
    const int r = idx / HS, i = idx % HS;
    tile[idx] = input<kBf16>(a[static_cast<size_t>(c0 + r) * ld + i]);
    tile[n * HS + idx] = input<kBf16>(b[static_cast<size_t>(c0 + r) * ld + i]);
  }
}

__device__ __forceinline__ float dot(const float* x, const float* y, int HS) {
  float s = 0.f;
  for (int i = 0; i < HS; ++i) s += x[i] * y[i];
  return s;
}

// One query row per thread of a (ceil(T / kBq), B·NH) grid: what the forward and dq kernels share.
struct QueryRow {
  int b, h, kvh, QKV, r1, t;  // batch row, query head, its k/v head, qkv width, block's row end, row
  bool active;                // t < T (the last block's extra threads still join every barrier)
  const float* rows;          // qkv of batch row b
  const int32_t* seg_row;     // its segment ids, or null
  int32_t seg_t;
  float scale;  // 1/sqrt(HS)
};
__device__ QueryRow query_row(const float* qkv, const int32_t* seg, int T, int NH, int KVH, int HS) {
  QueryRow r;
  r.b = blockIdx.y / NH, r.h = blockIdx.y % NH, r.kvh = r.h / (NH / KVH);
  r.QKV = (NH + 2 * KVH) * HS;
  const int r0 = blockIdx.x * kBq;
  r.r1 = min(T, r0 + kBq), r.t = r0 + threadIdx.x, r.active = r.t < T;
  r.rows = qkv + static_cast<size_t>(r.b) * T * r.QKV;
  r.seg_row = seg ? seg + static_cast<size_t>(r.b) * T : nullptr;
  r.seg_t = r.seg_row && r.active ? r.seg_row[r.t] : 0;
  r.scale = 1.f / sqrtf(static_cast<float>(HS));
  return r;
}

// f(k, v) for every key row t may see, in increasing order: key tiles up to the block's last row
// through shared memory (`tile`, kTileFloats), a tile no row of the block may see skipped.
template <bool kBf16, class F>
__device__ void for_each_visible_key(const QueryRow& r, float* tile, int* flag, int T, int NH, int KVH, int HS, F f) {
  const int Bk = tile_rows(HS);
  for (int c0 = 0; c0 < r.r1; c0 += Bk) {
    const int n = min(Bk, T - c0);
    if (!block_any_visible(r.t, r.active, c0, c0 + n, r.seg_row, flag)) continue;  // (its barrier first)
    load_tile<kBf16>(tile, r.rows + (NH + r.kvh) * HS, r.rows + (NH + KVH + r.kvh) * HS, r.QKV, c0, n, HS);
    __syncthreads();
    if (r.active)
      for (int j = 0; j < n; ++j)
        if (visible(c0 + j, r.t, r.seg_row, r.seg_t)) f(tile + j * HS, tile + n * HS + j * HS);
  }
}

// grid (ceil(T / kBq), B·NH), block kBq.
template <bool kBf16>
__global__ void attention_fwd_kernel(float* out, float* lse, const float* qkv, const int32_t* seg, int T, int NH,
                                     int KVH, int HS) {
  __shared__ float tile[kTileFloats];
  __shared__ int flag;
  const QueryRow r = query_row(qkv, seg, T, NH, KVH, HS);
  float q[kMaxHS], acc[kMaxHS];
  for (int i = 0; i < HS; ++i) {
    q[i] = r.active ? input<kBf16>(r.rows[static_cast<size_t>(r.t) * r.QKV + r.h * HS + i]) : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for_each_visible_key<kBf16>(r, tile, &flag, T, NH, KVH, HS, [&](const float* k, const float* v) {
    const float s = r.scale * dot(q, k, HS);
    if (s > m) {  // rescale what was summed so far to the new max
      const float shrink = expf(m - s);
      l *= shrink;
      for (int i = 0; i < HS; ++i) acc[i] *= shrink;
      m = s;
    }
    const float p = expf(s - m);
    l += p;
    for (int i = 0; i < HS; ++i) acc[i] += p * v[i];
  });
  if (!r.active) return;
  const float inv = 1.f / l;  // l >= 1: t always sees itself
  float* o = out + (static_cast<size_t>(r.b) * T + r.t) * NH * HS + r.h * HS;
  for (int i = 0; i < HS; ++i) o[i] = acc[i] * inv;
  lse[(static_cast<size_t>(r.b) * NH + r.h) * T + r.t] = m + logf(l);
}

// D[b,h,t] = Σ_i dO[b,t,h,i]·O[b,t,h,i]: one thread per (b, h, t), i in increasing order.
template <bool kBf16>
__global__ void attention_bwd_delta_kernel(float* delta, const float* dout, const float* out, int B, int T, int NH,
                                           int HS) {
  const size_t n = static_cast<size_t>(B) * NH * T;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = idx % T, h = idx / T % NH, b = idx / (static_cast<size_t>(T) * NH);
    const size_t at = (b * T + t) * NH * HS + h * HS;
    float s = 0.f;
    for (int i = 0; i < HS; ++i) s += input<kBf16>(dout[at + i]) * out[at + i];
    delta[idx] = s;
  }
}

// dq row t = scale·Σ_j dS·k_j, dS = P·(dP − D): grid (ceil(T / kBq), B·NH), block kBq, as forward.
template <bool kBf16>
__global__ void attention_bwd_dq_kernel(float* dqkv, const float* delta, const float* dout, const float* qkv,
                                        const float* lse, const int32_t* seg, int T, int NH, int KVH, int HS) {
  __shared__ float tile[kTileFloats];
  __shared__ int flag;
  const QueryRow r = query_row(qkv, seg, T, NH, KVH, HS);
  const size_t bht = (static_cast<size_t>(r.b) * NH + r.h) * T + r.t;
  float q[kMaxHS], g[kMaxHS], dq[kMaxHS];
  for (int i = 0; i < HS; ++i) {
    q[i] = r.active ? input<kBf16>(r.rows[static_cast<size_t>(r.t) * r.QKV + r.h * HS + i]) : 0.f;
    g[i] = r.active ? input<kBf16>(dout[(static_cast<size_t>(r.b) * T + r.t) * NH * HS + r.h * HS + i]) : 0.f;
    dq[i] = 0.f;
  }
  const float l = r.active ? lse[bht] : 0.f, D = r.active ? delta[bht] : 0.f;
  for_each_visible_key<kBf16>(r, tile, &flag, T, NH, KVH, HS, [&](const float* k, const float* v) {
    const float p = expf(r.scale * dot(q, k, HS) - l);
    const float ds = p * (dot(g, v, HS) - D) * r.scale;
    for (int i = 0; i < HS; ++i) dq[i] += ds * k[i];
  });
  if (!r.active) return;
  float* d = dqkv + (static_cast<size_t>(r.b) * T + r.t) * r.QKV + r.h * HS;
  for (int i = 0; i < HS; ++i) d[i] = dq[i];
}

// dk, dv of key row j of k/v head kvh: grid (ceil(T / kBq), B·KVH), block kBq (one key row each).
template <bool kBf16>
__global__ void attention_bwd_dkv_kernel(float* dqkv, const float* delta, const float* dout, const float* qkv,
                                         const float* lse, const int32_t* seg, int T, int NH, int KVH, int HS) {
  __shared__ float tile[kTileFloats];  // q rows, then dO rows, of one query tile
  __shared__ float tile_lse[kBq], tile_delta[kBq];
  __shared__ int flag;
  const int b = blockIdx.y / KVH, kvh = blockIdx.y % KVH, G = NH / KVH;
  const int QKV = (NH + 2 * KVH) * HS, OC = NH * HS, c0 = blockIdx.x * kBq;
  const int j = c0 + threadIdx.x, Bt = tile_rows(HS);
  const bool active = j < T;
  const float* rows = qkv + static_cast<size_t>(b) * T * QKV;
  const int32_t* seg_row = seg ? seg + static_cast<size_t>(b) * T : nullptr;
  const int32_t seg_j = seg_row && active ? seg_row[j] : 0;
  const float scale = 1.f / sqrtf(static_cast<float>(HS));
  float k[kMaxHS], v[kMaxHS], dk[kMaxHS], dv[kMaxHS], hk[kMaxHS], hv[kMaxHS];
  for (int i = 0; i < HS; ++i) {
    k[i] = active ? input<kBf16>(rows[static_cast<size_t>(j) * QKV + (NH + kvh) * HS + i]) : 0.f;
    v[i] = active ? input<kBf16>(rows[static_cast<size_t>(j) * QKV + (NH + KVH + kvh) * HS + i]) : 0.f;
    dk[i] = dv[i] = 0.f;
  }
  for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
    for (int i = 0; i < HS; ++i) hk[i] = hv[i] = 0.f;
    const float* lse_h = lse + (static_cast<size_t>(b) * NH + h) * T;
    const float* delta_h = delta + (static_cast<size_t>(b) * NH + h) * T;
    for (int t0 = c0 / Bt * Bt; t0 < T; t0 += Bt) {  // query tiles from the one holding the block's first key
      const int n = min(Bt, T - t0);
      // Does any query of [t0, t0 + n) see any key of this block? (Asked from the keys' side.)
      __syncthreads();
      if (threadIdx.x == 0) flag = 0;
      __syncthreads();
      if (active)
        for (int t = max(t0, j); t < t0 + n; ++t)
          if (!seg_row || seg_row[t] == seg_j) {
            flag = 1;
            break;
          }
      __syncthreads();
      if (!flag) continue;
      for (int idx = threadIdx.x; idx < n * HS; idx += blockDim.x) {  // q rows (stride QKV), dO rows (stride OC)
        const int r = idx / HS, i = idx % HS;
        tile[idx] = input<kBf16>(rows[static_cast<size_t>(t0 + r) * QKV + h * HS + i]);
        tile[n * HS + idx] = input<kBf16>(dout[(static_cast<size_t>(b) * T + t0 + r) * OC + h * HS + i]);
      }
      for (int r = threadIdx.x; r < n; r += blockDim.x) {
        tile_lse[r] = lse_h[t0 + r];
        tile_delta[r] = delta_h[t0 + r];
      }
      __syncthreads();
      if (active) {
        for (int r = 0; r < n; ++r) {
          const int t = t0 + r;
          if (t < j || (seg_row && seg_row[t] != seg_j)) continue;
          const float* qt = tile + r * HS;
          const float* gt = tile + n * HS + r * HS;
          const float p = expf(scale * dot(qt, k, HS) - tile_lse[r]);
          const float ds = p * (dot(gt, v, HS) - tile_delta[r]) * scale;
          for (int i = 0; i < HS; ++i) {
            hk[i] += ds * qt[i];
            hv[i] += p * gt[i];
          }
        }
      }
    }
    for (int i = 0; i < HS; ++i) {  // this head's sums, complete: into the total, in increasing h
      dk[i] = h == kvh * G ? hk[i] : dk[i] + hk[i];
      dv[i] = h == kvh * G ? hv[i] : dv[i] + hv[i];
    }
  }
  if (!active) return;
  float* d = dqkv + (static_cast<size_t>(b) * T + j) * QKV;
  for (int i = 0; i < HS; ++i) {
    d[(NH + kvh) * HS + i] = dk[i];
    d[(NH + KVH + kvh) * HS + i] = dv[i];
  }
}

void check_dims(const char* op, int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && NH % KVH == 0 && HS > 0 && HS <= kMaxHS,
               std::string(op) + ": need B >= 0, T > 0, 0 < HS <= 256 and NH a positive multiple of KVH (got B=" +
                   std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                   " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
  SFTDP_ASSERT(static_cast<int64_t>(B) * NH <= 65535, std::string(op) + ": B·NH exceeds gridDim.y (65535)");
}

template <bool kBf16>
void forward(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
             cudaStream_t stream) {
  check_dims("attention_fwd", B, T, NH, KVH, HS);
  if (B == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(T, kBq)), static_cast<unsigned>(B * NH));
  SFTDP_LAUNCH(attention_fwd_kernel<kBf16>, grid, kBq, 0, stream, out, lse, qkv, seg, T, NH, KVH, HS);
  CHECK_LAUNCH();
}

template <bool kBf16>
void backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, const int32_t* seg,
              int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  check_dims("attention_bwd", B, T, NH, KVH, HS);
  if (B == 0) return;
  const size_t rows_bht = static_cast<size_t>(B) * NH * T;
  float* delta = scratch_as<float>(Scratch::kAttnDelta, rows_bht);
  constexpr int kBlock = 256;
  SFTDP_LAUNCH(attention_bwd_delta_kernel<kBf16>, elementwise_blocks(rows_bht, kBlock), kBlock, 0, stream, delta, dout,
               out, B, T, NH, HS);
  CHECK_LAUNCH();
  const dim3 rows(static_cast<unsigned>(ceil_div(T, kBq)), static_cast<unsigned>(B * NH));
  SFTDP_LAUNCH(attention_bwd_dq_kernel<kBf16>, rows, kBq, 0, stream, dqkv, delta, dout, qkv, lse, seg, T, NH, KVH, HS);
  CHECK_LAUNCH();
  const dim3 keys(static_cast<unsigned>(ceil_div(T, kBq)), static_cast<unsigned>(B * KVH));
  SFTDP_LAUNCH(attention_bwd_dkv_kernel<kBf16>, keys, kBq, 0, stream, dqkv, delta, dout, qkv, lse, seg, T, NH, KVH, HS);
  CHECK_LAUNCH();
}

}  // namespace

void attention_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
                   cudaStream_t stream) {
  forward<false>(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  backward<false>(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
}

void attention_fwd_bf16(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                        int HS, cudaStream_t stream) {
  forward<true>(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
}

void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  backward<true>(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
}

}  // namespace sftdp::cuda
