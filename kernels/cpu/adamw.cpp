// kernels/cpu/adamw.cpp — fused AdamW step and the deterministic sum of squares, CPU twin
// (see kernels/adamw.h). Both split the flat buffer into fixed-size blocks, never into one chunk
// per thread, so every element takes the same code path and every partial sum covers the same
// elements whatever the thread count: the results are bitwise identical for any OMP_NUM_THREADS.
// The AdamW loop vectorises only because the library is built with -fno-math-errno (CMakeLists).
#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sftdp::cpu {

namespace {
constexpr size_t kBlock = 8192;  // elements per work item / per fp64 partial sum
constexpr int kLanes = 16;       // independent fp64 accumulators inside one block

// One AdamW element update; wd is 0 outside [0, n_decay).
inline void adamw_element(float& p, float& m, float& v, float g, float b1, float b2, float eps,
                          float lr, float wd, float inv_bc1, float inv_bc2) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  const float m_hat = m * inv_bc1, v_hat = v * inv_bc2;
  p -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * p);
}
}  // namespace

void adamw_update(float* params, float* m, float* v,             // (N) all updated
                  const float* grads, size_t N, size_t n_decay,  // (N)
                  float lr, float b1, float b2, float eps, float weight_decay, int t,
                  float grad_scale) {
  // bias corrections in fp64, once: 1 − b^t loses digits in float for b2 near 1
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
  const long long n_blocks = static_cast<long long>((N + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long long blk = 0; blk < n_blocks; ++blk) {
    const size_t lo = static_cast<size_t>(blk) * kBlock, hi = std::min(N, lo + kBlock);
    const size_t split = std::clamp(n_decay, lo, hi);  // [lo, split) decays, [split, hi) not
    for (size_t i = lo; i < split; ++i)
      adamw_element(params[i], m[i], v[i], grads[i] * grad_scale, b1, b2, eps, lr, weight_decay,
                    inv_bc1, inv_bc2);
    for (size_t i = split; i < hi; ++i)
      adamw_element(params[i], m[i], v[i], grads[i] * grad_scale, b1, b2, eps, lr, 0.0f,
                    inv_bc1, inv_bc2);
  }
}

void adamw_step(float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay,
                const AdamwHyper* hyper, const float* sums, const float* sumsq, AdamwStats* stats) {
  const AdamwHyper& h = *hyper;
  AdamwStats s{};
  s.weight_sum = sums[1];
  if (!(s.weight_sum > 0)) {  // no token counted anywhere: nothing to learn from
    s.skipped = 1;
    *stats = s;
    return;
  }
  s.loss = sums[0] / s.weight_sum;
  s.grad_norm = std::sqrt(static_cast<double>(sumsq[0])) / s.weight_sum;
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    s.nonfinite = 1;
    *stats = s;
    return;
  }
  const double clip = h.clip > 0 && s.grad_norm > h.clip ? h.clip / s.grad_norm : 1.0;
  const float grad_scale = static_cast<float>(clip / s.weight_sum);
  const long long n_blocks = static_cast<long long>((N + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long long blk = 0; blk < n_blocks; ++blk) {
    const size_t lo = static_cast<size_t>(blk) * kBlock, hi = std::min(N, lo + kBlock);
    for (size_t i = lo; i < hi; ++i)
      adamw_element(params[i], m[i], v[i], grads[i] * grad_scale, h.b1, h.b2, h.eps, h.lr,
                    i < n_decay ? h.weight_decay : 0.0f, h.inv_bias_correction1, h.inv_bias_correction2);
  }
  *stats = s;
}

void sum_squares(float* out, const float* x, size_t N) {  // (1) = ; (N)
  const size_t n_blocks = (N + kBlock - 1) / kBlock;
  // Grow-only per calling thread: no allocation per step (every block is written before it is
  // read). The OpenMP threads reach it through the pointer: thread_local names their own copies.
  thread_local std::vector<double> partial_buffer;
  if (partial_buffer.size() < n_blocks) partial_buffer.resize(n_blocks);
  double* const partial = partial_buffer.data();
#pragma omp parallel for schedule(static)
  for (long long blk = 0; blk < static_cast<long long>(n_blocks); ++blk) {
    const size_t lo = static_cast<size_t>(blk) * kBlock, hi = std::min(N, lo + kBlock);
    double lane[kLanes] = {};  // element i goes to lane (i − lo) mod kLanes: a fixed order
    size_t i = lo;
    for (; i + kLanes <= hi; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const double xi = x[i + j];
        lane[j] += xi * xi;
      }
    for (; i < hi; ++i) lane[(i - lo) % kLanes] += static_cast<double>(x[i]) * x[i];
    double s = 0.0;
    for (int j = 0; j < kLanes; ++j) s += lane[j];
    partial[static_cast<size_t>(blk)] = s;
  }
  double total = 0.0;
  for (size_t blk = 0; blk < n_blocks; ++blk) total += partial[blk];  // blocks in order, one thread
  out[0] = static_cast<float>(total);
}

}  // namespace sftdp::cpu
