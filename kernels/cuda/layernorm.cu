// kernels/cuda/layernorm.cu — LayerNorm over the last dim on the GPU (kernels/layernorm.h), eps
// 1e-5. N rows (= B*T), C channels; one warp per row. mean/rstd are fp32 and saved for backward.
// Accumulation: dinp +=, dweight +=, dbias +=. dweight/dbias are reduced without atomics: per
// chunk of kRowsPerChunk rows a block writes column partials, then reduce.cu adds the chunks into
// dweight/dbias in chunk order (fixed by N alone).
// The act16 twins (bf16 out, dout, dres16; kernels/act16.h) are one launch each, rows in groups of
// threads that each own an 8-column slot (norm_act16.cuh); the backward's dweight, dbias and dres_in_sum
// (+=) are per-block partials over kRowsPerChunk rows that the last block to finish adds in block order.
#include <string>

#include "kernels/cuda/norm_act16.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/layernorm.h"

namespace sftdp::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowBlock = 256;  // 8 warps = 8 rows per block
constexpr int kColTile = 32;    // column-partial block: 32 columns x 8 warps
constexpr int kColRows = 8;

__global__ void layernorm_fwd_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                     const float* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;  // the whole warp leaves together; no block-wide barrier follows
  const float* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.f;
  for (int c = lane; c < C; c += kWarp) sum += x[c];
  const float m = warp_sum(sum) / C;
  float sq = 0.f;
  for (int c = lane; c < C; c += kWarp) {
    const float d = x[c] - m;
    sq += d * d;
  }
  const float var = warp_sum(sq) / C;
  const float r = 1.f / sqrtf(var + kEps);  // IEEE sqrt and division (no fast-math)
  float* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += kWarp) y[c] = (x[c] - m) * r * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp[n,c] += rstd·(w·dout − mean_c(w·dout) − x̂·mean_c(w·dout·x̂)), x̂ = (x − mean)·rstd.
__global__ void layernorm_bwd_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                          const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.f, dnorm_xhat_sum = 0.f;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (inp[base + c] - m) * r;
    const float dnorm = weight[c] * dout[base + c];
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * xhat;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C;
  const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (inp[base + c] - m) * r;
    const float dnorm = weight[c] * dout[base + c];
    dinp[base + c] += (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * r;
  }
}

// partials[chunk·C + c] = Σ dout·x̂ (dweight) and partials[(R + chunk)·C + c] = Σ dout (dbias)
// over the chunk's rows. Block (kColTile, kColRows), grid (ceil(C / kColTile), R).
__global__ void layernorm_bwd_partials_kernel(float* partials, const float* dout, const float* inp,
                                              const float* mean, const float* rstd, int N, int C, int R) {
  __shared__ float tile_w[kColRows][kColTile + 1];
  __shared__ float tile_b[kColRows][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int r0 = blockIdx.y * kRowsPerChunk;
  const int r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float acc_w = 0.f, acc_b = 0.f;
  if (c < C) {
    for (int n = r0 + threadIdx.y; n < r1; n += kColRows) {
      const size_t i = static_cast<size_t>(n) * C + c;
      const float xhat = (inp[i] - mean[n]) * rstd[n];
      acc_w += dout[i] * xhat;
      acc_b += dout[i];
    }
  }
  tile_w[threadIdx.y][threadIdx.x] = acc_w;
  tile_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum_w = 0.f, sum_b = 0.f;
    for (int j = 0; j < kColRows; ++j) {
      sum_w += tile_w[j][threadIdx.x];
      sum_b += tile_b[j][threadIdx.x];
    }
    partials[static_cast<size_t>(blockIdx.y) * C + c] = sum_w;
    partials[static_cast<size_t>(R + blockIdx.y) * C + c] = sum_b;
  }
}

void check_dims(const char* op, int N, int C) {
  SFTDP_ASSERT(N >= 0 && C > 0, std::string(op) + ": need N >= 0 and C > 0 (got N=" + std::to_string(N) +
                                    " C=" + std::to_string(C) + ")");
}

}  // namespace

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                   int N, int C, cudaStream_t stream) {
  check_dims("layernorm_fwd", N, C);
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>(ceil_div(N, kRowBlock / kWarp));
  SFTDP_LAUNCH(layernorm_fwd_kernel, blocks, kRowBlock, 0, stream, out, mean, rstd, inp, weight, bias, N, C);
  CHECK_LAUNCH();
}

void layernorm_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                   const float* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  check_dims("layernorm_bwd", N, C);
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>(ceil_div(N, kRowBlock / kWarp));
  SFTDP_LAUNCH(layernorm_bwd_dinp_kernel, blocks, kRowBlock, 0, stream, dinp, dout, inp, weight, mean, rstd, N, C);
  CHECK_LAUNCH();
  if (!dweight) return;  // a frozen weight and bias (LoRA): no gradients

  const int R = column_chunks(N);
  SFTDP_ASSERT(R <= 65535, "layernorm_bwd: N / 128 row chunks exceed gridDim.y (65535)");
  float* partials = scratch_as<float>(Scratch::kColumnPartials, 2 * static_cast<size_t>(R) * C);
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kColTile)), static_cast<unsigned>(R));
  SFTDP_LAUNCH(layernorm_bwd_partials_kernel, grid, dim3(kColTile, kColRows), 0, stream, partials, dout, inp, mean,
               rstd, N, C, R);
  CHECK_LAUNCH();
  add_column_partials(dweight, partials, R, C, stream);
  add_column_partials(dbias, partials + static_cast<size_t>(R) * C, R, C, stream);
}

}  // namespace sftdp::cuda

namespace sftdp::cuda::act16 {
namespace {

using namespace norm_act16;

constexpr float kEps = 1e-5f;

// One row per group of P threads (G groups: row blockIdx.x·G + group): mean, rstd (two-pass variance, as
// the CPU twin) and out = bf16((x − mean)·rstd·w + b).
template <bool kVec>
__global__ void __launch_bounds__(norm_act16::kMaxThreads)
    layernorm_act16_fwd_kernel(uint16_t* out, float* mean, float* rstd, const float* inp, const float* weight,
                               const float* bias, int N, int C, int P) {
  __shared__ float red[kGroupSumScratch];
  int parity = 0;
  const int G = blockDim.x / P, group = threadIdx.x / P, t = threadIdx.x % P;
  const int row = blockIdx.x * G + group;
  const bool live = row < N;  // a group past N computes on row 0 and writes nothing: group_sum needs it
  const size_t off = static_cast<size_t>(live ? row : 0) * C;
  float x[kSlot];
  load_slot<kVec>(x, inp + off, t, P, C);
  float sum[1] = {0.f};
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) sum[0] += x[k];  // columns not there read 0
  group_sum(sum, P, red, parity);
  const float m = sum[0] / C;
  float sq[1] = {0.f};
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) {
    const float d = slot_col<kVec>(t, k, P) < C ? x[k] - m : 0.f;
    sq[0] += d * d;
  }
  group_sum(sq, P, red, parity);
  const float r = 1.f / sqrtf(sq[0] / C + kEps);  // IEEE sqrt and division (no fast-math)
  if (!live) return;
  float w[kSlot], b[kSlot], y[kSlot];
  load_slot<kVec>(w, weight, t, P, C);
  load_slot<kVec>(b, bias, t, P, C);
  SFTDP_UNROLL
  for (int k = 0; k < kSlot; ++k) y[k] = (x[k] - m) * r * w[k] + b[k];
  store_slot<kVec>(out + off, y, t, P, C);
  if (t == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// The whole backward (kernels/layernorm.h) in one launch. Block b owns rows [128b, 128b + 128): its G groups
// take rows 128b + group, + G, ... With x̂ = (x − mean)·rstd and g = dout·w, per row: the group's Σg and Σg·x̂,
// dres = (dres_in ? dres_in : 0) + rstd·(g − mean(g) − x̂·mean(g·x̂)) and its bf16 copy, and dout·x̂, dout
// and dres_in added into the group's column sums (shared memory, G × 3 × Cp: dweight, dbias, dres_in_sum);
// then finish_column_sums (partials, the last block adds them). dres may be dres_in: each element is read,
// then written, by one thread.
template <bool kVec>
__global__ void __launch_bounds__(norm_act16::kMaxThreads) layernorm_act16_bwd_kernel(
    float* dres, uint16_t* dres16, float* dweight, float* dbias, float* dres_in_sum, const float* dres_in,
    const uint16_t* dout, const float* inp, const float* weight, const float* mean, const float* rstd,
    float* partials, unsigned* blocks_done, int N, int C, int P) {
  SFTDP_DYNAMIC_SHARED(float, acc);  // (G, 3, Cp)
  __shared__ float red[kGroupSumScratch];
  __shared__ unsigned finished_before;
  int parity = 0;
  const int G = blockDim.x / P, group = threadIdx.x / P, t = threadIdx.x % P, Cp = padded_width(C);
  float* const sums[3] = {dweight, dbias, dres_in ? dres_in_sum : nullptr};
  const bool column_sums = sums[0] || sums[1] || sums[2];
  // The group's sums (no shared memory at all, so no pointer into it, when nothing is summed).
  float* acc_w = column_sums ? acc + static_cast<size_t>(group) * 3 * Cp : nullptr;
  float* acc_b = column_sums ? acc_w + Cp : nullptr;
  float* acc_r = column_sums ? acc_b + Cp : nullptr;
  if (column_sums) zero_column_sums(acc, G * 3 * Cp / 4);
  const int r0 = blockIdx.x * kRowsPerChunk, r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  for (int first = r0; first < r1; first += G) {  // the same count for every group
    const int row = first + group;
    const bool live = row < r1;
    const int n = live ? row : r0;
    const size_t off = static_cast<size_t>(n) * C;
    float x[kSlot], dy[kSlot], v[kSlot];
    load_slot<kVec>(x, inp + off, t, P, C);
    load_slot<kVec>(dy, dout + off, t, P, C);
    const float m = mean[n], s = rstd[n];
    float g_sums[2] = {0.f, 0.f};  // Σg, Σg·x̂ (columns not there: g = 0)
    {
      float w[kSlot];
      load_slot<kVec>(w, weight, t, P, C);
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) {
        const float g = dy[k] * w[k];
        g_sums[0] += g;
        g_sums[1] += g * (x[k] - m) * s;
      }
    }
    group_sum(g_sums, P, red, parity);
    if (!live) continue;
    const float g_mean = g_sums[0] / C, gx_mean = g_sums[1] / C;
    {
      float w[kSlot];  // read again (L1) rather than held across the sums: registers, not spills
      load_slot<kVec>(w, weight, t, P, C);
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) {
        x[k] = (x[k] - m) * s;  // x̂ from here on
        v[k] = s * (dy[k] * w[k] - g_mean - x[k] * gx_mean);
      }
    }
    float din[kSlot] = {};
    if (dres_in) {
      load_slot<kVec>(din, dres_in + off, t, P, C);
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) v[k] = din[k] + v[k];
    }
    store_slot<kVec>(dres + off, v, t, P, C);
    if (dres16) store_slot<kVec>(dres16 + off, v, t, P, C);
    if (sums[2]) add_slot<kVec>(acc_r, din, t, P, C);
    if (sums[1]) add_slot<kVec>(acc_b, dy, t, P, C);
    if (sums[0]) {
      SFTDP_UNROLL
      for (int k = 0; k < kSlot; ++k) v[k] = x[k] * dy[k];  // x̂·dout
      add_slot<kVec>(acc_w, v, t, P, C);
    }
  }
  if (column_sums) finish_column_sums<3>(sums, partials, blocks_done, finished_before, acc, G, C);
}

void check_dims(const char* op, int N, int C) {
  SFTDP_ASSERT(N >= 0 && C > 0 && C <= kMaxWidth,
               std::string(op) + ": need N >= 0 and 0 < C <= " + std::to_string(kMaxWidth) +
                   " (one 8-column slot per thread, 1024 threads a row; got N=" + std::to_string(N) +
                   " C=" + std::to_string(C) + ")");
}

}  // namespace

void layernorm_fwd(uint16_t* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                   int N, int C, cudaStream_t stream) {
  check_dims("act16::layernorm_fwd", N, C);
  if (N == 0) return;
  const int P = row_threads(C), G = row_groups(P, kFwdThreads, N);
  const unsigned blocks = static_cast<unsigned>(ceil_div(N, G));
  if (C % kSlot == 0 && aligned16(out, inp, weight, bias))
    SFTDP_LAUNCH(layernorm_act16_fwd_kernel<true>, blocks, G * P, 0, stream, out, mean, rstd, inp, weight, bias, N, C,
                 P);
  else
    SFTDP_LAUNCH(layernorm_act16_fwd_kernel<false>, blocks, G * P, 0, stream, out, mean, rstd, inp, weight, bias, N,
                 C, P);
  CHECK_LAUNCH();
}

void layernorm_bwd(float* dres, uint16_t* dres16, float* dweight, float* dbias, float* dres_in_sum,
                   const float* dres_in, const uint16_t* dout, const float* inp, const float* weight,
                   const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  check_dims("act16::layernorm_bwd", N, C);
  if (N == 0) return;
  const int P = row_threads(C), G = row_groups(P, kBwdThreads, kRowsPerChunk), R = column_chunks(N);
  const bool column_sums = dweight || dbias || (dres_in && dres_in_sum);
  const size_t smem = column_sums ? static_cast<size_t>(G) * 3 * padded_width(C) * sizeof(float) : 0;
  const size_t n_partials = size_t{3} * R * padded_width(C);  // (3, R, Cp)
  float* partials = column_sums ? scratch_as<float>(Scratch::kColumnPartials, n_partials) : nullptr;
  unsigned* blocks_done = column_sums ? blocks_done_counter(stream) : nullptr;
  const bool vec = C % kSlot == 0 && aligned16(dres, dres16, dres_in, dout, inp, weight);
  static size_t allowed[2] = {0, 0};
  if (vec) {
    allow_dynamic_shared(reinterpret_cast<const void*>(&layernorm_act16_bwd_kernel<true>), smem, allowed[1]);
    SFTDP_LAUNCH(layernorm_act16_bwd_kernel<true>, R, G * P, smem, stream, dres, dres16, dweight, dbias, dres_in_sum,
                 dres_in, dout, inp, weight, mean, rstd, partials, blocks_done, N, C, P);
  } else {
    allow_dynamic_shared(reinterpret_cast<const void*>(&layernorm_act16_bwd_kernel<false>), smem, allowed[0]);
    SFTDP_LAUNCH(layernorm_act16_bwd_kernel<false>, R, G * P, smem, stream, dres, dres16, dweight, dbias, dres_in_sum,
                 dres_in, dout, inp, weight, mean, rstd, partials, blocks_done, N, C, P);
  }
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda::act16
