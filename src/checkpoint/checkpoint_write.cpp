// src/checkpoint/checkpoint_write.cpp — save() and save_params() (SPEC §5). The file is written
// under a temporary name in the target directory, flushed, fsynced and renamed over the final
// name, then the directory is fsynced: a crash leaves the old file or the whole new one, never a
// partial one. Any failure removes the temporary file and dies (exit 1): a checkpoint that cannot
// be written is a problem of the machine (disk full, permissions), found on one rank only. The
// message names the checkpoint and leads with the OS reason ("No space left on device").
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "checkpoint/atomic_h5.h"
#include "checkpoint/format.h"
#include "h5/h5.h"
#include "sftdp/check_h5.h"
#include "sftdp/checkpoint.h"

namespace sftdp::checkpoint {
namespace {

namespace fs = std::filesystem;
using detail::AtomicH5Writer;
using detail::write_scalar_attr;
using detail::write_string_attr;

// /<group_name>/<tensor name> for every tensor of the layout: float32, the layout's shape.
void write_tensors(AtomicH5Writer& w, hid_t parent, const char* group_name,
                   const model::ParamLayout& layout, const std::vector<float>& buffer) {
  h5::Handle group(H5_OK(w, H5Gcreate2(parent, group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                 H5Gclose);
  for (const auto& t : layout.tensors) {
    const std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    h5::Handle space(H5_OK(w, H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)),
                     H5Sclose);
    const h5::Handle dcpl = detail::tensor_creation(dims);
    h5::Handle dset(H5_OK(w, H5Dcreate2(group.get(), t.name.c_str(), H5T_IEEE_F32LE, space.get(),
                                        H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)),
                    H5Dclose);
    H5_OK(w, H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      buffer.data() + t.offset));
  }
}

}  // namespace

std::string save(const std::string& dir, const model::ParamLayout& layout,
                 const std::vector<float>& params, const std::vector<float>& m,
                 const std::vector<float>& v, const TrainState& state) {
  const std::string final_path =
      (fs::path(dir) / ("step_" + std::to_string(state.step) + ".h5")).string();
  save_as(final_path, layout, params, m, v, state);
  return final_path;
}

void save_as(const std::string& final_path, const model::ParamLayout& layout, const std::vector<float>& params,
             const std::vector<float>& m, const std::vector<float>& v, const TrainState& state) {
  detail::check_layout(layout, params.size());
  SFTDP_ASSERT(m.size() == layout.total && v.size() == layout.total,
               "AdamW moment buffers differ from layout.total");
  // Never write a file that load() would refuse.
  SFTDP_ASSERT(state.step >= 0 && state.epoch >= 0 && state.step_in_epoch >= 0 &&
                   state.global_batch >= 0,
               "negative step, data cursor or global batch in the TrainState");
  SFTDP_ASSERT(state.optimizer_updates >= 0 && state.optimizer_updates <= state.step,
               "optimizer_updates outside [0, step]");
  AtomicH5Writer w(final_path);
  write_tensors(w, w.file(), detail::kParamsGroup, layout, params);
  {
    h5::Handle opt(H5_OK(w, H5Gcreate2(w.file(), "opt", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                 H5Gclose);
    write_tensors(w, opt.get(), detail::kMomentGroups[0], layout, m);
    write_tensors(w, opt.get(), detail::kMomentGroups[1], layout, v);
  }
  const int version = detail::kFormatVersion;
  write_scalar_attr(w, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
  write_scalar_attr(w, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &state.step);
  write_scalar_attr(w, "epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &state.epoch);
  write_scalar_attr(w, "step_in_epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &state.step_in_epoch);
  write_scalar_attr(w, "global_batch", H5T_STD_I64LE, H5T_NATIVE_INT64, &state.global_batch);
  write_scalar_attr(w, "optimizer_updates", H5T_STD_I64LE, H5T_NATIVE_INT64,
                    &state.optimizer_updates);
  write_string_attr(w, "config", state.config_yaml);
  if (!state.lora_base_hash.empty()) {
    write_string_attr(w, "lora_base", state.lora_base);
    write_string_attr(w, "lora_base_hash", state.lora_base_hash);
  }
  w.commit();
}

void save_params(const std::string& path, const model::ParamLayout& layout,
                 const std::vector<float>& params) {
  detail::check_layout(layout, params.size());
  AtomicH5Writer w(path);
  write_tensors(w, w.file(), detail::kParamsGroup, layout, params);
  const int version = detail::kFormatVersion;
  write_scalar_attr(w, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
  w.commit();
}

}  // namespace sftdp::checkpoint
