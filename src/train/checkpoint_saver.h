// src/train/checkpoint_saver.h — how sft_train saves a sharded checkpoint (SPEC §5, issue 36), in
// the background or not. At a step boundary every rank copies its shard to the host (snapshot: the
// only time training waits) into a buffer it keeps; with async_checkpointing a thread writes it
// (write_shard: temporary name, fsync, rename) while the next steps run, else the rank writes it at
// once. A write in flight is committed at the first step boundary where every rank's has finished
// (the stop-signal allreduce carries the flags): the ranks agree that all succeeded — else the
// lowest failing rank's "cannot write checkpoint ..." ends the job, exit 1, the previous checkpoint
// untouched — and rank 0 writes index.h5 last and prunes to keep_checkpoints. One save in flight: the
// next save, the final one and a stop wait for it (finish).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "sftdp/checkpoint.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "sftdp/train.h"

namespace sftdp::train {

// Whether this run writes its checkpoints in the background (async_checkpointing, SPEC §5), the
// same on every rank (collective): "false" never; otherwise the host copy of this rank's shard
// must fit the host memory its node gives it — on CPU ranks the memory plan counted it already; GPU
// ranks check it against MemAvailable shared by the ranks on the node — and HDF5 must be built
// thread-safe. Where either fails, "" (the default) writes at the step boundary and says why;
// "true" is a UserError naming the key and the figures. Logs the choice (rank 0).
bool choose_async_checkpointing(const config::Config& cfg, const model::Model& model, comm::Communicator& comm,
                                bool gpu, int ranks_on_node, const std::string& host);

class CheckpointSaver {
 public:
  CheckpointSaver(const config::Config& cfg, const RunPaths& paths, comm::Communicator& comm, bool async);
  // Waits for a write in flight (a run ending on an error), commits nothing: a step_<S>/ without
  // index, which the next run removes.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Async: allocates (and touches) the host copy before training starts, so that the first checkpoint
  // waits no longer than the others (the memory plan counts that copy from the start anyway).
  void allocate(model::Model& model, optim::AdamW& opt);
  // Every rank, at a step boundary: finishes an earlier save, copies this rank's shard and writes it
  // — in the background when async and not `wait`, else before it returns, committed.
  void save(model::Model& model, optim::AdamW& opt, checkpoint::TrainState state, bool wait);
  // Whether a save is in flight (the same on every rank), and whether this rank's write has ended.
  bool in_flight() const { return in_flight_; }
  bool written() const { return !in_flight_ || done_.load(std::memory_order_acquire); }
  // Every rank: waits for the write in flight (if any) and commits it. Collective.
  void finish();
  bool async() const { return async_; }

 private:
  void write();   // this rank's shard; records an error rather than throwing (the background thread's body)
  void commit();  // collective: agree on the writes, rank 0's index and prune

  const config::Config& cfg_;
  const RunPaths& paths_;
  comm::Communicator& comm_;
  const bool async_;
  checkpoint::HostShard shard_;  // this rank's copy: kept between saves (async) so it is allocated once
  model::ParamLayout layout_;
  checkpoint::TrainState state_;
  int zero_stage_ = 0;
  std::vector<checkpoint::Runs> runs_of_;  // rank 0: every rank's runs, for the index
  bool in_flight_ = false, background_ = false;
  std::atomic<bool> done_{false};
  std::thread writer_;
  // The write's outcome (set by write(), read after it ended).
  std::string error_;
  const char *lib_ = "", *call_ = "", *file_ = __FILE__;
  int line_ = 0;
  double blocked_s_ = 0, write_s_ = 0;
};

}  // namespace sftdp::train
