// kernels/cpu/cross_entropy.cpp — masked cross-entropy fused with its backward, CPU twin
// (see kernels/cross_entropy.h). Legend: N rows (= B·T), V vocab.
// sums[0] += Σ w·(logsumexp − logit[target]), sums[1] += Σ w, both reduced in fp64 in row order
// after the parallel per-row pass, so the bits never depend on the thread count. dlogits (=)
// may be null, or exactly logits (in place); partially overlapping buffers are not supported.
// Row loops keep LANES independent float accumulators at fixed positions (element i goes to
// lane i mod LANES), which GCC vectorises without reassociating anything.
#include "kernels/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/act16_util.h"
#include "kernels/cpu/vec_math.h"
#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {

constexpr int kLanes = 16;

float row_max(const float* x, int V) {
  float lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = -std::numeric_limits<float>::infinity();
  int i = 0;
  for (; i + kLanes <= V; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  for (; i < V; ++i) lane[i % kLanes] = x[i] > lane[i % kLanes] ? x[i] : lane[i % kLanes];
  float m = lane[0];
  for (int j = 1; j < kLanes; ++j) m = lane[j] > m ? lane[j] : m;
  return m;
}

// Σ_i e^{x_i − max}, lanes combined in fp64 in lane order. With kStore the exponentials are
// written back over x (x is then the dlogits row, still to be scaled).
template <bool kStore>
double row_sum_exp(float* x, int V, float max) {
  float lane[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float e = vec_exp(x[i + j] - max);
      if constexpr (kStore) x[i + j] = e;
      lane[j] += e;
    }
  }
  for (; i < V; ++i) {
    const float e = vec_exp(x[i] - max);
    if constexpr (kStore) x[i] = e;
    lane[i % kLanes] += e;
  }
  double sum = 0.0;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

}  // namespace

void cross_entropy_fwd_bwd(float* sums,                                   // (2) +=
                           float* dlogits,                                // (N,V) = or null
                           const float* logits,                           // (N,V)
                           const int32_t* targets, const float* weights,  // (N) (N)
                           int N, int V) {
  // Per-row losses, reduced after the parallel pass. Grow-only, per calling thread: no allocation
  // per step once the largest N has been seen (every row is written below before it is read).
  // (The OpenMP threads reach it through this pointer: thread_local names their own copies.)
  thread_local std::vector<double> row_loss_buffer;
  if (row_loss_buffer.size() < static_cast<size_t>(N)) row_loss_buffer.resize(static_cast<size_t>(N));
  double* const row_loss = row_loss_buffer.data();
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * V;
    const float* x = logits + off;
    float* dx = dlogits ? dlogits + off : nullptr;
    const float w = weights[n];
    if (w == 0.0f) {  // prompt / padding token: no loss, no gradient
      if (dx) std::memset(dx, 0, static_cast<size_t>(V) * sizeof(float));
      row_loss[static_cast<size_t>(n)] = 0.0;
      continue;
    }
    const int target = targets[n];
    SFTDP_ASSERT(target >= 0 && target < V, "cross_entropy_fwd_bwd: target out of [0, V)");
    const float max = row_max(x, V);
    const float x_target = x[target];  // read before an in-place dlogits overwrites it
    double sum_exp;
    if (dx) {
      if (dx != x) std::memcpy(dx, x, static_cast<size_t>(V) * sizeof(float));
      sum_exp = row_sum_exp<true>(dx, V, max);
      const float scale = static_cast<float>(w / sum_exp);  // dx = w·softmax
      for (int i = 0; i < V; ++i) dx[i] *= scale;
      dx[target] -= w;  // − w·onehot
    } else {
      sum_exp = row_sum_exp<false>(const_cast<float*>(x), V, max);  // reads only
    }
    row_loss[static_cast<size_t>(n)] =
        static_cast<double>(w) * (static_cast<double>(max) + std::log(sum_exp) - x_target);
  }
  double loss_sum = 0.0, weight_sum = 0.0;
  for (int n = 0; n < N; ++n) {  // fixed order, one thread
    loss_sum += row_loss[static_cast<size_t>(n)];
    weight_sum += weights[n];
  }
  sums[0] = static_cast<float>(sums[0] + loss_sum);
  sums[1] = static_cast<float>(sums[1] + weight_sum);
}

namespace act16 {

void cross_entropy_fwd_bwd(float* sums, uint16_t* dlogits, const uint16_t* logits, int ld, const int32_t* targets,
                           const float* weights, int N, int V) {
  SFTDP_ASSERT(N >= 0 && V > 0 && ld >= V, "act16::cross_entropy_fwd_bwd: need N >= 0, V > 0, ld >= V");
  // The fp32 twin on the widened rows, then each dlogit rounded once (kernels/act16.h).
  std::vector<float> x = widen(logits, N, V, ld);
  cpu::cross_entropy_fwd_bwd(sums, dlogits ? x.data() : nullptr, x.data(), targets, weights, N, V);
  if (dlogits) narrow(dlogits, x.data(), N, V, ld);
}

}  // namespace act16

}  // namespace sftdp::cpu
