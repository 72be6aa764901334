// kernels/cuda/rmsnorm.cu — RMSNorm over the last dim on the GPU (kernels/rmsnorm.h), and Qwen3's
// per-head q/k RMSNorm inside fused qkv rows. N rows (= B*T), C channels; NH q heads, KVH k/v
// heads, HS head size, QKV = (NH + 2·KVH)·HS. One warp per normalised vector; rstd is fp32 and
// saved for backward. Accumulation: rmsnorm_bwd dinp +=, dweight +=; qk_rmsnorm_bwd dqkv =
// (v columns copied from dout), dq_weight +=, dk_weight +=. The weight gradients are reduced
// without atomics, as layernorm.cu does: per chunk of kRowsPerChunk vectors a block writes column
// partials, then reduce.cu adds the chunks in chunk order (fixed by the problem size alone).
// The act16 twins (bf16 where kernels/rmsnorm.h marks it; kernels/act16.h) are one launch each, rows
// (or q/k heads) in groups of threads that each own an 8-column slot (norm_act16.cuh); the backwards'
// weight gradients (+=) are per-block partials over kRowsPerChunk rows that the last block to finish adds.
#include <string>

#include "kernels/cuda/norm_act16.cuh"
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

namespace sftdp::cuda::act16 {
namespace {

using namespace norm_act16;

// One row per group of P threads (row blockIdx.x·G + group): rstd = 1/sqrt(mean(x²) + eps), out = bf16(x·rstd·w).
template <bool kVec>
__global__ void __launch_bounds__(norm_act16::kMaxThreads)
    rmsnorm_act16_fwd_kernel(uint16_t* out, float* rstd, const float* inp, const float* weight, int N, int C,
                             float eps, int P) {
  __shared__ float red[kGroupSumScratch];
  int parity = 0;
  const int G = blockDim.x / P, group = threadIdx.x / P, t = threadIdx.x % P;
  const int row = blockIdx.x * G + group;
  const bool live = row < N;  // a group past N computes on row 0 and writes nothing: group_sum needs it
  const size_t off = static_cast<size_t>(live ? row : 0) * C;
  float x[kSlot];
  load_slot<kVec>(x, inp + off, t, P, C);
  float sq[1] = {0.f};
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) sq[0] += x[k] * x[k];  // columns not there read 0
  group_sum(sq, P, red, parity);
  const float r = 1.f / sqrtf(sq[0] / C + eps);  // IEEE sqrt and division (no fast-math)
  if (!live) return;
  float w[kSlot], y[kSlot];
  load_slot<kVec>(w, weight, t, P, C);
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) y[k] = x[k] * r * w[k];
  store_slot<kVec>(out + off, y, t, P, C);
  if (t == 0) rstd[row] = r;
}

// The whole backward in one launch, as layernorm_act16_bwd_kernel without the mean and bias: block b owns
// rows [128b, 128b + 128), its G groups take rows 128b + group, + G, ...; per row, with x̂ = x·rstd and
// g = dout·w: the group's Σg·x̂, dres = (dres_in ? dres_in : 0) + rstd·(g − x̂·mean(g·x̂)) and its bf16 copy,
// and dout·x̂ added into the group's column sums (G × Cp); then finish_column_sums into dweight.
template <bool kVec>
__global__ void __launch_bounds__(norm_act16::kMaxThreads)
    rmsnorm_act16_bwd_kernel(float* dres, uint16_t* dres16, float* dweight, const float* dres_in,
                             const uint16_t* dout, const float* inp, const float* weight, const float* rstd,
                             float* partials, unsigned* blocks_done, int N, int C, int P) {
  SFTDP_DYNAMIC_SHARED(float, acc);  // (G, 1, Cp)
  __shared__ float red[kGroupSumScratch];
  __shared__ unsigned finished_before;
  int parity = 0;
  const int G = blockDim.x / P, group = threadIdx.x / P, t = threadIdx.x % P, Cp = padded_width(C);
  float* const sums[1] = {dweight};
  float* acc_w = dweight ? acc + static_cast<size_t>(group) * Cp : nullptr;  // no shared memory without sums
  if (dweight) zero_column_sums(acc, G * Cp / 4);
  const int r0 = blockIdx.x * kRowsPerChunk, r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  for (int first = r0; first < r1; first += G) {  // the same count for every group
    const int row = first + group;
    const bool live = row < r1;
    const int n = live ? row : r0;
    const size_t off = static_cast<size_t>(n) * C;
    float x[kSlot], dy[kSlot], v[kSlot];
    load_slot<kVec>(x, inp + off, t, P, C);
    load_slot<kVec>(dy, dout + off, t, P, C);
    const float s = rstd[n];
    float dot[1] = {0.f};  // Σ g·x̂ (columns not there: 0)
    {
      float w[kSlot];
      load_slot<kVec>(w, weight, t, P, C);
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) dot[0] += dy[k] * w[k] * x[k] * s;
    }
    group_sum(dot, P, red, parity);
    if (!live) continue;
    const float gx_mean = dot[0] / C;
    {
      float w[kSlot];  // read again (L1) rather than held across the sum: registers, not spills
      load_slot<kVec>(w, weight, t, P, C);
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) v[k] = s * (dy[k] * w[k] - x[k] * s * gx_mean);
    }
    if (dres_in) {
      float din[kSlot];
      load_slot<kVec>(din, dres_in + off, t, P, C);
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) v[k] = din[k] + v[k];
    }
    store_slot<kVec>(dres + off, v, t, P, C);
    if (dres16) store_slot<kVec>(dres16 + off, v, t, P, C);
    if (!dweight) continue;
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k) v[k] = x[k] * s * dy[k];  // x̂·dout
    add_slot<kVec>(acc_w, v, t, P, C);
  }
  if (dweight) finish_column_sums<1>(sums, partials, blocks_done, finished_before, acc, G, C);
}

// Head vector v = blockIdx.x·G + group of the N·(NH + 2·KVH) in the fused rows: row v / heads, head h = v % heads;
// q and k heads (h < NH + KVH) normalised with q_weight or k_weight, rstd at row·(NH + KVH) + h; v heads copied.
template <bool kVec>
__global__ void __launch_bounds__(norm_act16::kMaxThreads)
    qk_rmsnorm_act16_fwd_kernel(uint16_t* out, float* rstd, const uint16_t* qkv, const float* q_weight,
                                const float* k_weight, int N, int NH, int KVH, int HS, float eps, int P) {
  __shared__ float red[kGroupSumScratch];
  int parity = 0;
  const int G = blockDim.x / P, group = threadIdx.x / P, t = threadIdx.x % P;
  const int heads = NH + 2 * KVH, QK = NH + KVH;
  const int vec = blockIdx.x * G + group;
  const bool live = vec < N * heads;  // N·heads < 2^31: the launcher checks
  const int row = live ? vec / heads : 0, h = live ? vec % heads : 0;
  const size_t off = (static_cast<size_t>(row) * heads + h) * HS;
  float x[kSlot] = {};
  if (h < QK) load_slot<kVec>(x, qkv + off, t, P, HS);
  float sq[1] = {0.f};
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) sq[0] += x[k] * x[k];
  group_sum(sq, P, red, parity);
  if (!live) return;
  if (h >= QK) {
    copy_slot<kVec>(out + off, qkv + off, t, P, HS);
    return;
  }
  const float r = 1.f / sqrtf(sq[0] / HS + eps);
  float w[kSlot], y[kSlot];
  load_slot<kVec>(w, h < NH ? q_weight : k_weight, t, P, HS);
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) y[k] = x[k] * r * w[k];
  store_slot<kVec>(out + off, y, t, P, HS);
  if (t == 0) rstd[static_cast<size_t>(row) * QK + h] = r;
}

// The whole backward in one launch: block b owns rows [128b, 128b + 128) and their head vectors j (row
// 128b + j / heads, head j % heads), its G groups taking j = group, + G, ... A q or k head: dx = bf16(rstd·(g −
// x̂·mean(g·x̂))), g = dout·w, x̂ = x·rstd, and dout·x̂ added into the group's column sums of q or k (G × 2 × HSp);
// a v head: dout copied. Then finish_column_sums into dq_weight and dk_weight.
template <bool kVec>
__global__ void __launch_bounds__(norm_act16::kMaxThreads)
    qk_rmsnorm_act16_bwd_kernel(uint16_t* dqkv, float* dq_weight, float* dk_weight, const uint16_t* dout,
                                const uint16_t* qkv, const float* q_weight, const float* k_weight,
                                const float* rstd, float* partials, unsigned* blocks_done, int N, int NH, int KVH,
                                int HS, int P) {
  SFTDP_DYNAMIC_SHARED(float, acc);  // (G, 2, HSp): q, k
  __shared__ float red[kGroupSumScratch];
  __shared__ unsigned finished_before;
  int parity = 0;
  const int G = blockDim.x / P, group = threadIdx.x / P, t = threadIdx.x % P, HSp = padded_width(HS);
  const int heads = NH + 2 * KVH, QK = NH + KVH;
  float* const sums[2] = {dq_weight, dk_weight};
  const bool column_sums = dq_weight || dk_weight;
  if (column_sums) zero_column_sums(acc, G * 2 * HSp / 4);
  const int r0 = blockIdx.x * kRowsPerChunk, r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  const int J = (r1 - r0) * heads;
  for (int first = 0; first < J; first += G) {  // the same count for every group
    const int j = first + group;
    const bool live = j < J;
    const int row = r0 + (live ? j / heads : 0), h = live ? j % heads : 0;
    const size_t off = (static_cast<size_t>(row) * heads + h) * HS;
    const bool norm = h < QK;
    float x[kSlot] = {}, dy[kSlot] = {}, w[kSlot] = {};
    float s = 0.f;
    if (norm) {
      load_slot<kVec>(x, qkv + off, t, P, HS);
      load_slot<kVec>(dy, dout + off, t, P, HS);
      load_slot<kVec>(w, h < NH ? q_weight : k_weight, t, P, HS);
      s = rstd[static_cast<size_t>(row) * QK + h];
    }
    float dot[1] = {0.f};
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k) dot[0] += dy[k] * w[k] * x[k] * s;
    group_sum(dot, P, red, parity);
    if (!live) continue;
    if (!norm) {
      copy_slot<kVec>(dqkv + off, dout + off, t, P, HS);
      continue;
    }
    const float gx_mean = dot[0] / HS;
    float dx[kSlot];
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k) dx[k] = s * (dy[k] * w[k] - x[k] * s * gx_mean);
    store_slot<kVec>(dqkv + off, dx, t, P, HS);
    const int which = h < NH ? 0 : 1;  // q or k
    if (!(which == 0 ? dq_weight : dk_weight)) continue;
    SFTDP_UNROLL
    for (int k = 0; k < kSlot; ++k) dx[k] = x[k] * s * dy[k];  // x̂·dout
    add_slot<kVec>(acc + (static_cast<size_t>(group) * 2 + which) * HSp, dx, t, P, HS);
  }
  if (column_sums) finish_column_sums<2>(sums, partials, blocks_done, finished_before, acc, G, HS);
}

void check_width(const char* op, int N, int W, const char* what) {
  SFTDP_ASSERT(N >= 0 && W > 0 && W <= kMaxWidth,
               std::string(op) + ": need N >= 0 and 0 < " + what + " <= " + std::to_string(kMaxWidth) +
                   " (one 8-column slot per thread, 1024 threads a row; got N=" + std::to_string(N) + " " + what +
                   "=" + std::to_string(W) + ")");
}

void check_heads(const char* op, int N, int NH, int KVH, int HS) {
  check_width(op, N, HS, "HS");
  SFTDP_ASSERT(NH > 0 && KVH > 0, std::string(op) + ": need NH, KVH > 0 (got NH=" + std::to_string(NH) +
                                      " KVH=" + std::to_string(KVH) + ")");
  SFTDP_ASSERT(static_cast<int64_t>(N) * (NH + 2 * KVH) <= INT32_MAX,
               std::string(op) + ": N·(NH+2·KVH) head vectors exceed 2^31");
}

}  // namespace

void rmsnorm_fwd(uint16_t* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                 cudaStream_t stream) {
  check_width("act16::rmsnorm_fwd", N, C, "C");
  if (N == 0) return;
  const int P = row_threads(C), G = row_groups(P, kFwdThreads, N);
  const unsigned blocks = static_cast<unsigned>(ceil_div(N, G));
  if (C % kSlot == 0 && aligned16(out, inp, weight))
    SFTDP_LAUNCH(rmsnorm_act16_fwd_kernel<true>, blocks, G * P, 0, stream, out, rstd, inp, weight, N, C, eps, P);
  else
    SFTDP_LAUNCH(rmsnorm_act16_fwd_kernel<false>, blocks, G * P, 0, stream, out, rstd, inp, weight, N, C, eps, P);
  CHECK_LAUNCH();
}

void rmsnorm_bwd(float* dres, uint16_t* dres16, float* dweight, const float* dres_in, const uint16_t* dout,
                 const float* inp, const float* weight, const float* rstd, int N, int C, cudaStream_t stream) {
  check_width("act16::rmsnorm_bwd", N, C, "C");
  if (N == 0) return;
  const int P = row_threads(C), G = row_groups(P, kBwdThreads, kRowsPerChunk), R = column_chunks(N);
  const size_t smem = dweight ? static_cast<size_t>(G) * padded_width(C) * sizeof(float) : 0;
  float* partials =
      dweight ? scratch_as<float>(Scratch::kColumnPartials, static_cast<size_t>(R) * padded_width(C)) : nullptr;
  unsigned* blocks_done = dweight ? blocks_done_counter(stream) : nullptr;
  static size_t allowed[2] = {0, 0};
  if (C % kSlot == 0 && aligned16(dres, dres16, dres_in, dout, inp, weight)) {
    allow_dynamic_shared(reinterpret_cast<const void*>(&rmsnorm_act16_bwd_kernel<true>), smem, allowed[1]);
    SFTDP_LAUNCH(rmsnorm_act16_bwd_kernel<true>, R, G * P, smem, stream, dres, dres16, dweight, dres_in, dout, inp,
                 weight, rstd, partials, blocks_done, N, C, P);
  } else {
    allow_dynamic_shared(reinterpret_cast<const void*>(&rmsnorm_act16_bwd_kernel<false>), smem, allowed[0]);
    SFTDP_LAUNCH(rmsnorm_act16_bwd_kernel<false>, R, G * P, smem, stream, dres, dres16, dweight, dres_in, dout, inp,
                 weight, rstd, partials, blocks_done, N, C, P);
  }
  CHECK_LAUNCH();
}

void qk_rmsnorm_fwd(uint16_t* out, float* rstd, const uint16_t* qkv, const float* q_weight, const float* k_weight,
                    int N, int NH, int KVH, int HS, float eps, cudaStream_t stream) {
  check_heads("act16::qk_rmsnorm_fwd", N, NH, KVH, HS);
  if (N == 0) return;
  const int vectors = N * (NH + 2 * KVH);
  const int P = row_threads(HS), G = row_groups(P, kFwdThreads, vectors);
  const unsigned blocks = static_cast<unsigned>(ceil_div(vectors, G));
  if (HS % kSlot == 0 && aligned16(out, qkv, q_weight, k_weight))
    SFTDP_LAUNCH(qk_rmsnorm_act16_fwd_kernel<true>, blocks, G * P, 0, stream, out, rstd, qkv, q_weight, k_weight, N,
                 NH, KVH, HS, eps, P);
  else
    SFTDP_LAUNCH(qk_rmsnorm_act16_fwd_kernel<false>, blocks, G * P, 0, stream, out, rstd, qkv, q_weight, k_weight, N,
                 NH, KVH, HS, eps, P);
  CHECK_LAUNCH();
}

void qk_rmsnorm_bwd(uint16_t* dqkv, float* dq_weight, float* dk_weight, const uint16_t* dout, const uint16_t* qkv,
                    const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int KVH, int HS,
                    cudaStream_t stream) {
  check_heads("act16::qk_rmsnorm_bwd", N, NH, KVH, HS);
  if (N == 0) return;
  const int P = row_threads(HS), G = row_groups(P, kBwdThreads, kRowsPerChunk * (NH + 2 * KVH));
  const int R = column_chunks(N);
  const bool column_sums = dq_weight || dk_weight;
  const size_t smem = column_sums ? static_cast<size_t>(G) * 2 * padded_width(HS) * sizeof(float) : 0;
  const size_t n_partials = size_t{2} * R * padded_width(HS);  // (2, R, HSp)
  float* partials = column_sums ? scratch_as<float>(Scratch::kColumnPartials, n_partials) : nullptr;
  unsigned* blocks_done = column_sums ? blocks_done_counter(stream) : nullptr;
  static size_t allowed[2] = {0, 0};
  if (HS % kSlot == 0 && aligned16(dqkv, dout, qkv, q_weight, k_weight)) {
    allow_dynamic_shared(reinterpret_cast<const void*>(&qk_rmsnorm_act16_bwd_kernel<true>), smem, allowed[1]);
    SFTDP_LAUNCH(qk_rmsnorm_act16_bwd_kernel<true>, R, G * P, smem, stream, dqkv, dq_weight, dk_weight, dout, qkv,
                 q_weight, k_weight, rstd, partials, blocks_done, N, NH, KVH, HS, P);
  } else {
    allow_dynamic_shared(reinterpret_cast<const void*>(&qk_rmsnorm_act16_bwd_kernel<false>), smem, allowed[0]);
    SFTDP_LAUNCH(qk_rmsnorm_act16_bwd_kernel<false>, R, G * P, smem, stream, dqkv, dq_weight, dk_weight, dout, qkv,
                 q_weight, k_weight, rstd, partials, blocks_done, N, NH, KVH, HS, P);
  }
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda::act16
