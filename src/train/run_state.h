// src/train/run_state.h — where a run starts and what it leaves behind: every rank reads its own
// ranges of the newest checkpoint that loads (either format, any world size and stage); without one,
// rank 0 reads the starting parameters (load_parameters_path or seeded init) and streams them in
// 64 MiB chunks, of which each rank keeps what it holds. Checkpoints are sharded (SPEC §5): every rank
// writes its own shard file, rank 0 the index last.
#pragma once
#include <cstddef>
#include <functional>

#include "sftdp/checkpoint.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/data.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "sftdp/train.h"

namespace sftdp::train {

// Runs fn on rank 0 only; a UserError there is rethrown on every rank (all exit 2, one message).
void on_rank0(comm::Communicator& comm, const std::function<void()>& fn);

// Runs fn on this rank mid-run (a data read). A UserError means only this rank saw the bad input:
// on one rank it is rethrown; on several this rank prints it once and ends the job with exit 2.
void or_abort_job(comm::Communicator& comm, const std::function<void()>& fn);

// Rank 0 checks that the run directory can be written (and, with resume=false, that it holds no
// checkpoints to be confused with this run's); every rank sees the verdict.
void check_output_directory(const config::Config& cfg, const RunPaths& paths, comm::Communicator& comm);

// restore streams each starting vector from rank 0 in chunks of this many floats (64 MiB): the most
// of it a rank other than 0 holds on the host (the memory plan counts it).
inline constexpr size_t kRestoreChunkFloats = size_t{16} << 20;

// The starting state, identical on every rank. Resume: rank 0 lists the checkpoints newest first;
// every rank reads its ranges of each in turn (train::read_into) until one loads on every rank (the
// lowest refusing rank's message otherwise); the newer refused ones are then moved aside by rank 0
// with a warning; none loading is a UserError on every rank, nothing moved. The data cursor is converted to this run's global batch G when the checkpoint
// counted in another one (a UserError if it falls inside a step).
checkpoint::TrainState restore(const config::Config& cfg, const RunPaths& paths, model::Model& model,
                               optim::AdamW& opt, comm::Communicator& comm, int64_t global_batch,
                               int64_t steps_per_epoch);

// Saving one: train::CheckpointSaver (checkpoint_saver.h).

// Called on every rank (ZeRO-3 gathers the parameters first); rank 0 writes (hf_export) the current
// parameters as a Hugging Face directory <run_dir>/hf/ (hf::export_hf, as sft_export writes it), or
// under LoRA a PEFT adapter directory, replacing an earlier one.
void export_hf_dir(const config::Config& cfg, const RunPaths& paths, const model::Model& model,
                   comm::Communicator& comm);

}  // namespace sftdp::train
