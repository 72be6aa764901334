// tests/common/rank_batches.h — what the MPI data-parallel tests share: a small GPT-2 and the
// micro-batch each rank feeds it at each micro-step (its own seeded rows, fractional loss
// weights, some zero), so every rank's gradients differ and the reduction has something to do.
#pragma once
#include "common/test_util.h"
#include "sftdp/config.h"
#include "sftdp/data.h"

namespace sftdp::test {

inline config::ModelDims small_gpt2_dims() {
  config::ModelDims d;
  d.L = 2, d.NH = 2, d.C = 16, d.F = 32, d.V = 29, d.maxT = 8;
  return d;
}

// B rows of T tokens for (rank, micro-step): deterministic in both.
inline data::Batch rows_of_rank(int rank, int step, int B, int T, int V) {
  data::Batch b;
  b.B = B, b.T = T;
  b.inputs = uniform_int(size_t(B) * T, 100 * step + rank, V);
  b.targets = uniform_int(size_t(B) * T, 100 * step + rank + 50, V);
  b.loss_weights = uniform(size_t(B) * T, 7 * step + rank, 0.0f, 1.0f);
  return b;
}

}  // namespace sftdp::test
