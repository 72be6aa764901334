// src/model/context_split.h — context parallelism's layout (SPEC §1 "Context parallelism", issue 37):
// which ranks form a group, which positions of every row each holds, and a rank's share of a batch.
// world = (world / N) data-parallel groups × N ranks; group g is ranks g·N … g·N + N − 1 (adjacent
// ranks, so that a group shares a node where the placement allows). A row's T positions are cut into
// 2N chunks of T/(2N); the rank at index i of its group holds chunks i and 2N−1−i, in that order:
// the same causal attention work on every rank. Pure functions: no collective, no allocation beyond
// what they return.
#pragma once
#include <cstdint>
#include <vector>

#include "sftdp/data.h"

namespace sftdp::model {

struct ContextSplit {
  int n = 1;           // ranks per group (context_parallelism)
  int group = 0;       // which data-parallel group this rank is in (0 … world/n − 1)
  int index = 0;       // its index in the group (0 … n − 1)
  int T = 0;           // the rows' full length
  std::vector<int32_t> positions;  // the T/n global positions it holds, in its local order
  int local_T() const { return static_cast<int>(positions.size()); }
};

// Throws UserError naming context_parallelism when n does not divide world or 2n does not divide T.
ContextSplit context_split(int T, int world, int rank, int n);

// This rank's share of `full` (B rows of T positions): inputs, targets, loss weights and segment ids
// at its positions, and positions explicit and global (the file's, or 0 … T−1 where it has none).
// The rows' own ids are kept (LoRA dropout masks are seeded by them).
data::Batch local_batch(const data::Batch& full, const ContextSplit& split);

}  // namespace sftdp::model
