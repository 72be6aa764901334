// src/train/checkpoint_shards.h — which floats of a sharded checkpoint (SPEC §5, issue 36) each rank
// writes and reads, as a pure function of the sharding (rank_runs), and the two moves between a
// rank's device buffers and the checkpoint: snapshot (what it writes, copied to the host) and
// read_into (what it needs, from whichever shard files hold it). Neither makes a collective, so a
// rank's part can be written or read at any world size, by the trainer or a test alone.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

#include "sftdp/checkpoint.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

namespace sftdp::train {

// How the trainable floats are spread over the ranks.
struct Sharding {
  size_t total = 0, n_decay = 0;     // the trainable layout's
  std::vector<model::Unit> units;    // its units (ZeroUnits' sharding)
  int zero_stage = 0;
  bool bf16_weights = false;
  bool units_sharded() const { return zero_stage >= 2 || (zero_stage == 1 && bf16_weights); }
};
Sharding sharding_of(const model::Model& model, int zero_stage);

// Floats [begin, begin + count) of the flat layout, at `local` of the rank's buffer that holds them.
struct Held {
  size_t begin = 0, count = 0, local = 0;
};
struct RankRuns {
  std::array<std::vector<Held>, checkpoint::kGroups> write;  // params, m, v: what this rank writes
  std::vector<checkpoint::Run> read_params, read_moments;    // what this rank reads back
};
// Every float of each group is written by exactly one rank: replicated floats (stage 0; stage 1's
// fp32 parameters) as 1/world of each tensor's elements per rank, ZeroShard's tail by rank world-1.
RankRuns rank_runs(const Sharding& s, int rank, int world);
// The write runs without their local offsets (what commit_index names).
checkpoint::Runs runs_only(const RankRuns& r);

// This rank's part, copied to the host (the only time training waits for a checkpoint).
checkpoint::HostShard snapshot(model::Model& model, optim::AdamW& opt, int zero_stage, int rank, int world);
// The same into `out`, whose buffers keep their allocation when they have the size already (a
// run's every checkpoint: the saver's copy is allocated once).
void snapshot(model::Model& model, optim::AdamW& opt, int zero_stage, int rank, int world, checkpoint::HostShard& out);
// Bytes of this rank's part (parameters, m and v): its shard file's data and its host copy.
size_t shard_bytes(const Sharding& s, int rank, int world);
// This rank's parameters and moments from `reader`, in chunks of at most kRestoreChunkFloats.
// Throws UserError (a damaged or missing shard, a non-finite value): the model is then partly loaded.
void read_into(checkpoint::Reader& reader, model::Model& model, optim::AdamW& opt, int zero_stage, int rank,
               int world);

}  // namespace sftdp::train
