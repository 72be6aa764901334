// kernels/cuda/layernorm.cu — LayerNorm over the last dim on the GPU (kernels/layernorm.h), eps
// 1e-5. N rows (= B*T), C channels; one warp per row. mean/rstd are fp32 and saved for backward.
// Accumulation: dinp +=, dweight +=, dbias +=. dweight/dbias are reduced without atomics: per
// chunk of kRowsPerChunk rows a block writes column partials, then reduce.cu adds the chunks into
// dweight/dbias in chunk order (fixed by N alone).
#include <string>

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
