// kernels/cuda/rmsnorm.cu — RMSNorm over the last dim on the GPU (kernels/rmsnorm.h), and Qwen3's
// per-head q/k RMSNorm inside fused qkv rows. N rows (= B*T), C channels; NH q heads, KVH k/v
// heads, HS head size, QKV = (NH + 2·KVH)·HS. One warp per normalised vector; rstd is fp32 and
// saved for backward. Accumulation: rmsnorm_bwd dinp +=, dweight +=; qk_rmsnorm_bwd dqkv =
// (v columns copied from dout), dq_weight +=, dk_weight +=. The weight gradients are reduced
// without atomics, as layernorm.cu does: per chunk of kRowsPerChunk vectors a block writes column
// partials, then reduce.cu adds the chunks in chunk order (fixed by the problem size alone).
#include <string>

#include "kernels/cuda/reduce.cuh"
#include "kernels/rmsnorm.h"

namespace sftdp::cuda {
namespace {

constexpr int kRowBlock = 256;  // 8 warps = 8 vectors per block
constexpr int kColTile = 32;    // column-partial block: 32 columns x 8 warps
constexpr int kColRows = 8;

// One vector x of n floats (one warp): y = x·r·w with r = 1/sqrt(mean(x²) + eps); returns r.
__device__ __forceinline__ float rms_normalise(float* y, const float* x, const float* w, int n, float eps,
                                               int lane) {
  float sq = 0.f;
  for (int c = lane; c < n; c += kWarp) sq += x[c] * x[c];
  const float r = 1.f / sqrtf(warp_sum(sq) / n + eps);  // IEEE sqrt and division (no fast-math)
  for (int c = lane; c < n; c += kWarp) y[c] = x[c] * r * w[c];
  return r;
}

// One vector (one warp): dx = r·(w·dy − x̂·mean(w·dy·x̂)), x̂ = x·r; written (=) or added (+=).
template <bool kAccumulate>
__device__ __forceinline__ void rms_backward(float* dx, const float* dy, const float* x, const float* w, float r,
                                             int n, int lane) {
  float dot = 0.f;
  for (int c = lane; c < n; c += kWarp) dot += w[c] * dy[c] * (x[c] * r);
  const float dot_mean = warp_sum(dot) / n;
  for (int c = lane; c < n; c += kWarp) {
    const float g = (w[c] * dy[c] - x[c] * r * dot_mean) * r;
    if (kAccumulate)
      dx[c] += g;
    else
      dx[c] = g;
  }
}

__global__ void rmsnorm_fwd_kernel(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                   float eps) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;  // the whole warp leaves together; no block-wide barrier follows
  const size_t base = static_cast<size_t>(row) * C;
  const float r = rms_normalise(out + base, inp + base, weight, C, eps, lane);
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_bwd_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                        const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  rms_backward<true>(dinp + base, dout + base, inp + base, weight, rstd[row], C, lane);
}

// Vector j of row n in fused qkv: heads 0..NH-1 are q, NH..NH+KVH-1 are k (normalised, rstd index
// n·(NH+KVH) + j), the rest v (copied). One warp per (n, j), j < NH + 2·KVH.
__global__ void qk_rmsnorm_fwd_kernel(float* out, float* rstd, const float* qkv, const float* q_weight,
                                      const float* k_weight, int N, int NH, int KVH, int HS, float eps) {
  const int heads = NH + 2 * KVH;
  const size_t vec = static_cast<size_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (vec >= static_cast<size_t>(N) * heads) return;
  const size_t n = vec / heads;
  const int j = static_cast<int>(vec % heads);
  const size_t base = vec * HS;  // = n·QKV + j·HS
  if (j < NH + KVH) {
    const float r = rms_normalise(out + base, qkv + base, j < NH ? q_weight : k_weight, HS, eps, lane);
    if (lane == 0) rstd[n * (NH + KVH) + j] = r;
  } else {
    for (int c = lane; c < HS; c += kWarp) out[base + c] = qkv[base + c];
  }
}

__global__ void qk_rmsnorm_bwd_dinp_kernel(float* dqkv, const float* dout, const float* qkv, const float* q_weight,
                                           const float* k_weight, const float* rstd, int N, int NH, int KVH,
                                           int HS) {
  const int heads = NH + 2 * KVH;
  const size_t vec = static_cast<size_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (vec >= static_cast<size_t>(N) * heads) return;
  const size_t n = vec / heads;
  const int j = static_cast<int>(vec % heads);
  const size_t base = vec * HS;
  if (j < NH + KVH) {
    rms_backward<false>(dqkv + base, dout + base, qkv + base, j < NH ? q_weight : k_weight,
                        rstd[n * (NH + KVH) + j], HS, lane);
  } else {
    for (int c = lane; c < HS; c += kWarp) dqkv[base + c] = dout[base + c];
  }
}

// Column partials of Σ dy·x̂ over "vectors" v in [0, M): vector v is row v / H, head h0 + v % H,
// at offset (v / H)·row_stride + (h0 + v % H)·n; its rstd at (v / H)·rstd_stride + h0 + v % H.
// partials[chunk·n + c] sums the chunk's kRowsPerChunk vectors: each of the kColRows warps strides
// them, then warp sums are added in warp order. Block (kColTile, kColRows), grid (chunks,
// ceil(n / kColTile)). rmsnorm is H = 1, h0 = 0, row_stride = n = C, rstd_stride = 1.
__global__ void weight_partials_kernel(float* partials, const float* dout, const float* inp, const float* rstd,
                                       int M, int H, int h0, size_t row_stride, int rstd_stride, int n) {
  __shared__ float tile[kColRows][kColTile + 1];
  const int c = blockIdx.y * kColTile + threadIdx.x;
  const int v0 = blockIdx.x * kRowsPerChunk;
  const int v1 = v0 + kRowsPerChunk < M ? v0 + kRowsPerChunk : M;
  float acc = 0.f;
  if (c < n) {
    for (int v = v0 + threadIdx.y; v < v1; v += kColRows) {
      const int row = v / H, head = h0 + v % H;
      const size_t i = static_cast<size_t>(row) * row_stride + static_cast<size_t>(head) * n + c;
      acc += dout[i] * (inp[i] * rstd[static_cast<size_t>(row) * rstd_stride + head]);
    }
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float sum = 0.f;
    for (int j = 0; j < kColRows; ++j) sum += tile[j][threadIdx.x];
    partials[static_cast<size_t>(blockIdx.x) * n + c] = sum;
  }
}

// Launches weight_partials_kernel for M vectors into partials (column_chunks(M), n).
void weight_partials(float* partials, const float* dout, const float* inp, const float* rstd, int M, int H, int h0,
                     size_t row_stride, int rstd_stride, int n, cudaStream_t stream) {
  const int R = column_chunks(M);
  SFTDP_ASSERT(ceil_div(n, kColTile) <= 65535, "rmsnorm_bwd: too many columns for gridDim.y");
  const dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(ceil_div(n, kColTile)));
  SFTDP_LAUNCH(weight_partials_kernel, grid, dim3(kColTile, kColRows), 0, stream, partials, dout, inp, rstd, M, H, h0,
               row_stride, rstd_stride, n);
  CHECK_LAUNCH();
}

unsigned warp_blocks(size_t vectors) { return static_cast<unsigned>(ceil_div(vectors, kRowBlock / kWarp)); }

void check_dims(const char* op, int N, int C) {
  SFTDP_ASSERT(N >= 0 && C > 0, std::string(op) + ": need N >= 0 and C > 0 (got N=" + std::to_string(N) +
                                    " C=" + std::to_string(C) + ")");
}

void check_heads(const char* op, int N, int NH, int KVH, int HS) {
  SFTDP_ASSERT(N >= 0 && NH > 0 && KVH > 0 && HS > 0,
               std::string(op) + ": need N >= 0 and NH, KVH, HS > 0 (got N=" + std::to_string(N) +
                   " NH=" + std::to_string(NH) + " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
  SFTDP_ASSERT(static_cast<int64_t>(N) * (NH + KVH) <= INT32_MAX, std::string(op) + ": N·(NH+KVH) exceeds 2^31");
}

}  // namespace

void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                 cudaStream_t stream) {
  check_dims("rmsnorm_fwd", N, C);
  if (N == 0) return;
  SFTDP_LAUNCH(rmsnorm_fwd_kernel, warp_blocks(N), kRowBlock, 0, stream, out, rstd, inp, weight, N, C, eps);
  CHECK_LAUNCH();
}

void rmsnorm_bwd(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                 const float* rstd, int N, int C, cudaStream_t stream) {
  check_dims("rmsnorm_bwd", N, C);
  if (N == 0) return;
  SFTDP_LAUNCH(rmsnorm_bwd_dinp_kernel, warp_blocks(N), kRowBlock, 0, stream, dinp, dout, inp, weight, rstd, N, C);
  CHECK_LAUNCH();
  if (!dweight) return;  // a frozen weight (LoRA): no gradient
  const int R = column_chunks(N);
  float* partials = scratch_as<float>(Scratch::kColumnPartials, static_cast<size_t>(R) * C);
  weight_partials(partials, dout, inp, rstd, N, 1, 0, static_cast<size_t>(C), 1, C, stream);
  add_column_partials(dweight, partials, R, C, stream);
}

void qk_rmsnorm_fwd(float* out, float* rstd, const float* qkv, const float* q_weight, const float* k_weight, int N,
                    int NH, int KVH, int HS, float eps, cudaStream_t stream) {
  check_heads("qk_rmsnorm_fwd", N, NH, KVH, HS);
  if (N == 0) return;
  const size_t vectors = static_cast<size_t>(N) * (NH + 2 * KVH);
  SFTDP_LAUNCH(qk_rmsnorm_fwd_kernel, warp_blocks(vectors), kRowBlock, 0, stream, out, rstd, qkv, q_weight, k_weight, N,
               NH, KVH, HS, eps);
  CHECK_LAUNCH();
}

void qk_rmsnorm_bwd(float* dqkv, float* dq_weight, float* dk_weight, const float* dout, const float* qkv,
                    const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int KVH, int HS,
                    cudaStream_t stream) {
  check_heads("qk_rmsnorm_bwd", N, NH, KVH, HS);
  if (N == 0) return;
  const size_t vectors = static_cast<size_t>(N) * (NH + 2 * KVH);
  SFTDP_LAUNCH(qk_rmsnorm_bwd_dinp_kernel, warp_blocks(vectors), kRowBlock, 0, stream, dqkv, dout, qkv, q_weight,
               k_weight, rstd, N, NH, KVH, HS);
  CHECK_LAUNCH();
  if (!dq_weight) return;  // frozen weights (LoRA): no gradients
  // dq_weight over the N·NH q vectors, dk_weight over the N·KVH k vectors: one scratch, two halves.
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  const int Mq = N * NH, Mk = N * KVH;
  const int Rq = column_chunks(Mq), Rk = column_chunks(Mk);
  float* partials = scratch_as<float>(Scratch::kColumnPartials, static_cast<size_t>(Rq + Rk) * HS);
  float* partials_k = partials + static_cast<size_t>(Rq) * HS;
  weight_partials(partials, dout, qkv, rstd, Mq, NH, 0, QKV, NH + KVH, HS, stream);
  weight_partials(partials_k, dout, qkv, rstd, Mk, KVH, NH, QKV, NH + KVH, HS, stream);
  add_column_partials(dq_weight, partials, Rq, HS, stream);
  add_column_partials(dk_weight, partials_k, Rk, HS, stream);
}

}  // namespace sftdp::cuda
