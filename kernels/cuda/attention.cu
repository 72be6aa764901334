// kernels/cuda/attention.cu — causal grouped-query attention with the segment mask on the GPU
// (kernels/attention.h). B batch, T seq, NH query heads, KVH key/value heads, HS head size,
// G = NH/KVH query heads per k/v head, QKV = (NH + 2·KVH)·HS. q, k, v are split into (B,NH,T,HS)
// scratch tensors, k and v repeated G times (query head h reads k/v head h / G), so the scores and
// products are cuBLASLt strided-batched fp32 GEMMs with one batch entry per (b,h) as for
// multi-head attention; the masked softmax and its backward are warp-per-row kernels. Masked
// probabilities are exactly 0. Accumulation: dqkv = (overwritten; the dk/dv of a k/v head sum its
// G query heads in increasing h, in one thread per element: no atomics); datt is scratch (dP,
// then dS).
#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/gemm.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;  // elementwise kernels
constexpr int kRowBlock = 256;  // softmax kernels: 8 warps = 8 rows per block

// dst[b,h,t,d] = src[(b·T + t)·row_stride + (h / group)·HS + d]: splits heads out of a (B,T,·)
// tensor, each source head repeated for `group` consecutive destination heads (k/v under GQA).
__global__ void split_heads_kernel(float* dst, const float* src, int row_stride, int B, int T, int NH, int HS,
                                   int group) {
  const size_t total = static_cast<size_t>(B) * NH * T * HS;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t d = i % HS, t = (i / HS) % T, h = (i / (static_cast<size_t>(HS) * T)) % NH;
    const size_t b = i / (static_cast<size_t>(HS) * T * NH);
    dst[i] = src[(b * T + t) * row_stride + (h / group) * HS + d];
  }
}

// Merges the (B,NH,T,HS) src back into OH = NH/group heads of a (B,T,·) tensor:
// dst[(b·T + t)·row_stride + o·HS + d] = Σ_{h = o·group .. o·group + group − 1} src[b,h,t,d], the
// terms added in increasing h by one thread (group = 1: a plain copy).
__global__ void merge_heads_kernel(float* dst, const float* src, int row_stride, int B, int T, int NH, int HS,
                                   int group) {
  const size_t C = static_cast<size_t>(NH / group) * HS;
  const size_t total = static_cast<size_t>(B) * T * C;
  const size_t head_stride = static_cast<size_t>(T) * HS;  // between src heads h and h + 1
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t c = i % C, bt = i / C;
    const size_t b = bt / T, t = bt % T, o = c / HS, d = c % HS;
    const float* s = src + ((b * NH + o * group) * T + t) * HS + d;
    float acc = s[0];
    for (int r = 1; r < group; ++r) acc += s[r * head_stride];
    dst[bt * row_stride + c] = acc;
  }
}

// Position t of batch row b may attend to t2 when t2 <= t and (no seg or seg[t2] == seg[t]).
__device__ __forceinline__ bool visible(int t2, int t, const int32_t* seg_row, int32_t seg_t) {
  return t2 <= t && (seg_row == nullptr || seg_row[t2] == seg_t);
}

// In place over rows of att (B,NH,T,T) holding scaled scores: softmax over the visible entries,
// exactly 0 elsewhere. One warp per row; the max and sum are butterfly reductions (fixed order).
__global__ void masked_softmax_kernel(float* att, const int32_t* seg, int rows, int T, int NH) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = row % T, b = row / (T * NH);
  float* s = att + static_cast<size_t>(row) * T;
  const int32_t* seg_row = seg ? seg + static_cast<size_t>(b) * T : nullptr;
  const int32_t seg_t = seg_row ? seg_row[t] : 0;
  float mx = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += kWarp)
    if (visible(t2, t, seg_row, seg_t)) mx = fmaxf(mx, s[t2]);
  mx = warp_max(mx);
  float sum = 0.f;
  for (int t2 = lane; t2 <= t; t2 += kWarp)
    if (visible(t2, t, seg_row, seg_t)) sum += expf(s[t2] - mx);
  const float inv_sum = 1.f / warp_sum(sum);  // >= 1 term: t itself is always visible
  for (int t2 = lane; t2 < T; t2 += kWarp) s[t2] = visible(t2, t, seg_row, seg_t) ? expf(s[t2] - mx) * inv_sum : 0.f;
}

// In place over rows of datt (holding dP): dS = P·(dP − Σ P·dP); exactly 0 where P is 0.
__global__ void softmax_bwd_kernel(float* datt, const float* att, int rows, int T) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = row % T;
  const float* p = att + static_cast<size_t>(row) * T;
  float* d = datt + static_cast<size_t>(row) * T;
  float dot = 0.f;
  for (int t2 = lane; t2 <= t; t2 += kWarp) dot += p[t2] * d[t2];
  dot = warp_sum(dot);
  for (int t2 = lane; t2 < T; t2 += kWarp) {
    const float pv = t2 <= t ? p[t2] : 0.f;
    d[t2] = pv != 0.f ? pv * (d[t2] - dot) : 0.f;
  }
}

void split_heads(float* dst, const float* src, int row_stride, int B, int T, int NH, int HS, int group,
                 cudaStream_t stream) {
  const size_t total = static_cast<size_t>(B) * NH * T * HS;
  SFTDP_LAUNCH(split_heads_kernel, elementwise_blocks(total, kBlock), kBlock, 0, stream, dst, src, row_stride, B, T, NH,
               HS, group);
  CHECK_LAUNCH();
}

void merge_heads(float* dst, const float* src, int row_stride, int B, int T, int NH, int HS, int group,
                 cudaStream_t stream) {
  const size_t total = static_cast<size_t>(B) * T * (NH / group) * HS;
  SFTDP_LAUNCH(merge_heads_kernel, elementwise_blocks(total, kBlock), kBlock, 0, stream, dst, src, row_stride, B, T, NH,
               HS, group);
  CHECK_LAUNCH();
}

void check_dims(const char* op, int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && NH % KVH == 0 && HS > 0,
               std::string(op) + ": need B >= 0, T > 0, HS > 0 and NH a positive multiple of KVH (got B=" +
                   std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                   " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
  SFTDP_ASSERT(static_cast<int64_t>(B) * NH * T <= INT32_MAX, std::string(op) + ": B·NH·T exceeds 2^31 rows");
}

// Per-(b,h) strides of the (B,NH,T,HS) tensors and of the (B,NH,T,T) scores.
GemmBatch heads(int B, int NH, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  return GemmBatch{B * NH, stride_a, stride_b, stride_c};
}

}  // namespace

void attention_fwd(float* out, float* att, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                   int HS, cudaStream_t stream) {
  check_dims("attention_fwd", B, T, NH, KVH, HS);
  if (B == 0) return;
  const int G = NH / KVH, C = NH * HS, QKV = (NH + 2 * KVH) * HS;  // C: q and out row width
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
  const size_t BTC = static_cast<size_t>(B) * T * C;  // one (B,NH,T,HS) tensor
  const int64_t THS = static_cast<int64_t>(T) * HS, TT = static_cast<int64_t>(T) * T;
  float* q = scratch_as<float>(Scratch::kAttnQKV, 3 * BTC);
  float* k = q + BTC;
  float* v = k + BTC;
  split_heads(q, qkv, QKV, B, T, NH, HS, 1, stream);
  split_heads(k, qkv + C, QKV, B, T, NH, HS, G, stream);
  split_heads(v, qkv + C + KVH * HS, QKV, B, T, NH, HS, G, stream);
  // att[b,h] = scale · q[b,h] · k[b,h]ᵀ   (T,T)
  gemm(false, true, T, T, HS, scale, q, HS, k, HS, 0.f, att, T, nullptr, false, heads(B, NH, THS, THS, TT), stream);
  const int rows = B * NH * T;
  SFTDP_LAUNCH(masked_softmax_kernel, static_cast<unsigned>(ceil_div(rows, kRowBlock / kWarp)), kRowBlock, 0, stream,
               att, seg, rows, T, NH);
  CHECK_LAUNCH();
  // y[b,h] = att[b,h] · v[b,h]   (T,HS), then back to (B,T,NH·HS)
  float* y = scratch_as<float>(Scratch::kAttnY, BTC);
  gemm(false, false, T, HS, T, 1.f, att, T, v, HS, 0.f, y, HS, nullptr, false, heads(B, NH, TT, THS, THS), stream);
  merge_heads(out, y, C, B, T, NH, HS, 1, stream);
}

void attention_bwd(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                   int NH, int KVH, int HS, cudaStream_t stream) {
  check_dims("attention_bwd", B, T, NH, KVH, HS);
  if (B == 0) return;
  const int G = NH / KVH, C = NH * HS, QKV = (NH + 2 * KVH) * HS;
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const int64_t THS = static_cast<int64_t>(T) * HS, TT = static_cast<int64_t>(T) * T;
  float* q = scratch_as<float>(Scratch::kAttnQKV, 3 * BTC);
  float* k = q + BTC;
  float* v = k + BTC;
  float* dO = scratch_as<float>(Scratch::kAttnY, 4 * BTC);
  float* dq = dO + BTC;
  float* dk = dq + BTC;
  float* dv = dk + BTC;
  split_heads(q, qkv, QKV, B, T, NH, HS, 1, stream);
  split_heads(k, qkv + C, QKV, B, T, NH, HS, G, stream);
  split_heads(v, qkv + C + KVH * HS, QKV, B, T, NH, HS, G, stream);
  split_heads(dO, dout, C, B, T, NH, HS, 1, stream);
  // dP = dO · vᵀ (T,T) into datt;  dv = attᵀ · dO (T,HS)
  gemm(false, true, T, T, HS, 1.f, dO, HS, v, HS, 0.f, datt, T, nullptr, false, heads(B, NH, THS, THS, TT), stream);
  gemm(true, false, T, HS, T, 1.f, att, T, dO, HS, 0.f, dv, HS, nullptr, false, heads(B, NH, TT, THS, THS), stream);
  const int rows = B * NH * T;
  SFTDP_LAUNCH(softmax_bwd_kernel, static_cast<unsigned>(ceil_div(rows, kRowBlock / kWarp)), kRowBlock, 0, stream, datt,
               att, rows, T);
  CHECK_LAUNCH();
  // scores were scale·q·kᵀ:  dq = scale · dS · k;  dk = scale · dSᵀ · q
  gemm(false, false, T, HS, T, scale, datt, T, k, HS, 0.f, dq, HS, nullptr, false, heads(B, NH, TT, THS, THS),
       stream);
  gemm(true, false, T, HS, T, scale, datt, T, q, HS, 0.f, dk, HS, nullptr, false, heads(B, NH, TT, THS, THS),
       stream);
  // q heads copied; each k/v head sums the dk/dv of its G query heads (repeat_kv's transpose)
  merge_heads(dqkv, dq, QKV, B, T, NH, HS, 1, stream);
  merge_heads(dqkv + C, dk, QKV, B, T, NH, HS, G, stream);
  merge_heads(dqkv + C + KVH * HS, dv, QKV, B, T, NH, HS, G, stream);
}

}  // namespace sftdp::cuda
