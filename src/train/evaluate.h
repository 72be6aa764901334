// src/train/evaluate.h — token-weighted evaluation over the whole eval set (or its first
// eval_steps global batches): Σ loss sums / Σ weight sums across all ranks, never a mean of
// batch means. Rows are split across ranks in chunks of world × micro-batch rows.
#pragma once
#include <cstdint>

#include "sftdp/comm.h"
#include "sftdp/data.h"
#include "sftdp/model.h"

namespace sftdp::train {

struct EvalResult {
  double loss = 0, weight_sum = 0;
};

// micro_batch: rows per rank per forward. eval_steps < 0: every row; else the first
// eval_steps × global_batch rows, so the rows evaluated do not depend on world size or GA.
EvalResult evaluate(model::Model& model, const data::Dataset& eval, comm::Communicator& comm,
                    int64_t micro_batch, int64_t global_batch, int64_t eval_steps);

}  // namespace sftdp::train
