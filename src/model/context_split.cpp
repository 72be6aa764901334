// src/model/context_split.cpp — see context_split.h.
#include "model/context_split.h"

#include <string>

#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::model {

ContextSplit context_split(int T, int world, int rank, int n) {
  if (const std::string problem = config::context_parallelism_problem(n, T, world); !problem.empty())
    throw UserError("context_parallelism: " + problem);
  SFTDP_ASSERT(rank >= 0 && rank < world, "context_split: rank outside the world");
  ContextSplit s;
  s.n = n, s.group = rank / n, s.index = rank % n, s.T = T;
  const int c = T / (2 * n);
  for (int chunk : {s.index, 2 * n - 1 - s.index})
    for (int i = 0; i < c; ++i) s.positions.push_back(chunk * c + i);
  return s;
}

data::Batch local_batch(const data::Batch& full, const ContextSplit& split) {
  SFTDP_ASSERT(full.T == split.T, "local_batch: the batch's T is not the split's");
  data::Batch b;
  const int Tl = split.local_T();
  b.B = full.B, b.T = Tl;
  b.row_ids = full.row_ids;
  const size_t n = static_cast<size_t>(full.B) * Tl;
  b.inputs.resize(n), b.targets.resize(n), b.loss_weights.resize(n), b.positions.resize(n);
  if (full.has_segments()) b.segment_ids.resize(n);
  for (int r = 0; r < full.B; ++r)
    for (int t = 0; t < Tl; ++t) {
      const size_t from = static_cast<size_t>(r) * full.T + split.positions[t], to = static_cast<size_t>(r) * Tl + t;
      b.inputs[to] = full.inputs[from];
      b.targets[to] = full.targets[from];
      b.loss_weights[to] = full.loss_weights[from];
      b.positions[to] = full.has_positions() ? full.positions[from] : split.positions[t];
      if (full.has_segments()) b.segment_ids[to] = full.segment_ids[from];
    }
  return b;
}

}  // namespace sftdp::model
