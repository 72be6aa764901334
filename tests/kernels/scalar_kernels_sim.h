// tests/kernels/scalar_kernels_sim.h — the memory-bound kernels of kernels/cuda/ as they were before issue 34
// item 3 vectorised them (one element per thread, grid-stride loops, 64-bit index division), bodies copied from
// commit 2067b05, with their launch sizes (elementwise_blocks then: ceil(n / 256) blocks, at most 65536): the
// references of test_cuda_vectorised_sim.cpp, whose new kernels must give these bits. Device code: the
// simulator build only, after cudasim/device.h (sim_test_util.h).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/lora.h"

namespace sftdp::test::scalar {

using cuda::block_sum;
using cuda::kWarp;

constexpr int kBlock = 256;
inline unsigned blocks(size_t n) {
  const size_t want = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(want < 65536 ? want : 65536);
}

// ---- residual.cu, gelu.cu, swiglu.cu -------------------------------------------------------------------------
__global__ static void residual_fwd_kernel(float* out, const float* a, const float* b, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
__device__ __forceinline__ float sigmoid(float z) { return 1.f / (1.f + expf(-z)); }

__global__ static void gelu_fwd_kernel(float* out, const float* inp, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    out[i] = x * sigmoid(2.f * kSqrt2OverPi * (x + kCubic * x * x * x));
  }
}

__global__ static void gelu_bwd_kernel(float* dinp, const float* inp, const float* dout, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float s = sigmoid(2.f * u), one_minus_s = sigmoid(-2.f * u);
    const float du_dx = kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
    dinp[i] = (s + 2.f * x * s * one_minus_s * du_dx) * dout[i];
  }
}

__global__ static void swiglu_fwd_kernel(float* out, const float* inp, int F, size_t total) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
    out[i] = g * sigmoid(g) * u;
  }
}

__global__ static void swiglu_bwd_kernel(float* dinp, const float* inp, const float* dout, int F, size_t total) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / F, f = i % F;
    const size_t gi = n * 2 * F + f, ui = gi + F;
    const float g = inp[gi], u = inp[ui], s = sigmoid(g), d = dout[i];
    dinp[gi] = d * u * s * (1.f + g * (1.f - s));
    dinp[ui] = d * g * s;
  }
}

// ---- gather.cu, encoder.cu ------------------------------------------------------------------------------------
template <bool kScatter>
__global__ static void copy_rows_kernel(float* out, const float* inp, const int32_t* idx, int C, size_t total) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = e / C, c = e % C;
    const size_t listed = static_cast<size_t>(idx[i]) * C + c, packed = i * C + c;
    if constexpr (kScatter)
      out[listed] = inp[packed];
    else
      out[packed] = inp[listed];
  }
}

__global__ static void encoder_fwd_kernel(float* out, const int32_t* inp, const int32_t* pos, const float* wte,
                                          const float* wpe, int T, int C, size_t total) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t bt = i / C, c = i % C;
    const size_t token = static_cast<size_t>(inp[bt]);
    if (wpe == nullptr) {
      out[i] = wte[token * C + c];
      continue;
    }
    const size_t p = pos ? static_cast<size_t>(pos[bt]) : bt % T;
    out[i] = wte[token * C + c] + wpe[p * C + c];
  }
}

// ---- adamw.cu, gemm.cu, lora.cu -------------------------------------------------------------------------------
__global__ static void adamw_kernel(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay,
                                    float lr, float b1, float b2, float eps, float weight_decay,
                                    float inv_bias_correction1, float inv_bias_correction2, float grad_scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = grads[i] * grad_scale;
    const float mi = b1 * m[i] + (1.f - b1) * g;
    const float vi = b2 * v[i] + (1.f - b2) * g * g;
    const float m_hat = mi * inv_bias_correction1;
    const float v_hat = vi * inv_bias_correction2;
    const float decay = i < n_decay ? weight_decay : 0.f;
    const float p = params[i];
    params[i] = p - lr * (m_hat / (sqrtf(v_hat) + eps) + decay * p);
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ static void add_bias_kernel(float* C, const float* bias, int M, int N, int ldc) {
  const size_t total = static_cast<size_t>(M) * N;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = idx / N, j = idx % N;
    C[i * ldc + j] += bias[j];
  }
}

__global__ static void lora_dropout_kernel(float* out, const float* inp, const int64_t* rows, uint64_t key, float p,
                                           float keep_scale, int T, int C, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / C;
    const int c = static_cast<int>(i % C), t = static_cast<int>(row % T);
    const float x = inp[i];
    out[i] = lora_hash::keep(key, rows[row / T], t, c, p) ? x * keep_scale : 0.0f;
  }
}

// ---- rope.cu --------------------------------------------------------------------------------------------------
__device__ __forceinline__ void cos_sin(double a, double* c, double* s) {
  constexpr double kTwoOverPi = 0.63661977236758134308;
  constexpr double kPio2Hi = 1.5707963267948966;
  constexpr double kPio2Mid = 6.123233995736766e-17;
  constexpr double kPio2Lo = -1.4973849048591698e-33;
  const double q = rint(a * kTwoOverPi);
  double r = fma(-q, kPio2Hi, a);
  r = fma(-q, kPio2Mid, r);
  r = fma(-q, kPio2Lo, r);
  const double r2 = r * r;
  double ps = -1.0 / 355687428096000.0;
  ps = fma(ps, r2, 1.0 / 1307674368000.0);
  ps = fma(ps, r2, -1.0 / 6227020800.0);
  ps = fma(ps, r2, 1.0 / 39916800.0);
  ps = fma(ps, r2, -1.0 / 362880.0);
  ps = fma(ps, r2, 1.0 / 5040.0);
  ps = fma(ps, r2, -1.0 / 120.0);
  ps = fma(ps, r2, 1.0 / 6.0);
  const double sin_r = fma(-r * r2, ps, r);
  double pc = 1.0 / 20922789888000.0;
  pc = fma(pc, r2, -1.0 / 87178291200.0);
  pc = fma(pc, r2, 1.0 / 479001600.0);
  pc = fma(pc, r2, -1.0 / 3628800.0);
  pc = fma(pc, r2, 1.0 / 40320.0);
  pc = fma(pc, r2, -1.0 / 720.0);
  pc = fma(pc, r2, 1.0 / 24.0);
  pc = fma(pc, r2, -1.0 / 2.0);
  const double cos_r = fma(r2, pc, 1.0);
  const int quadrant = static_cast<int>(static_cast<int64_t>(q) & 3);
  *s = quadrant == 0 ? sin_r : quadrant == 1 ? cos_r : quadrant == 2 ? -sin_r : -cos_r;
  *c = quadrant == 0 ? cos_r : quadrant == 1 ? -sin_r : quadrant == 2 ? -cos_r : sin_r;
}

template <bool kTranspose>
__global__ static void rope_kernel(float* qkv, const int32_t* positions, const float* inv_freq, int T, int NH,
                                   int KVH, int HS, size_t pairs) {
  const int half = HS / 2, heads = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(p % half);
    const int j = static_cast<int>((p / half) % heads);
    const size_t bt = p / (static_cast<size_t>(half) * heads);
    const int32_t pos = positions ? positions[bt] : static_cast<int32_t>(bt % T);
    double cos_a, sin_a;
    cos_sin(static_cast<double>(pos) * static_cast<double>(inv_freq[i]), &cos_a, &sin_a);
    const float c = static_cast<float>(cos_a), s = static_cast<float>(sin_a);
    float* x = qkv + bt * QKV + static_cast<size_t>(j) * HS;
    const float x0 = x[i], x1 = x[i + half];
    const float x0c = __fmul_rn(x0, c), x1s = __fmul_rn(x1, s), x1c = __fmul_rn(x1, c), x0s = __fmul_rn(x0, s);
    if (kTranspose) {
      x[i] = __fadd_rn(x0c, x1s);
      x[i + half] = __fsub_rn(x1c, x0s);
    } else {
      x[i] = __fsub_rn(x0c, x1s);
      x[i + half] = __fadd_rn(x1c, x0s);
    }
  }
}

// ---- cast.cu --------------------------------------------------------------------------------------------------
__global__ static void fp32_to_bf16_kernel(__nv_bfloat16* out, size_t ld_out, const float* inp, size_t ld_in,
                                           size_t len, size_t n) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t j = idx / len, i = idx % len;
    out[j * ld_out + i] = __float2bfloat16_rn(inp[j * ld_in + i]);
  }
}

__global__ static void bf16_to_fp32_kernel(float* out, const __nv_bfloat16* inp, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(inp[i]);
}

// ---- reduce.cu ------------------------------------------------------------------------------------------------
constexpr int kSumBlock = 512;
constexpr int kFinishBlock = 1024;
constexpr size_t kMaxPartials = 1024;
constexpr size_t kMinChunk = kSumBlock * 8;
constexpr int kColTile = 32;
constexpr int kColRows = 8;
constexpr int kRowsPerChunk = 128;

struct LoadDouble {
  const double* x;
  __device__ double operator()(size_t i) const { return x[i]; }
};
struct LoadSquare {
  const float* x;
  __device__ double operator()(size_t i) const {
    const double v = x[i];
    return v * v;
  }
};

template <class Load>
__global__ static void partial_sums_kernel(double* partials, Load load, size_t n, size_t chunk) {
  __shared__ double shared[kWarp];
  const size_t begin = static_cast<size_t>(blockIdx.x) * chunk;
  const size_t end = begin + chunk < n ? begin + chunk : n;
  double acc = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += load(i);
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ static void finish_sum_kernel(float* dst, const double* partials, int P, bool accumulate) {
  __shared__ double shared[kWarp];
  double acc = 0.0;
  for (int i = threadIdx.x; i < P; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) dst[0] = static_cast<float>(accumulate ? static_cast<double>(dst[0]) + acc : acc);
}

// chunk and number of partials of two_pass_sum for n items
inline size_t sum_chunk(size_t n) {
  const size_t c = (n + kMaxPartials - 1) / kMaxPartials;
  return c > kMinChunk ? c : kMinChunk;
}

__global__ static void column_partials_kernel(float* partials, const float* x, int N, int C) {
  __shared__ float tile[kColRows][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int r0 = blockIdx.y * kRowsPerChunk;
  const int r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float acc = 0.f;
  if (c < C)
    for (int n = r0 + threadIdx.y; n < r1; n += kColRows) acc += x[static_cast<size_t>(n) * C + c];
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum = 0.f;
    for (int j = 0; j < kColRows; ++j) sum += tile[j][threadIdx.x];
    partials[static_cast<size_t>(blockIdx.y) * C + c] = sum;
  }
}

}  // namespace sftdp::test::scalar
