// src/train/run_restore.cpp — see run_state.h: what a run starts from (restore: a checkpoint, each
// rank reading its own ranges; the base and adapters of a LoRA run, load_parameters_path or a seeded
// init, streamed from rank 0) and what it leaves behind (save_checkpoint: one shard per rank, then
// rank 0's index; export_hf_dir).
#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "hf/hf_dir.h"
#include "hf/peft.h"
#include "sftdp/check.h"
#include "sftdp/log.h"
#include "train/checkpoint_shards.h"
#include "train/run_state.h"

namespace fs = std::filesystem;

namespace sftdp::train {

namespace {
// Rank 0's vector of n floats to every rank in chunks of at most kRestoreChunkFloats: `take` sees
// each chunk on every rank, which keeps only what it holds of it (its ZeRO shard, or all of it). No
// rank but 0 so holds the whole vector on the host (a ZeRO-3 rank of an 8B model would otherwise hold
// 3 × 32 GB on a resume, and every rank of a node at once).
void stream_from_rank0(comm::Communicator& comm, const std::vector<float>& v, size_t n,
                       const std::function<void(size_t begin, const float* data, size_t len)>& take) {
  std::vector<float> chunk(std::min(n, kRestoreChunkFloats));
  for (size_t begin = 0; begin < n; begin += kRestoreChunkFloats) {
    const size_t len = std::min(kRestoreChunkFloats, n - begin);
    if (comm.rank() == 0) std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(begin), len, chunk.begin());
    comm.broadcast_host(chunk.data(), len * sizeof(float), 0);
    take(begin, chunk.data(), len);
  }
}

// The checkpoint's cursor counted steps of its own G; re-express it in this run's G.
void convert_cursor(checkpoint::TrainState& s, const std::string& path, int64_t G, int64_t steps_per_epoch) {
  if (s.global_batch > 0 && s.global_batch != G) {
    const int64_t row = s.step_in_epoch * s.global_batch;
    if (row % G != 0)
      throw UserError("global_batch_size: " + path + " stopped at row " + std::to_string(row) +
                      " of epoch " + std::to_string(s.epoch) + ", which is not a multiple of the new global batch " +
                      std::to_string(G) + " (was " + std::to_string(s.global_batch) + ")");
    log::info("data cursor: row %lld of epoch %lld, global batch %lld -> %lld", (long long)row,
              (long long)s.epoch, (long long)s.global_batch, (long long)G);
    s.step_in_epoch = row / G;
    s.global_batch = G;
  }
  if (s.step_in_epoch >= steps_per_epoch) {  // only leftover rows remained in that epoch
    s.epoch += 1;
    s.step_in_epoch = 0;
  }
}
}  // namespace

namespace {
// Rank 0's strings on every rank (the checkpoints it listed).
std::vector<std::string> broadcast_strings(comm::Communicator& comm, std::vector<std::string> v) {
  int64_t n = static_cast<int64_t>(v.size());
  comm.broadcast_host(&n, sizeof n, 0);
  v.resize(static_cast<size_t>(n));
  for (auto& s : v) {
    int64_t len = static_cast<int64_t>(s.size());
    comm.broadcast_host(&len, sizeof len, 0);
    s.resize(static_cast<size_t>(len));
    if (len > 0) comm.broadcast_host(s.data(), static_cast<size_t>(len), 0);
  }
  return v;
}

// The lowest rank's non-empty message, or "" when every rank's is empty (the same on every rank).
std::string first_error(const std::vector<std::string>& of_rank) {
  for (const auto& e : of_rank)
    if (!e.empty()) return e;
  return "";
}

// Resume (SPEC §5): every rank reads its own ranges of the newest checkpoint that loads, trying them
// newest first; a checkpoint any rank refuses (a damaged or missing shard, a non-finite value) is
// refused by all, with the lowest refusing rank's message. Returns the one loaded (its state in
// `state`) and the refused ones, newest first (path, why); throws UserError, on every rank, when
// there were checkpoints but none loads.
std::optional<std::string> read_newest(const std::vector<std::string>& candidates, const RunPaths& paths,
                                       model::Model& model, optim::AdamW& opt, int zero_stage,
                                       comm::Communicator& comm, checkpoint::TrainState& state,
                                       std::vector<std::pair<std::string, std::string>>& refused) {
  for (const auto& path : candidates) {
    std::string error;
    try {
      checkpoint::Reader reader(path, model.trainable_layout());
      read_into(reader, model, opt, zero_stage, comm.rank(), comm.world());
      state = reader.state();
    } catch (const UserError& e) {
      error = e.what();  // "<file>: <what is wrong>"
    }
    const std::string agreed = first_error(comm::allgather_strings(error, "the checkpoint read"));
    if (agreed.empty()) return path;
    refused.emplace_back(path, agreed);
  }
  if (refused.empty()) return std::nullopt;
  if (refused.size() == 1) throw UserError(refused.front().second);
  constexpr size_t kShown = 3;
  std::string msg = "no checkpoint in " + paths.checkpoint_dir + " can be resumed from (" +
                    std::to_string(refused.size()) + " refused): ";
  for (size_t i = 0; i < std::min(refused.size(), kShown); ++i) msg += (i > 0 ? "; " : "") + refused[i].second;
  if (refused.size() > kShown) msg += "; and " + std::to_string(refused.size() - kShown) + " older ones";
  throw UserError(msg);
}
}  // namespace

checkpoint::TrainState restore(const config::Config& cfg, const RunPaths& paths, model::Model& model,
                               optim::AdamW& opt, comm::Communicator& comm, int64_t global_batch,
                               int64_t steps_per_epoch) {
  checkpoint::TrainState state;
  std::vector<float> params;  // rank 0: a fresh run's starting parameters (adapters under LoRA)
  std::vector<float> base;    // LoRA: the frozen base
  std::vector<std::string> candidates;  // the checkpoints to resume from, newest first
  std::string base_name, base_hash;
  const bool lora = model.lora();
  on_rank0(comm, [&] {
    if (cfg.resume) candidates = checkpoint::checkpoints_newest_first(paths.checkpoint_dir);
    // A key that cannot change on resume (the model, the adapters, the data order) is refused before
    // anything is read or moved; the newest checkpoint is the one resumed from unless it is damaged.
    if (!candidates.empty())
      if (const auto yaml = checkpoint::read_config(candidates.front()))
        config::resume_changes(cfg, *yaml, candidates.front());
    if (lora) {  // the base first: a resumed checkpoint must have been trained on this one
      if (cfg.load_parameters_path.empty()) {
        model::init_params(base, model.layout(), model.dims(), static_cast<uint64_t>(cfg.seed));
        base_name = "seeded initialisation, seed " + std::to_string(cfg.seed);
      } else {
        if (hf::is_hf_dir(cfg.load_parameters_path))
          hf::load_hf_params(cfg.load_parameters_path, model.layout(), base);
        else
          checkpoint::load_params(cfg.load_parameters_path, model.layout(), base);
        base_name = cfg.load_parameters_path;
        log::info("base model (frozen) from %s", base_name.c_str());
      }
      base_hash = model::base_hash(model.layout(), base);
    }
  });
  if (lora)
    stream_from_rank0(comm, base, model.layout().total,
                      [&](size_t b, const float* d, size_t len) { model.set_params_range(b, d, len); });
  base = {};
  // Every rank reads only its own ranges (train::read_into): no rank holds the whole model.
  std::vector<std::pair<std::string, std::string>> refused;
  const auto loaded = read_newest(broadcast_strings(comm, candidates), paths, model, opt,
                                  static_cast<int>(cfg.zero_stage), comm, state, refused);
  on_rank0(comm, [&] {
    if (loaded && lora && state.lora_base_hash != base_hash)
      throw UserError(
          "load_parameters_path: " + *loaded + " holds LoRA adapters trained on the base " +
          (state.lora_base.empty() ? std::string("(unnamed)") : state.lora_base) + " (hash " +
          (state.lora_base_hash.empty() ? std::string("none: not a LoRA checkpoint") : state.lora_base_hash) +
          "), but this run's base is " + base_name + " (hash " + base_hash +
          "); resume with that base, or use another run_name");
    if (loaded) {
      // Only now, with a checkpoint to resume from, are the refused ones moved: if none loads, they
      // stay as they were (a changed model config refuses every one of them).
      for (const auto& [bad, why] : refused) {
        std::string aside;
        try {
          aside = checkpoint::move_aside(bad);
        } catch (const UserError& e) {
          throw UserError(why + "; " + e.what());
        }
        std::error_code ec;
        log::warn("%s; resuming from the older %s instead (the refused %s is kept as %s)", why.c_str(),
                  loaded->c_str(), fs::is_directory(aside, ec) ? "checkpoint" : "file", aside.c_str());
      }
      convert_cursor(state, *loaded, global_batch, steps_per_epoch);
      log::info("resuming from %s (step %lld, epoch %lld, step %lld of that epoch)", loaded->c_str(),
                (long long)state.step, (long long)state.epoch, (long long)state.step_in_epoch);
      for (const auto& c : config::resume_changes(cfg, state.config_yaml, *loaded))
        log::info("resume: %s %s -> %s", c.key.c_str(), c.before.c_str(), c.after.c_str());
    } else if (lora) {
      if (!cfg.load_adapter_path.empty()) {
        hf::load_peft_adapter(cfg.load_adapter_path, model.dims(), model.lora_spec(), model.trainable_layout(), params);
        log::info("initial LoRA adapters from %s", cfg.load_adapter_path.c_str());
      } else {
        model::init_lora(params, model.trainable_layout(), static_cast<uint64_t>(cfg.seed));
      }
    } else if (!cfg.load_parameters_path.empty()) {
      if (hf::is_hf_dir(cfg.load_parameters_path))  // Hugging Face directory (dims checked by config)
        hf::load_hf_params(cfg.load_parameters_path, model.layout(), params);
      else
        checkpoint::load_params(cfg.load_parameters_path, model.layout(), params);
      log::info("initial parameters from %s", cfg.load_parameters_path.c_str());
    } else {
      model::init_params(params, model.layout(), model.dims(), static_cast<uint64_t>(cfg.seed));
    }
    // Only once the run has what it starts from (a refused start touches nothing), before it writes.
    checkpoint::remove_unfinished_writes(paths.checkpoint_dir);
  });
  if (loaded) {
    // Rank 0 converted the cursor (the same on every rank, but it alone logs).
    int64_t cursor[4] = {state.step, state.epoch, state.step_in_epoch, state.optimizer_updates};
    comm.broadcast_host(cursor, sizeof cursor, 0);
    state.step = cursor[0], state.epoch = cursor[1], state.step_in_epoch = cursor[2];
    state.optimizer_updates = cursor[3];
  } else {
    stream_from_rank0(comm, params, model.trainable_layout().total,
                      [&](size_t b, const float* d, size_t len) { model.set_trainable_range(b, d, len); });
  }
  state.lora_base = base_name, state.lora_base_hash = base_hash;  // rank 0's: what it writes
  state.global_batch = global_batch;
  return state;
}

void export_hf_dir(const config::Config& cfg, const RunPaths& paths, const model::Model& model,
                   comm::Communicator& comm) {
  std::vector<float> params;  // ZeRO-3, bf16 weights: a collective, rank 0 receives them
  if (model.params_sharded()) params = model.lora() ? model.trainable_to_host() : model.params_to_host();
  if (comm.rank() != 0) return;
  if (!model.params_sharded()) params = model.lora() ? model.trainable_to_host() : model.params_to_host();
  const std::string hf_dir = paths.run_dir + "/hf";
  std::error_code ec;
  fs::remove_all(hf_dir, ec);  // an earlier end of this run; the new final checkpoint supersedes it
  if (ec) throw UserError("hf_export: cannot replace " + hf_dir + ": " + ec.message());
  if (model.lora()) {  // a PEFT adapter directory; sft_export --merge writes the merged model
    hf::write_peft_adapter(hf_dir, model.dims(), model.lora_spec(), model.trainable_layout(), params,
                           cfg.load_parameters_path, cfg.hf_export_tokenizer);
    log::info("PEFT adapter %s", hf_dir.c_str());
    return;
  }
  hf::export_hf(hf_dir, model.dims(), model.layout(), params, cfg.hf_export_tokenizer, cfg.load_parameters_path);
  log::info("hugging face model %s", hf_dir.c_str());
}

}  // namespace sftdp::train
