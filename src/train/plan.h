// src/train/plan.h — `sft_train --plan` (SPEC §2): what each rank of a run of this config would
// hold, for a cluster this machine need not be part of (its rank count, ranks per node and memory
// per GPU or per node), computed by the real run's own memory plan (memory_plan.h) without
// allocating anything, opening the data files, starting MPI or needing the hardware.
#pragma once
#include <cstdio>

#include "sftdp/config.h"

namespace sftdp::train {

struct PlanTarget {
  int ranks = 1;           // --ranks: the world size
  int ranks_per_node = 0;  // --ranks-per-node; 0: every rank on one node
  double memory_gib = 0;   // --memory-gib: per GPU (hardware gpu) or per node (cpu); 0: this machine's
};

// Prints the plan to out: the model and batch, a table per component (and what the ZeRO shards,
// unit slots, kernel scratch and host copies take of them) for zero_stage 0 to 3 at the config's
// remat, the totals with the other remat, whether each fits, and for the config's own choice the
// line the real run logs. Returns 0 when it fits; throws the real run's UserError ("memory: this rank
// needs ... but ... is available ...; would fit: ...") when it does not, or one for a bad config.
int print_plan(const config::Config& cfg, const PlanTarget& target, std::FILE* out);

}  // namespace sftdp::train
