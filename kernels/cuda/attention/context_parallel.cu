// kernels/cuda/attention/context_parallel.cu — context-parallel attention on the GPU (kernels/attention.h: this rank's
// Tq query rows at global positions qpos against Tk gathered keys and values), fp32 on CUDA cores, after
// kernels/cuda/kv_cache.cu's generation kernel: blocks of 128 threads, keys (or queries) in tiles of 128,
// one per thread for its score, head elements one or two per thread for the sums.
//   forward:          block (b, t, h): online softmax over the visible key tiles (running maximum and sum,
//                     block_max / block_sum trees), out and lse as attention_fwd's.
//   backward, dq:     block (b, t, h): D = Σ dO·O (a tree), then per key tile each thread's dS = P(dP − D)·scale
//                     into shared memory and dq[i] += Σ_j dS_j k_j[i] in key order.
//   backward, dk/dv:  block (b, j, kvh): the query tiles of this rank in order, for each query head of the
//                     group: P and dS of every (t, h) that sees key j (recomputed from q, k, the lse and D),
//                     then dk[i] += Σ_t dS q_t[i], dv[i] += Σ_t P dO_t[i].
// Every sum in an order fixed by the shape, no atomics: the same bits on every run. Keys a query cannot
// see (j > qpos[t], another segment) weigh 0. kRound (the cuda-bf16 table): q, k, v and dO rounded to bf16 as
// they are read, all else fp32 — the bf16 table's attention on CUDA cores (attention_fwd_bf16's contract), not its
// tensor-core kernels.
#include <cmath>
#include <string>

#include <cuda_bf16.h>

#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kThreads = 128;      // keys (or queries) per tile, threads per block
constexpr int kMaxHeadSize = 256;  // two head elements per thread

// An element of q, k, v or dO as the kernels read it: itself, or rounded to bf16 (widened back exactly).
template <bool kRound>
__device__ __forceinline__ float rd(float x) {
  if constexpr (kRound) return __bfloat162float(__float2bfloat16_rn(x));
  return x;
}

// Σ a_i·b_i in i order; a is already as read (shared memory), b is read through rd.
template <bool kRound>
__device__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s = __fadd_rn(s, __fmul_rn(a[i], rd<kRound>(b[i])));
  return s;
}
// Σ rd(a_i)·b_i (D = Σ dO·O: dO as read, O as stored).
template <bool kRound>
__device__ float dot_first(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s = __fadd_rn(s, __fmul_rn(rd<kRound>(a[i]), b[i]));
  return s;
}

// Whether query row t (its segment sq) sees key j of row b.
__device__ bool visible(int j, int t, const int32_t* qpos, int32_t sq, const int32_t* seg_k, size_t b, int Tk) {
  return j <= qpos[t] && (!seg_k || seg_k[b * Tk + j] == sq);
}

template <bool kRound>
__global__ void cp_fwd_kernel(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                              const int32_t* seg_q, const int32_t* seg_k, int Tq, int Tk, int NH, int KVH, int HS,
                              float scale) {
  __shared__ float q[kMaxHeadSize];
  __shared__ float w[kThreads];
  __shared__ float tree[kWarp];
  const size_t b = blockIdx.x / (static_cast<size_t>(Tq) * NH);
  const int t = static_cast<int>(blockIdx.x / NH % Tq), h = static_cast<int>(blockIdx.x % NH), tid = threadIdx.x;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, KV = 2 * static_cast<size_t>(KVH) * HS;
  const size_t kh = static_cast<size_t>(h / (NH / KVH)) * HS, vh = kh + static_cast<size_t>(KVH) * HS;
  const size_t row = b * Tq + t;
  for (int i = tid; i < HS; i += kThreads) q[i] = rd<kRound>(qkv[row * QKV + static_cast<size_t>(h) * HS + i]);
  __syncthreads();
  const int32_t sq = seg_q ? seg_q[row] : 0;
  const int n = min(qpos[t] + 1, Tk);
  float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  for (int start = 0; start < n; start += kThreads) {
    const int j = start + tid;
    const bool seen = j < n && visible(j, t, qpos, sq, seg_k, b, Tk);
    const float s = seen ? __fmul_rn(dot<kRound>(q, kv + (b * Tk + j) * KV + kh, HS), scale) : -INFINITY;
    const float m_new = fmaxf(m, block_max(s, tree));
    if (m_new == -INFINITY) continue;  // nothing visible yet (every thread agrees: a tree result)
    const float weight = seen ? expf(s - m_new) : 0.0f;
    const float correction = expf(m - m_new);
    l = __fadd_rn(__fmul_rn(l, correction), block_sum(weight, tree));
    w[tid] = weight;
    __syncthreads();
    const int keys = min(kThreads, n - start);
    float sum0 = 0.0f, sum1 = 0.0f;
    for (int jj = 0; jj < keys; ++jj) {
      const float* v = kv + (b * Tk + start + jj) * KV + vh;
      if (tid < HS) sum0 = __fadd_rn(sum0, __fmul_rn(w[jj], rd<kRound>(v[tid])));
      if (tid + kThreads < HS) sum1 = __fadd_rn(sum1, __fmul_rn(w[jj], rd<kRound>(v[tid + kThreads])));
    }
    acc0 = __fadd_rn(__fmul_rn(acc0, correction), sum0);
    acc1 = __fadd_rn(__fmul_rn(acc1, correction), sum1);
    m = m_new;
    __syncthreads();  // w is rewritten by the next tile
  }
  float* o = out + row * NH * HS + static_cast<size_t>(h) * HS;
  if (tid < HS) o[tid] = l > 0 ? acc0 / l : 0.0f;
  if (tid + kThreads < HS) o[tid + kThreads] = l > 0 ? acc1 / l : 0.0f;
  if (tid == 0) lse[(b * NH + h) * Tq + t] = l > 0 ? m + logf(l) : -INFINITY;
}

template <bool kRound>
__global__ void cp_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* kv, const float* out,
                             const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int Tq,
                             int Tk, int NH, int KVH, int HS, float scale) {
  __shared__ float q[kMaxHeadSize], d_o[kMaxHeadSize];
  __shared__ float ds[kThreads];
  __shared__ float tree[kWarp];
  const size_t b = blockIdx.x / (static_cast<size_t>(Tq) * NH);
  const int t = static_cast<int>(blockIdx.x / NH % Tq), h = static_cast<int>(blockIdx.x % NH), tid = threadIdx.x;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, KV = 2 * static_cast<size_t>(KVH) * HS;
  const size_t kh = static_cast<size_t>(h / (NH / KVH)) * HS, vh = kh + static_cast<size_t>(KVH) * HS;
  const size_t row = b * Tq + t, oh = row * NH * HS + static_cast<size_t>(h) * HS;
  float part = 0.0f;
  for (int i = tid; i < HS; i += kThreads) {
    q[i] = rd<kRound>(qkv[row * QKV + static_cast<size_t>(h) * HS + i]);
    d_o[i] = rd<kRound>(dout[oh + i]);
    part = __fadd_rn(part, __fmul_rn(d_o[i], out[oh + i]));
  }
  const float D = block_sum(part, tree);  // also orders q and d_o before their use
  const float L = lse[(b * NH + h) * Tq + t];
  const int32_t sq = seg_q ? seg_q[row] : 0;
  const int n = min(qpos[t] + 1, Tk);
  float acc0 = 0.0f, acc1 = 0.0f;
  for (int start = 0; start < n; start += kThreads) {
    const int j = start + tid;
    float g = 0.0f;
    if (j < n && visible(j, t, qpos, sq, seg_k, b, Tk)) {
      const float* r = kv + (b * Tk + j) * KV;
      const float p = expf(__fmul_rn(dot<kRound>(q, r + kh, HS), scale) - L);
      g = __fmul_rn(__fmul_rn(p, dot<kRound>(d_o, r + vh, HS) - D), scale);
    }
    ds[tid] = g;
    __syncthreads();
    const int keys = min(kThreads, n - start);
    for (int jj = 0; jj < keys; ++jj) {
      const float* k = kv + (b * Tk + start + jj) * KV + kh;
      if (tid < HS) acc0 = __fadd_rn(acc0, __fmul_rn(ds[jj], rd<kRound>(k[tid])));
      if (tid + kThreads < HS) acc1 = __fadd_rn(acc1, __fmul_rn(ds[jj], rd<kRound>(k[tid + kThreads])));
    }
    __syncthreads();
  }
  float* dq = dqkv + row * QKV + static_cast<size_t>(h) * HS;
  if (tid < HS) dq[tid] = acc0;
  if (tid + kThreads < HS) dq[tid + kThreads] = acc1;
}

template <bool kRound>
__global__ void cp_dkv_kernel(float* dkv, const float* dout, const float* qkv, const float* kv, const float* out,
                              const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int Tq,
                              int Tk, int NH, int KVH, int HS, float scale) {
  __shared__ float k[kMaxHeadSize], v[kMaxHeadSize];
  __shared__ float p_tile[kThreads], ds_tile[kThreads];
  const size_t b = blockIdx.x / (static_cast<size_t>(Tk) * KVH);
  const int j = static_cast<int>(blockIdx.x / KVH % Tk), kvh = static_cast<int>(blockIdx.x % KVH), tid = threadIdx.x;
  const int group = NH / KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, KV = 2 * static_cast<size_t>(KVH) * HS;
  const size_t kh = static_cast<size_t>(kvh) * HS, vh = kh + static_cast<size_t>(KVH) * HS;
  const float* r = kv + (b * Tk + j) * KV;
  for (int i = tid; i < HS; i += kThreads) k[i] = rd<kRound>(r[kh + i]), v[i] = rd<kRound>(r[vh + i]);
  __syncthreads();
  const int32_t sk = seg_k ? seg_k[b * Tk + j] : 0;
  float dk0 = 0.0f, dk1 = 0.0f, dv0 = 0.0f, dv1 = 0.0f;
  for (int start = 0; start < Tq; start += kThreads) {
    const int rows = min(kThreads, Tq - start);
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int t = start + tid;
      float p = 0.0f, g = 0.0f;
      if (t < Tq && j <= qpos[t] && (!seg_k || (seg_q ? seg_q[b * Tq + t] : 0) == sk)) {
        const size_t row = b * Tq + t, oh = row * NH * HS + static_cast<size_t>(h) * HS;
        const float* q = qkv + row * QKV + static_cast<size_t>(h) * HS;
        const float D = dot_first<kRound>(dout + oh, out + oh, HS);
        p = expf(__fmul_rn(dot<kRound>(k, q, HS), scale) - lse[(b * NH + h) * Tq + t]);
        g = __fmul_rn(__fmul_rn(p, dot<kRound>(v, dout + oh, HS) - D), scale);
      }
      p_tile[tid] = p, ds_tile[tid] = g;
      __syncthreads();
      for (int tt = 0; tt < rows; ++tt) {
        const size_t row = b * Tq + start + tt;
        const float* q = qkv + row * QKV + static_cast<size_t>(h) * HS;
        const float* d_o = dout + row * NH * HS + static_cast<size_t>(h) * HS;
        if (tid < HS) {
          dk0 = __fadd_rn(dk0, __fmul_rn(ds_tile[tt], rd<kRound>(q[tid])));
          dv0 = __fadd_rn(dv0, __fmul_rn(p_tile[tt], rd<kRound>(d_o[tid])));
        }
        if (tid + kThreads < HS) {
          dk1 = __fadd_rn(dk1, __fmul_rn(ds_tile[tt], rd<kRound>(q[tid + kThreads])));
          dv1 = __fadd_rn(dv1, __fmul_rn(p_tile[tt], rd<kRound>(d_o[tid + kThreads])));
        }
      }
      __syncthreads();  // the tiles are rewritten for the next head
    }
  }
  float* d = dkv + (b * Tk + j) * KV;
  if (tid < HS) d[kh + tid] = dk0, d[vh + tid] = dv0;
  if (tid + kThreads < HS) d[kh + tid + kThreads] = dk1, d[vh + tid + kThreads] = dv1;
}

void check_shape(const char* op, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  SFTDP_ASSERT(B > 0 && Tq > 0 && Tk > 0 && NH > 0 && KVH > 0 && NH % KVH == 0 && HS > 0 && HS <= kMaxHeadSize,
               std::string(op) + ": need B, Tq, Tk > 0, NH % KVH == 0 and 0 < HS <= 256 (got B=" + std::to_string(B) +
                   " Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk) + " NH=" + std::to_string(NH) +
                   " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
}

template <bool kRound>
void cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos, const int32_t* seg_q,
            const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream) {
  check_shape("attention_cp_fwd", B, Tq, Tk, NH, KVH, HS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  SFTDP_LAUNCH(cp_fwd_kernel<kRound>, static_cast<unsigned>(B) * Tq * NH, kThreads, 0, stream, out, lse, qkv, kv, qpos,
               seg_q, seg_k, Tq, Tk, NH, KVH, HS, scale);
  CHECK_LAUNCH();
}

template <bool kRound>
void cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv, const float* out,
            const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk,
            int NH, int KVH, int HS, cudaStream_t stream) {
  check_shape("attention_cp_bwd", B, Tq, Tk, NH, KVH, HS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  SFTDP_LAUNCH(cp_dq_kernel<kRound>, static_cast<unsigned>(B) * Tq * NH, kThreads, 0, stream, dqkv, dout, qkv, kv, out,
               lse, qpos, seg_q, seg_k, Tq, Tk, NH, KVH, HS, scale);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(cp_dkv_kernel<kRound>, static_cast<unsigned>(B) * Tk * KVH, kThreads, 0, stream, dkv, dout, qkv, kv, out,
               lse, qpos, seg_q, seg_k, Tq, Tk, NH, KVH, HS, scale);
  CHECK_LAUNCH();
}

}  // namespace

void attention_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                      cudaStream_t stream) {
  cp_fwd<false>(out, lse, qkv, kv, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream);
}

void attention_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv, const float* out,
                      const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int B, int Tq,
                      int Tk, int NH, int KVH, int HS, cudaStream_t stream) {
  cp_bwd<false>(dqkv, dkv, dout, qkv, kv, out, lse, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream);
}

void attention_cp_fwd_bf16(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                           const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                           cudaStream_t stream) {
  cp_fwd<true>(out, lse, qkv, kv, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream);
}

void attention_cp_bwd_bf16(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                           const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                           const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream) {
  cp_bwd<true>(dqkv, dkv, dout, qkv, kv, out, lse, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream);
}

}  // namespace sftdp::cuda
