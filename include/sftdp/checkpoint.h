// sftdp/checkpoint.h — SPEC §5 checkpoint files. A checkpoint holds /params/<name>,
// /opt/m/<name>, /opt/v/<name> (float32, SPEC names and shapes) and root attributes step,
// epoch, step_in_epoch (the data cursor: global, not per rank), global_batch (the G the cursor
// counts in), optimizer_updates (AdamW's t) and config (resolved YAML); a LoRA checkpoint holds
// the adapters instead of the model and names its base (lora_base, lora_base_hash).
// Writes are atomic: a temporary name in the same directory, then rename(2).
// Reading validates names, shapes and types and throws UserError naming the file and tensor.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sftdp/model.h"

namespace sftdp::checkpoint {

struct TrainState {
  int64_t step = 0;           // completed optimizer steps
  int64_t epoch = 0;          // data cursor: epoch of the next step
  int64_t step_in_epoch = 0;  // data cursor: step within that epoch of the next step
  int64_t global_batch = 0;   // G the cursor counts in (rows per step); 0 = unknown
  int64_t optimizer_updates = 0;  // AdamW updates applied (skipped steps make none): bias correction t
  std::string config_yaml;
  // LoRA checkpoints (issue 17): /params and /opt hold the adapters, and these root attributes
  // name the frozen base they were trained on (model::base_identity); "" in a full fine-tune's.
  std::string lora_base, lora_base_hash;
};

// <dir>/step_<S>.h5, written atomically. params, m, v are host buffers of layout.total floats.
std::string save(const std::string& dir, const model::ParamLayout& layout,
                 const std::vector<float>& params, const std::vector<float>& m,
                 const std::vector<float>& v, const TrainState& state);

// Reads a whole checkpoint (params, moments, state). Shapes must match layout.
void load(const std::string& path, const model::ParamLayout& layout, std::vector<float>& params,
          std::vector<float>& m, std::vector<float>& v, TrainState& state);

// The resolved config a checkpoint stores (root attribute `config`); nothing when the file or the
// attribute cannot be read (load_newest decides what to do with a damaged file).
std::optional<std::string> read_config(const std::string& path);

// Reads only /params (load_parameters_path). Shapes must match layout.
void load_params(const std::string& path, const model::ParamLayout& layout,
                 std::vector<float>& params);

// Writes only /params (a converted or initial model for load_parameters_path).
void save_params(const std::string& path, const model::ParamLayout& layout,
                 const std::vector<float>& params);

// The step_<S>.h5 in dir with the largest S, if any (temporary and refused files are ignored).
std::optional<std::string> newest(const std::string& dir);
// Deletes all but the newest `keep` checkpoints (keep <= 0: keep all).
void prune(const std::string& dir, int64_t keep);
// At the start of a run, before it writes (rank 0; one job writes a run's checkpoints at a time):
// deletes the temporary files (.step_<S>.h5.tmp.<pid>) of checkpoint writes that never finished,
// a writer killed mid-write (SIGKILL, a node lost) leaving one behind; each removal is logged.
// Returns how many were removed. A missing directory holds none; a failed listing or delete warns.
int remove_unfinished_writes(const std::string& dir);

// Resume: loads (as load()) the newest checkpoint of dir that load() accepts and returns its path;
// nothing when dir holds no checkpoint. Each newer one that load() refuses (truncated, damaged,
// a tensor missing, a non-finite value, ...) is renamed to step_<S>.h5.corrupt (.corrupt.<k> if
// that name is taken), which newest() and prune() never match, so it is kept for inspection but
// never resumed from or counted as one of the kept checkpoints again; a warning names the refused
// file, why, and the checkpoint used instead. When none loads: UserError naming the files and
// why, and nothing is renamed (the run stops with exit 2; the files stay as they were).
std::optional<std::string> load_newest(const std::string& dir, const model::ParamLayout& layout,
                                       std::vector<float>& params, std::vector<float>& m,
                                       std::vector<float>& v, TrainState& state);

}  // namespace sftdp::checkpoint
