// kernels/cuda/cross_entropy.cu — masked cross-entropy fused with its backward on the GPU
// (kernels/cross_entropy.h), in the spirit of llm.c's fused classifier. N rows, V vocab.
// Pass 1: one block per row, online max and sum over the logits, the row's loss w·(lse − x_target)
// and weight w written (fp64) to scratch, dlogits = w·(softmax − onehot) written (in place allowed).
// Pass 2: sums[0] += Σ loss, sums[1] += Σ w, each a fixed-order fp64 reduction (reduce.cu).
// No atomics, and nothing is divided by a count. Rows with w == 0 write dlogits = 0, add nothing.
// act16::cross_entropy_fwd_bwd (kernels/act16.h): the same pass on bf16 logits at a padded row stride (math in fp32,
// dlogits rounded once), then one block adds both row sums (two launches in all).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/reduce.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 512;
// A row's block is no wider than the row: a vocabulary below kBlock gets one thread per logit (rounded up to
// whole warps) instead of kBlock threads of which most find nothing to do and still join every reduction step.
unsigned row_block(int V) { return static_cast<unsigned>(std::min(kBlock, (V + kWarp - 1) / kWarp * kWarp)); }

// Running (max, Σ exp(x − max)) of a set of logits; s == 0 means the empty set.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (b.s == 0.f) return a;
  if (a.s == 0.f) return b;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Combine over the block in a fixed tree (warp butterflies, then warp 0 over the warp results);
// every thread gets the result. `shared` holds 32 MaxSum.
__device__ MaxSum block_combine(MaxSum v, MaxSum* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = combine(v, other);
  }
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : MaxSum{-INFINITY, 0.f};
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = combine(v, other);
  }
  return v;
}

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// T: the logits' storage, fp32 (rows at stride V) or bf16 (the act16 path: rows at stride ld, math in fp32, each
// dlogit rounded once).
template <class T>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_rows_kernel(double* row_loss, double* row_weight, T* dlogits, const T* logits, int ld,
                              const int32_t* targets, const float* weights, int V) {
  __shared__ MaxSum shared[kWarp];
  const size_t n = blockIdx.x;
  const float w = weights[n];
  const T* x = logits + n * ld;
  T* dx = dlogits ? dlogits + n * ld : nullptr;
  if (w == 0.f) {  // uniform over the block: every thread leaves here or none does
    if (dx)
      for (int v = threadIdx.x; v < V; v += blockDim.x) dx[v] = narrow<T>(0.f);
    if (threadIdx.x == 0) {
      row_loss[n] = 0.0;
      row_weight[n] = 0.0;
    }
    return;
  }
  const int target = targets[n];
  const bool target_ok = target >= 0 && target < V;
  // Read before any thread writes dx (dx may alias x); block_combine's barrier orders the two.
  const float x_target = target_ok ? widen(x[target]) : 0.f;

  MaxSum acc{-INFINITY, 0.f};
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float xv = widen(x[v]);
    if (xv > acc.m) {
      acc.s = acc.s * expf(acc.m - xv) + 1.f;  // expf(-inf) = 0 on the first element
      acc.m = xv;
    } else if (acc.s != 0.f) {
      acc.s += expf(xv - acc.m);
    }  // else: -inf before any finite logit, exp(-inf) = 0 adds nothing
    if (xv != xv) acc.s = xv;  // a NaN logit poisons the row's sum instead of vanishing
  }
  const MaxSum row = block_combine(acc, shared);
  const float inv_sum = 1.f / row.s;

  if (threadIdx.x == 0) {
    const double lse = static_cast<double>(row.m) + log(static_cast<double>(row.s));
    // A target outside [0, V) on a counted row is a data error: the loss becomes NaN, visibly.
    row_loss[n] = target_ok ? static_cast<double>(w) * (lse - static_cast<double>(x_target)) : nan("");
    row_weight[n] = w;
  }
  if (dx) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float p = expf(widen(x[v]) - row.m) * inv_sum;
      dx[v] = narrow<T>(w * (p - (v == target ? 1.f : 0.f)));
    }
  }
}

// sums[0] += Σ row_loss, sums[1] += Σ row_weight over N rows, one block, each sum in fp64 in a fixed order (every
// thread its strided rows, then block_sum's tree), added to the fp32 sum in fp64 and rounded once (as the CPU twin).
__global__ void __launch_bounds__(1024)
    finish_two_sums_kernel(float* sums, const double* row_loss, const double* row_weight, int N) {
  __shared__ double shared[kWarp];
  double loss = 0.0, weight = 0.0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) loss += row_loss[i], weight += row_weight[i];
  loss = block_sum(loss, shared);
  weight = block_sum(weight, shared);
  if (threadIdx.x == 0) {
    sums[0] = static_cast<float>(static_cast<double>(sums[0]) + loss);
    sums[1] = static_cast<float>(static_cast<double>(sums[1]) + weight);
  }
}

}  // namespace

void cross_entropy_fwd_bwd(float* sums, float* dlogits, const float* logits, const int32_t* targets,
                           const float* weights, int N, int V, cudaStream_t stream) {
  SFTDP_ASSERT(N >= 0 && V > 0, "cross_entropy_fwd_bwd: need N >= 0 and V > 0 (got N=" + std::to_string(N) +
                                    " V=" + std::to_string(V) + ")");
  if (N == 0) return;
  double* row_loss = scratch_as<double>(Scratch::kCrossEntropyRows, 2 * static_cast<size_t>(N));
  double* row_weight = row_loss + N;
  SFTDP_LAUNCH(cross_entropy_rows_kernel<float>, static_cast<unsigned>(N), row_block(V), 0, stream, row_loss, row_weight,
               dlogits, logits, V, targets, weights, V);
  CHECK_LAUNCH();
  sum_into(sums + 0, row_loss, static_cast<size_t>(N), /*accumulate=*/true, stream);
  sum_into(sums + 1, row_weight, static_cast<size_t>(N), /*accumulate=*/true, stream);
}

namespace act16 {

void cross_entropy_fwd_bwd(float* sums, uint16_t* dlogits, const uint16_t* logits, int ld, const int32_t* targets,
                           const float* weights, int N, int V, cudaStream_t stream) {
  SFTDP_ASSERT(N >= 0 && V > 0 && ld >= V, "act16::cross_entropy_fwd_bwd: need N >= 0, V > 0, ld >= V (got N=" +
                                               std::to_string(N) + " V=" + std::to_string(V) +
                                               " ld=" + std::to_string(ld) + ")");
  if (N == 0) return;
  double* row_loss = scratch_as<double>(Scratch::kCrossEntropyRows, 2 * static_cast<size_t>(N));
  double* row_weight = row_loss + N;
  SFTDP_LAUNCH(cross_entropy_rows_kernel<__nv_bfloat16>, static_cast<unsigned>(N), row_block(V), 0, stream, row_loss,
               row_weight, reinterpret_cast<__nv_bfloat16*>(dlogits), reinterpret_cast<const __nv_bfloat16*>(logits),
               ld, targets, weights, V);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(finish_two_sums_kernel, 1, 1024, 0, stream, sums, row_loss, row_weight, N);
  CHECK_LAUNCH();
}

}  // namespace act16

}  // namespace sftdp::cuda
