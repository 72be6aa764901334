// sftdp/checkpoint.h — SPEC §5 checkpoint files. A checkpoint holds /params/<name>,
// /opt/m/<name>, /opt/v/<name> (float32, SPEC names and shapes) and root attributes step,
// epoch, step_in_epoch (the data cursor: global, not per rank), global_batch (the G the cursor
// counts in), optimizer_updates (AdamW's t) and config (resolved YAML); a LoRA checkpoint holds
// the adapters instead of the model and names its base (lora_base, lora_base_hash).
// Writes are atomic: a temporary name in the same directory, then rename(2).
// Reading validates names, shapes and types and throws UserError naming the file and tensor.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
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

// The same single-file checkpoint at `path` (sft_export --consolidate); save() is save_as(<dir>/step_<S>.h5).
void save_as(const std::string& path, const model::ParamLayout& layout, const std::vector<float>& params,
             const std::vector<float>& m, const std::vector<float>& v, const TrainState& state);

// Reads a whole checkpoint (params, moments, state); a sharded directory's shards put together. Shapes must match layout.
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

// ---- Sharded checkpoints (issue 36, SPEC §5): a directory step_<S>/ of shard_<r>.h5 files, one
// per writing rank, and index.h5, written last. Group 0 is the parameters, 1 AdamW's m, 2 its v.
inline constexpr int kGroups = 3;
struct Run {
  size_t begin = 0, count = 0;  // floats [begin, begin + count) of the flat trainable layout
  bool operator==(const Run&) const = default;
};
using Runs = std::array<std::vector<Run>, kGroups>;  // per group: disjoint, ascending
// Host memory from a pair of functions (a GPU rank's Ops::host_alloc: page-locked, so the copy from
// the device runs at full speed); without them, operator new.
template <class T>
struct HostAllocator {
  using value_type = T;
  // A buffer keeps the allocator it was made with through assignment and swap.
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  void* (*alloc_fn)(size_t bytes) = nullptr;
  void (*free_fn)(void* p) = nullptr;
  HostAllocator() = default;
  HostAllocator(void* (*a)(size_t), void (*f)(void*)) : alloc_fn(a), free_fn(f) {}
  template <class U>
  HostAllocator(const HostAllocator<U>& o) : alloc_fn(o.alloc_fn), free_fn(o.free_fn) {}
  T* allocate(size_t n) {
    return static_cast<T*>(alloc_fn ? alloc_fn(n * sizeof(T)) : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t) { free_fn ? free_fn(p) : ::operator delete(p); }
  template <class U>
  bool operator==(const HostAllocator<U>& o) const { return alloc_fn == o.alloc_fn && free_fn == o.free_fn; }
};
using HostFloats = std::vector<float, HostAllocator<float>>;

// What one rank writes: its runs of each group and their floats, concatenated in run order.
struct HostShard {
  Runs runs;
  std::array<HostFloats, kGroups> data;
};

// <dir>/step_<S> (a directory checkpoint) and whether `path` is one (a directory holding index.h5).
std::string step_dir(const std::string& dir, int64_t step);
bool is_sharded(const std::string& path);
// Rank 0, before any rank writes step S: an empty step_<S>/ (a stale one of the same S, committed
// or not, is removed: its index first, so that it stops being a checkpoint before anything else goes).
void prepare_step_dir(const std::string& dir, int64_t step);
// A shard file that could not be written (disk full, permissions): what() is save()'s message
// ("cannot write checkpoint <path>: <OS reason> (errno N) ...; temporary file removed, ..."), the
// temporary file already gone. Only write_shard throws it, so that the ranks agree on a failure
// before the job ends (exit 1) rather than one rank aborting the others mid-write.
class WriteError : public std::runtime_error {
 public:
  WriteError(const char* lib_, const char* call_, const std::string& msg, const char* file_, int line_)
      : std::runtime_error(msg), lib(lib_), call(call_), file(file_), line(line_) {}
  const char* lib;   // "HDF5", "POSIX"
  const char* call;  // the failed call's text
  const char* file;  // where it failed, for die_internal
  int line;
};

// Every rank: its shard_<rank>.h5 in step_<S>/ (temporary name, fsync, rename). Throws WriteError on a
// failed write (the directory then has no index and is no checkpoint); the caller agrees and ends the job.
void write_shard(const std::string& dir, int64_t step, int rank, int world,
                 const model::ParamLayout& layout, const HostShard& shard);
// Rank 0, once every rank's write_shard succeeded: index.h5 naming every rank's pieces (runs_of[r]:
// rank r's runs), written last (temporary name, fsync, rename, directory fsync). Returns step_<S>.
std::string commit_index(const std::string& dir, const model::ParamLayout& layout,
                         const TrainState& state, int zero_stage, const std::vector<Runs>& runs_of);

// Reads a checkpoint of either format (a step_<S>.h5 file or a step_<S>/ directory) range by
// range: the constructor reads and checks the metadata (names, shapes, types, attributes; for a
// directory that the index's pieces tile every tensor), read() only the floats asked for, each
// piece an HDF5 hyperslab of the file that holds it. Every problem is a UserError naming the file
// (the shard file, for a missing or damaged one) and the tensor; read() refuses non-finite values
// and a negative second moment, as load() does.
class Reader {
 public:
  Reader(const std::string& path, const model::ParamLayout& layout);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  const TrainState& state() const;
  // [out] n floats: floats [begin, begin + n) of group g's flat buffer (layout order).
  void read(int group, size_t begin, size_t n, float* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The checkpoints of dir, newest first: files step_<S>.h5 and directories step_<S>/ with index.h5
// (a step with both: the directory first).
std::vector<std::string> checkpoints_newest_first(const std::string& dir);
// Moves a refused checkpoint (file or directory) aside to <path>.corrupt[.<k>]; returns the new name.
std::string move_aside(const std::string& path);

}  // namespace sftdp::checkpoint
