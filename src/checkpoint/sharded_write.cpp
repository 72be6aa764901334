// src/checkpoint/sharded_write.cpp — the sharded checkpoint's writers (SPEC §5, issue 36):
// prepare_step_dir (rank 0), write_shard (every rank: its own pieces only) and commit_index (rank 0,
// last, once all shards are on disk). A step_<S>/ without index.h5 is not a checkpoint, so a crash
// at any point before the index's rename leaves the previous checkpoint the newest.
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "checkpoint/atomic_h5.h"
#include "checkpoint/format.h"
#include "checkpoint/sharded_format.h"
#include "h5/h5.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"

namespace sftdp::checkpoint {
namespace {

namespace fs = std::filesystem;
using detail::AtomicH5Writer;

void check_state(const TrainState& state) {
  SFTDP_ASSERT(state.step >= 0 && state.epoch >= 0 && state.step_in_epoch >= 0 && state.global_batch >= 0,
               "negative step, data cursor or global batch in the TrainState");
  SFTDP_ASSERT(state.optimizer_updates >= 0 && state.optimizer_updates <= state.step,
               "optimizer_updates outside [0, step]");
}

void write_i64(AtomicH5Writer& w, const char* name, int64_t value) {
  detail::write_scalar_attr(w, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

// A 2-D int64 dataset [rows, cols] at `where` (a path below the root, parents created).
void write_i64_table(AtomicH5Writer& w, hid_t parent, const char* name, const std::vector<int64_t>& values,
                     hsize_t cols) {
  const hsize_t dims[2] = {values.size() / cols, cols};
  h5::Handle space(H5_OK(w, H5Screate_simple(2, dims, nullptr)), H5Sclose);
  h5::Handle dset(H5_OK(w, H5Dcreate2(parent, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                      H5P_DEFAULT)),
                  H5Dclose);
  if (!values.empty())
    H5_OK(w, H5Dwrite(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
}

}  // namespace

std::string step_dir(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step_" + std::to_string(step))).string();
}

bool is_sharded(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / detail::kIndexName, ec);
}

void prepare_step_dir(const std::string& dir, int64_t step) {
  const std::string sdir = step_dir(dir, step);
  std::error_code ec;
  if (fs::exists(sdir, ec)) {
    // The index first: from then on it is no checkpoint, whatever else a crash leaves behind.
    fs::remove(fs::path(sdir) / detail::kIndexName, ec);
    if (ec) die_internal("POSIX", "remove", "cannot write checkpoint " + sdir + ": cannot replace its index: " + ec.message(),
                         __FILE__, __LINE__);
    fs::remove_all(sdir, ec);
    if (ec) die_internal("POSIX", "remove_all", "cannot write checkpoint " + sdir + ": " + ec.message(), __FILE__, __LINE__);
  }
  fs::create_directories(sdir, ec);
  if (ec) die_internal("POSIX", "create_directories", "cannot write checkpoint " + sdir + ": " + ec.message(), __FILE__,
                       __LINE__);
}

namespace {
constexpr size_t kWriteSliceFloats = size_t{4} << 20;  // 16 MiB
}  // namespace

void write_shard(const std::string& dir, int64_t step, int rank, int world, const model::ParamLayout& layout,
                 const HostShard& shard) {
  detail::check_layout(layout, layout.total);
  SFTDP_ASSERT(rank >= 0 && rank < world, "write_shard: rank outside the world");
  const std::string path = (fs::path(step_dir(dir, step)) / detail::shard_name(rank)).string();
  AtomicH5Writer w(path, detail::OnFailure::kThrow);
  for (int g = 0; g < kGroups; ++g) {
    const auto pieces = detail::pieces_of(layout, shard.runs[g]);
    size_t floats = 0;
    for (const auto& r : shard.runs[g]) floats += r.count;
    SFTDP_ASSERT(floats == shard.data[g].size(), "write_shard: the data differ from the runs' floats");
    h5::Handle group(H5_OK(w, H5Gcreate2(w.file(), detail::kShardGroups[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                     H5Gclose);
    for (const auto& p : pieces) {
      const hsize_t dims[1] = {p.count};
      h5::Handle space(H5_OK(w, H5Screate_simple(1, dims, nullptr)), H5Sclose);
      const h5::Handle dcpl = detail::tensor_creation({p.count});
      const std::string name = detail::piece_name(layout.tensors[p.tensor].name, p.start);
      h5::Handle dset(H5_OK(w, H5Dcreate2(group.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                          dcpl.get(), H5P_DEFAULT)),
                      H5Dclose);
      // In slices of at most kWriteSliceFloats: HDF5 (thread-safe build) holds its global lock for
      // one H5Dwrite, and the training thread's data reads wait for it while this runs in the background.
      for (size_t at = 0; at < p.count; at += kWriteSliceFloats) {
        const hsize_t start[1] = {at}, count[1] = {std::min(kWriteSliceFloats, p.count - at)};
        h5::Handle mem(H5_OK(w, H5Screate_simple(1, count, nullptr)), H5Sclose);
        H5_OK(w, H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
        H5_OK(w, H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT,
                          shard.data[g].data() + p.local + at));
      }
    }
  }
  const int version = detail::kShardedFormatVersion;
  detail::write_scalar_attr(w, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
  write_i64(w, "step", step);
  write_i64(w, "rank", rank);
  write_i64(w, "world_size", world);
  w.commit();
}

std::string commit_index(const std::string& dir, const model::ParamLayout& layout, const TrainState& state,
                         int zero_stage, const std::vector<Runs>& runs_of) {
  detail::check_layout(layout, layout.total);
  check_state(state);
  const std::string sdir = step_dir(dir, state.step);
  // The pieces must tile every tensor of every group exactly once (a bug in the caller otherwise).
  std::array<std::vector<int64_t>, kGroups> rows;
  for (int g = 0; g < kGroups; ++g) {
    std::vector<std::vector<std::pair<size_t, size_t>>> of_tensor(layout.tensors.size());
    for (size_t r = 0; r < runs_of.size(); ++r)
      for (const auto& p : detail::pieces_of(layout, runs_of[r][g])) {
        rows[g].insert(rows[g].end(), {static_cast<int64_t>(p.tensor), static_cast<int64_t>(p.start),
                                       static_cast<int64_t>(p.count), static_cast<int64_t>(r)});
        of_tensor[p.tensor].emplace_back(p.start, p.count);
      }
    for (size_t t = 0; t < of_tensor.size(); ++t) {
      std::sort(of_tensor[t].begin(), of_tensor[t].end());
      size_t at = 0;
      for (const auto& [start, count] : of_tensor[t]) {
        SFTDP_ASSERT(start == at, "commit_index: the ranks' pieces do not tile " + layout.tensors[t].name);
        at += count;
      }
      SFTDP_ASSERT(at == layout.tensors[t].numel, "commit_index: the ranks' pieces do not cover " + layout.tensors[t].name);
    }
  }
  AtomicH5Writer w((fs::path(sdir) / detail::kIndexName).string());
  {
    h5::Handle tensors(H5_OK(w, H5Gcreate2(w.file(), "tensors", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    // names: variable-length UTF-8 strings, layout order
    h5::Handle type(H5_OK(w, H5Tcopy(H5T_C_S1)), H5Tclose);
    H5_OK(w, H5Tset_size(type.get(), H5T_VARIABLE));
    H5_OK(w, H5Tset_cset(type.get(), H5T_CSET_UTF8));
    const hsize_t n[1] = {layout.tensors.size()};
    h5::Handle space(H5_OK(w, H5Screate_simple(1, n, nullptr)), H5Sclose);
    h5::Handle names(H5_OK(w, H5Dcreate2(tensors.get(), "names", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                         H5P_DEFAULT)),
                     H5Dclose);
    std::vector<const char*> ptrs;
    for (const auto& t : layout.tensors) ptrs.push_back(t.name.c_str());
    if (!ptrs.empty()) H5_OK(w, H5Dwrite(names.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
    size_t D = 1;
    for (const auto& t : layout.tensors) D = std::max(D, t.shape.size());
    std::vector<int64_t> shapes;
    for (const auto& t : layout.tensors)
      for (size_t d = 0; d < D; ++d) shapes.push_back(d < t.shape.size() ? t.shape[d] : -1);
    write_i64_table(w, tensors.get(), "shapes", shapes, D);
  }
  {
    h5::Handle pieces(H5_OK(w, H5Gcreate2(w.file(), "pieces", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    for (int g = 0; g < kGroups; ++g) write_i64_table(w, pieces.get(), detail::kShardGroups[g], rows[g], 4);
  }
  const int version = detail::kShardedFormatVersion;
  detail::write_scalar_attr(w, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
  write_i64(w, "step", state.step);
  write_i64(w, "epoch", state.epoch);
  write_i64(w, "step_in_epoch", state.step_in_epoch);
  write_i64(w, "global_batch", state.global_batch);
  write_i64(w, "optimizer_updates", state.optimizer_updates);
  write_i64(w, "world_size", static_cast<int64_t>(runs_of.size()));
  write_i64(w, "zero_stage", zero_stage);
  detail::write_string_attr(w, "config", state.config_yaml);
  if (!state.lora_base_hash.empty()) {
    detail::write_string_attr(w, "lora_base", state.lora_base);
    detail::write_string_attr(w, "lora_base_hash", state.lora_base_hash);
  }
  w.commit();
  detail::fsync_dir(dir);  // step_<S>/ itself is an entry of dir
  return sdir;
}

}  // namespace sftdp::checkpoint
