// kernels/cuda/kv_cache.cu — the key/value cache of generation on the GPU (kernels/kv_cache.h, legend
// there). kv_append: one thread per copied float. kv_attention_fwd: one block of 128 threads per (new
// token t, query head h); the query head sits in shared memory, and the visible keys are taken in
// tiles of 128 (one key per thread: its score), with an online softmax across tiles (running maximum
// m and sum l; the output accumulators, one or two head elements per thread, rescaled by e^(m_old −
// m_new) when the maximum grows). Tile maxima and sums are block_max / block_sum trees (common.cuh):
// fixed orders, no atomics, the same bits on every run.
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/kv_cache.h"

namespace sftdp::cuda {
namespace {

constexpr int kThreads = 128;     // keys per tile, threads per block
constexpr int kMaxHeadSize = 256;  // two accumulators per thread

__global__ void kv_append_kernel(float* k_cache, float* v_cache, const float* qkv, int p, int NH, int KVH, int HS,
                                 size_t n) {
  const size_t KV = static_cast<size_t>(KVH) * HS, QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = i / KV, c = i % KV;
    const float* row = qkv + t * QKV + static_cast<size_t>(NH) * HS;
    k_cache[(p + t) * KV + c] = row[c];
    v_cache[(p + t) * KV + c] = row[KV + c];
  }
}

// Block (t, h): out row t, head h. Shared: q (HS floats), p (one tile's weights), 32 for the trees.
__global__ void kv_attention_kernel(float* out, const float* qkv, const float* k_cache, const float* v_cache, int p,
                                    int NH, int KVH, int HS, float scale) {
  __shared__ float q[kMaxHeadSize];
  __shared__ float w[kThreads];
  __shared__ float tree[kWarp];
  const int t = blockIdx.x / NH, h = blockIdx.x % NH, tid = threadIdx.x;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, KV = static_cast<size_t>(KVH) * HS;
  const size_t kv = static_cast<size_t>(h / (NH / KVH)) * HS;
  for (int i = tid; i < HS; i += kThreads) q[i] = qkv[t * QKV + static_cast<size_t>(h) * HS + i];
  __syncthreads();
  const int n = p + t + 1;  // visible keys
  float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  for (int start = 0; start < n; start += kThreads) {
    const int j = start + tid;
    float s = -INFINITY;
    if (j < n) {
      const float* k = k_cache + j * KV + kv;
      float dot = 0.0f;
      for (int i = 0; i < HS; ++i) dot = __fadd_rn(dot, __fmul_rn(q[i], k[i]));
      s = __fmul_rn(dot, scale);
    }
    const float m_new = fmaxf(m, block_max(s, tree));
    const float weight = j < n ? expf(s - m_new) : 0.0f;
    const float correction = expf(m - m_new);  // 0 on the first tile (m = −inf)
    l = __fadd_rn(__fmul_rn(l, correction), block_sum(weight, tree));
    w[tid] = weight;
    __syncthreads();
    const int keys = min(kThreads, n - start);
    float sum0 = 0.0f, sum1 = 0.0f;
    for (int jj = 0; jj < keys; ++jj) {
      const float* v = v_cache + (start + jj) * KV + kv;
      if (tid < HS) sum0 = __fadd_rn(sum0, __fmul_rn(w[jj], v[tid]));
      if (tid + kThreads < HS) sum1 = __fadd_rn(sum1, __fmul_rn(w[jj], v[tid + kThreads]));
    }
    acc0 = __fadd_rn(__fmul_rn(acc0, correction), sum0);
    acc1 = __fadd_rn(__fmul_rn(acc1, correction), sum1);
    m = m_new;
    __syncthreads();  // w is rewritten by the next tile
  }
  float* o = out + static_cast<size_t>(t) * NH * HS + static_cast<size_t>(h) * HS;
  if (tid < HS) o[tid] = acc0 / l;
  if (tid + kThreads < HS) o[tid + kThreads] = acc1 / l;
}

void check_shape(const char* op, int p, int Tq, int NH, int KVH, int HS) {
  SFTDP_ASSERT(p >= 0 && Tq > 0 && NH > 0 && KVH > 0 && NH % KVH == 0 && HS > 0 && HS <= kMaxHeadSize,
               std::string(op) + ": need p >= 0, Tq > 0, NH % KVH == 0 and 0 < HS <= 256 (got p=" +
                   std::to_string(p) + " Tq=" + std::to_string(Tq) + " NH=" + std::to_string(NH) +
                   " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
}

}  // namespace

void kv_append(float* k_cache, float* v_cache, const float* qkv, int p, int Tq, int NH, int KVH, int HS,
               cudaStream_t stream) {
  check_shape("kv_append", p, Tq, NH, KVH, HS);
  const size_t n = static_cast<size_t>(Tq) * KVH * HS;
  SFTDP_LAUNCH(kv_append_kernel, elementwise_blocks(n, 256), 256, 0, stream, k_cache, v_cache, qkv, p, NH, KVH, HS,
               n);
  CHECK_LAUNCH();
}

void kv_attention_fwd(float* out, const float* qkv, const float* k_cache, const float* v_cache, int p, int Tq, int NH,
                      int KVH, int HS, cudaStream_t stream) {
  check_shape("kv_attention_fwd", p, Tq, NH, KVH, HS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  SFTDP_LAUNCH(kv_attention_kernel, static_cast<unsigned>(Tq) * NH, kThreads, 0, stream, out, qkv, k_cache, v_cache,
               p, NH, KVH, HS, scale);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
