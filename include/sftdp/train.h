// sftdp/train.h — the one trainer loop, shared by CPU and GPU and by every world size:
// sampler → per-rank micro-batches → forward/backward (gradient sums) → one allreduce →
// division by the global weight sum → clip → AdamW → metrics, checkpoints, evaluation.
#pragma once
#include <string>

#include "sftdp/comm.h"
#include "sftdp/config.h"

namespace sftdp::train {

struct RunPaths {
  std::string run_dir, checkpoint_dir, metrics_path;
};
RunPaths paths_of(const config::Config& cfg);

// Trains to completion. Returns 0; throws UserError for bad input found on every rank.
// A bad input found by one rank alone (a corrupt row) aborts the job with exit status 2.
int run(const config::Config& cfg, comm::MpiSession& mpi);

}  // namespace sftdp::train
