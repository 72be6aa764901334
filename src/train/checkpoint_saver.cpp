// src/train/checkpoint_saver.cpp — see checkpoint_saver.h.
#include "train/checkpoint_saver.h"

#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <exception>
#include <vector>

#include <hdf5.h>

#include "sftdp/check.h"
#include "sftdp/log.h"
#include "train/checkpoint_shards.h"
#include "train/memory_plan.h"
#include "train/stop_signal.h"

namespace sftdp::train {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

bool choose_async_checkpointing(const config::Config& cfg, const model::Model& model, comm::Communicator& comm,
                                bool gpu, int ranks_on_node, const std::string& host) {
  const size_t bytes = shard_bytes(sharding_of(model, static_cast<int>(cfg.zero_stage)), comm.rank(), comm.world());
  std::string why_not;  // this rank's reason to write at the step boundary
  hbool_t threadsafe = 0;
  if (cfg.async_checkpointing == "false") {
    why_not = "async_checkpointing: false";
  } else if (H5is_library_threadsafe(&threadsafe) < 0 || !threadsafe) {
    why_not = "the HDF5 library is not built thread-safe (--enable-threadsafe), so no thread may write beside training";
  } else if (gpu) {
    const Available host_memory = cpu_memory_available(ranks_on_node, host);
    if (host_memory.known && bytes > host_memory.bytes)
      why_not = "the host copy of this rank's shard (" + gib(bytes) + ") exceeds the host memory it has (" +
                gib(host_memory.bytes) + ", " + host_memory.what + ")";
  }
  const auto reasons = comm::allgather_strings(why_not, "the async_checkpointing choice");
  const auto first = std::find_if(reasons.begin(), reasons.end(), [](const std::string& r) { return !r.empty(); });
  const bool async = first == reasons.end();
  const std::string reason = async ? "" : *first + (reasons.size() > 1 ? " (rank " +
                                          std::to_string(first - reasons.begin()) + ")" : "");
  if (!async && cfg.async_checkpointing == "true")
    throw UserError("async_checkpointing: true, but " + reason + "; set async_checkpointing: false");
  if (comm.rank() == 0) {
    if (async)
      log::info("checkpoints: async_checkpointing true: each rank copies its shard to host memory (%s on rank 0) at "
                "the step boundary and a thread writes it while training goes on", gib(bytes).c_str());
    else
      log::info("checkpoints: written at the step boundary (%s; %s on rank 0)", reason.c_str(), gib(bytes).c_str());
  }
  return async;
}

CheckpointSaver::CheckpointSaver(const config::Config& cfg, const RunPaths& paths, comm::Communicator& comm, bool async)
    : cfg_(cfg), paths_(paths), comm_(comm), async_(async) {}

CheckpointSaver::~CheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void CheckpointSaver::write() {
  const auto t0 = Clock::now();
  try {
    checkpoint::write_shard(paths_.checkpoint_dir, state_.step, comm_.rank(), comm_.world(), layout_, shard_);
  } catch (const checkpoint::WriteError& e) {
    error_ = e.what(), lib_ = e.lib, call_ = e.call, file_ = e.file, line_ = e.line;
  } catch (const std::exception& e) {  // HDF5's or the C++ library's (bad_alloc): an internal error all the same
    error_ = e.what(), lib_ = "sftdp", call_ = "checkpoint write", file_ = __FILE__, line_ = __LINE__;
  }
  write_s_ = since(t0);
  done_.store(true, std::memory_order_release);
}

void CheckpointSaver::allocate(model::Model& model, optim::AdamW& opt) {
  if (async_) snapshot(model, opt, static_cast<int>(cfg_.zero_stage), comm_.rank(), comm_.world(), shard_);
}

void CheckpointSaver::save(model::Model& model, optim::AdamW& opt, checkpoint::TrainState state, bool wait) {
  finish();  // one save in flight
  const auto t0 = Clock::now();
  const int rank = comm_.rank(), world = comm_.world();
  zero_stage_ = static_cast<int>(cfg_.zero_stage);
  // Rank 0 makes step_<S>/ empty before any rank writes into it; a failure there ends the job (exit 1).
  if (rank == 0) checkpoint::prepare_step_dir(paths_.checkpoint_dir, state.step);
  comm_.barrier();
  // Every rank copies what it holds (nothing is gathered); the device is free again after this.
  snapshot(model, opt, zero_stage_, rank, world, shard_);
  layout_ = model.trainable_layout();
  state_ = std::move(state);
  if (rank == 0) {
    const Sharding s = sharding_of(model, zero_stage_);
    runs_of_.clear();
    for (int r = 0; r < world; ++r) runs_of_.push_back(runs_only(rank_runs(s, r, world)));
    state_.config_yaml = cfg_.to_yaml();
  }
  error_.clear();
  done_.store(false, std::memory_order_relaxed);
  in_flight_ = true;
  background_ = async_ && !wait;
  if (background_) {
    blocked_s_ = since(t0);
    writer_ = std::thread([this] {
      sigset_t stops;  // the stop signals are the training thread's to see (stop_signal.h)
      sigemptyset(&stops);
      for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&stops, sig);
      pthread_sigmask(SIG_BLOCK, &stops, nullptr);
      write();
    });
    return;
  }
  write();
  blocked_s_ = since(t0);
  commit();
  if (!async_)  // not kept between saves: freed
    for (auto& d : shard_.data) d = checkpoint::HostFloats(d.get_allocator());
}

void CheckpointSaver::finish() {
  if (!in_flight_) return;
  const auto t0 = Clock::now();
  if (writer_.joinable()) writer_.join();
  blocked_s_ += since(t0);  // the time training waited for the background write
  commit();
}

void CheckpointSaver::commit() {
  in_flight_ = false;
  // Agreed: a shard any rank could not write fails the checkpoint on every rank. The lowest failing
  // rank reports it (its own rank and host in the line) and ends the job with exit 1; step_<S>/ has
  // no index, so the previous checkpoint stays the newest and the next run removes the directory.
  const auto errors = comm::allgather_strings(error_, "the checkpoint's shard writes");
  const auto first = std::find_if(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); });
  if (first != errors.end()) {
    const int failed = static_cast<int>(first - errors.begin());
    if (failed == comm_.rank()) die_internal(lib_, call_, error_, file_, line_);
    comm_.barrier();  // never returns: the failing rank's MPI_Abort ends this one too
    die_internal("sftdp", "checkpoint", "rank " + std::to_string(failed) + " could not write its shard", __FILE__,
                 __LINE__);
  }
  // The slowest rank's write and wait: what the log reports.
  std::vector<double> times(2 * static_cast<size_t>(comm_.world()), 0.0);
  times[2 * comm_.rank()] = write_s_, times[2 * comm_.rank() + 1] = blocked_s_;
  comm_.allreduce_sum_host(times.data(), times.size());
  double slowest[2] = {0, 0};
  for (size_t i = 0; i < times.size(); ++i) slowest[i % 2] = std::max(slowest[i % 2], times[i]);
  if (comm_.rank() == 0) {
    const auto path = checkpoint::commit_index(paths_.checkpoint_dir, layout_, state_, zero_stage_, runs_of_);
    // Only now is the new checkpoint one: older ones may go.
    checkpoint::prune(paths_.checkpoint_dir, cfg_.keep_checkpoints);
    log::info("checkpoint %s (shards written in %.3f s%s; training waited %.3f s)", path.c_str(), slowest[0],
              background_ ? " in the background" : "", slowest[1]);
  }
  set_last_checkpoint_step(state_.step);
}

}  // namespace sftdp::train
