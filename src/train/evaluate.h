// src/train/evaluate.h — token-weighted evaluation over the whole eval set (or its first
// eval_steps global batches): Σ loss sums / Σ weight sums across all ranks, never a mean of
// batch means. Rows are split across ranks like training micro-batches.
#pragma once
#include <cstdint>

#include "sftdp/comm.h"
#include "sftdp/data.h"
#include "sftdp/model.h"

namespace sftdp::train {

struct EvalResult {
  double loss = 0, weight_sum = 0;
};

// micro_batch: rows per rank per forward; eval_steps < 0: every row.
EvalResult evaluate(model::Gpt2& model, const data::Dataset& eval, comm::Communicator& comm,
                    int64_t micro_batch, int64_t eval_steps);

}  // namespace sftdp::train
