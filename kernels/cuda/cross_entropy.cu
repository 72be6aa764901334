// kernels/cuda/cross_entropy.cu — masked cross-entropy fused with its backward on the GPU
// (kernels/cross_entropy.h), in the spirit of llm.c's fused classifier. N rows, V vocab.
// Pass 1: one block per row, online max and sum over the logits, the row's loss w·(lse − x_target)
// and weight w written (fp64) to scratch, dlogits = w·(softmax − onehot) written (in place allowed).
// Pass 2: sums[0] += Σ loss, sums[1] += Σ w, each a fixed-order fp64 reduction (reduce.cu).
// No atomics, and nothing is divided by a count. Rows with w == 0 write dlogits = 0, add nothing.
#include <string>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/reduce.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 512;

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

__global__ void __launch_bounds__(kBlock)
    cross_entropy_rows_kernel(double* row_loss, double* row_weight, float* dlogits, const float* logits,
                              const int32_t* targets, const float* weights, int V) {
  __shared__ MaxSum shared[kWarp];
  const size_t n = blockIdx.x;
  const float w = weights[n];
  const float* x = logits + n * V;
  float* dx = dlogits ? dlogits + n * V : nullptr;
  if (w == 0.f) {  // uniform over the block: every thread leaves here or none does
    if (dx)
      for (int v = threadIdx.x; v < V; v += blockDim.x) dx[v] = 0.f;
    if (threadIdx.x == 0) {
      row_loss[n] = 0.0;
      row_weight[n] = 0.0;
    }
    return;
  }
  const int target = targets[n];
  const bool target_ok = target >= 0 && target < V;
  // Read before any thread writes dx (dx may alias x); block_combine's barrier orders the two.
  const float x_target = target_ok ? x[target] : 0.f;

  MaxSum acc{-INFINITY, 0.f};
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float xv = x[v];
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
      const float p = expf(x[v] - row.m) * inv_sum;
      dx[v] = w * (p - (v == target ? 1.f : 0.f));
    }
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
  SFTDP_LAUNCH(cross_entropy_rows_kernel, static_cast<unsigned>(N), kBlock, 0, stream, row_loss, row_weight, dlogits,
               logits, targets, weights, V);
  CHECK_LAUNCH();
  sum_into(sums + 0, row_loss, static_cast<size_t>(N), /*accumulate=*/true, stream);
  sum_into(sums + 1, row_weight, static_cast<size_t>(N), /*accumulate=*/true, stream);
}

}  // namespace sftdp::cuda
