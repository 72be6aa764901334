// src/train/evaluate.cpp — see evaluate.h. Chunk c covers rows [c·world·b, (c+1)·world·b);
// rank r takes its b-row slice of the chunk (possibly short or empty at the end). With context
// parallelism "world" and "rank" are the data-parallel groups: every rank of a group the same slice.
#include "train/evaluate.h"

#include <algorithm>
#include <vector>

namespace sftdp::train {

EvalResult evaluate(model::Model& model, const data::Dataset& eval, comm::Communicator& comm,
                    int64_t micro_batch, int64_t global_batch, int64_t eval_steps) {
  // Context parallelism: a group's ranks take the same rows (each forward keeps its share of them).
  const int64_t cp = model.context_parallelism(), world = comm.world() / cp, rank = comm.rank() / cp;
  const int64_t N = eval_steps >= 0 ? std::min(eval.rows(), eval_steps * global_batch) : eval.rows();
  const int64_t chunk = world * micro_batch;
  const int64_t chunks = (N + chunk - 1) / chunk;
  double sums[2] = {0, 0};
  data::Batch batch;
  std::vector<int64_t> rows;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = std::min(N, c * chunk + rank * micro_batch);
    const int64_t hi = std::min(N, lo + micro_batch);
    if (hi <= lo) {  // nothing left for this rank; ZeRO-3 still makes the pass's gathers with the others
      if (model.zero_stage() >= 3) model.forward(data::Batch{});
      continue;
    }
    rows.clear();
    for (int64_t r = lo; r < hi; ++r) rows.push_back(r);
    eval.read_rows(rows, batch);
    const auto s = model.forward(batch);
    sums[0] += s.loss_sum;
    sums[1] += s.weight_sum;
  }
  comm.allreduce_sum_host(sums, 2);
  return {sums[1] > 0 ? sums[0] / sums[1] : 0.0, sums[1]};
}

}  // namespace sftdp::train
