// src/checkpoint/checkpoint_read.cpp — load() and load_params() (SPEC §5). Everything a user can
// get wrong (a missing file, a file that is not HDF5, a tensor missing, of the wrong type or
// shape, a tensor the model does not have, a missing or out-of-range attribute) throws UserError
// naming the file and the tensor or attribute. All metadata is checked before any data is read, so
// a mismatch leaves the caller's buffers untouched; a non-finite value (or a negative second
// moment) is found while reading, so the buffers are then partly filled and must be discarded.
// Files written before global_batch and optimizer_updates existed load with global_batch = 0
// (unknown) and optimizer_updates = step.
#include <hdf5.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/format.h"
#include "h5/h5.h"
#include "sftdp/check_h5.h"
#include "sftdp/checkpoint.h"

namespace sftdp::checkpoint {
namespace {

using detail::shape_text;

// An open checkpoint file. HDF5 prints nothing while it is open (the user gets one line).
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path) : path_(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) fail("checkpoint not found");
      fail(std::string("cannot access: ") + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) fail("is a directory, not a checkpoint file");
    if (H5Fis_hdf5(path.c_str()) <= 0) fail("not a readable HDF5 checkpoint");
    const h5::Handle fapl = detail::checkpoint_file_access(/*for_writing=*/false);
    file_ = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    if (!file_.valid()) fail("not a readable HDF5 checkpoint");
  }

  // `group` ("params", "opt/m") holds exactly the layout's tensors, each float32 of its shape.
  void check_tensors(const std::string& group, const model::ParamLayout& layout) {
    h5::Handle g = open_group(group);
    std::set<std::string> expected;
    for (const auto& t : layout.tensors) {
      expected.insert(t.name);
      const std::string where = "/" + group + "/" + t.name;
      const htri_t exists = H5Lexists(g.get(), t.name.c_str(), H5P_DEFAULT);
      if (exists < 0) fail("not a readable HDF5 checkpoint (looking up " + where + ")");
      if (exists == 0) fail(where + " is missing (the model needs " + shape_text(t.shape) + ")");
      h5::Handle dset(H5Dopen2(g.get(), t.name.c_str(), H5P_DEFAULT), H5Dclose);
      if (!dset.valid()) fail(where + " is not a dataset");
      h5::Handle type(H5Dget_type(dset.get()), H5Tclose);
      if (!type.valid()) fail("not a readable HDF5 checkpoint (type of " + where + ")");
      if (H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != 4)
        fail(where + " has type " + h5::type_name(type.get()) + ", the model needs float32");
      const std::vector<int64_t> shape = dataset_shape(dset.get(), where);
      if (shape != t.shape)
        fail(where + " has shape " + shape_text(shape) + ", the model needs " + shape_text(t.shape));
    }
    check_no_extra_links(g.get(), group, expected);
  }

  // Reads every tensor of `group` into `out` at its offset. check_tensors() must have passed.
  // Every value must be finite (and >= 0 where non_negative: AdamW's second moment), so a run
  // never resumes from a checkpoint of a run that had already diverged.
  void read_tensors(const std::string& group, const model::ParamLayout& layout,
                    std::vector<float>& out, bool non_negative = false) {
    h5::Handle g = open_group(group);
    for (const auto& t : layout.tensors) {
      h5::Handle dset(H5Dopen2(g.get(), t.name.c_str(), H5P_DEFAULT), H5Dclose);
      float* data = out.data() + t.offset;
      if (!dset.valid() || H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        fail("/" + group + "/" + t.name + " could not be read (the file is corrupt)");
      for (size_t i = 0; i < t.numel; ++i)
        if (!std::isfinite(data[i]) || (non_negative && data[i] < 0))
          fail("/" + group + "/" + t.name + " element " + std::to_string(i) + " is " +
               std::to_string(data[i]) + (non_negative ? " (must be finite and >= 0)" : " (must be finite)"));
    }
  }

  // A scalar integer root attribute (any integer width).
  int64_t int_attr(const char* name) {
    h5::Handle attr = open_attr(name);
    h5::Handle type(H5Aget_type(attr.get()), H5Tclose);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_INTEGER)
      fail(std::string("root attribute '") + name + "' must be an integer");
    require_scalar(attr.get(), name);
    int64_t value = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0)
      fail(std::string("root attribute '") + name + "' could not be read");
    return value;
  }

  bool has_attr(const char* name) {
    const htri_t exists = H5Aexists(file_.get(), name);
    if (exists < 0)
      fail("not a readable HDF5 checkpoint (looking up attribute '" + std::string(name) + "')");
    return exists > 0;
  }

  // A scalar string root attribute, variable- or fixed-length.
  std::string string_attr(const char* name) {
    h5::Handle attr = open_attr(name);
    h5::Handle type(H5Aget_type(attr.get()), H5Tclose);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING)
      fail(std::string("root attribute '") + name + "' must be a string");
    require_scalar(attr.get(), name);
    h5::Handle mem(CHECK_H5(H5Tcopy(H5T_C_S1)), H5Tclose);
    CHECK_H5(H5Tset_cset(mem.get(), H5Tget_cset(type.get())));
    std::string value;
    if (H5Tis_variable_str(type.get()) > 0) {
      CHECK_H5(H5Tset_size(mem.get(), H5T_VARIABLE));
      char* data = nullptr;
      if (H5Aread(attr.get(), mem.get(), &data) < 0)
        fail(std::string("root attribute '") + name + "' could not be read");
      if (data) value = data;
      H5free_memory(data);
    } else {
      const size_t size = H5Tget_size(type.get());
      CHECK_H5(H5Tset_size(mem.get(), size));
      std::string buffer(size, '\0');
      if (H5Aread(attr.get(), mem.get(), buffer.data()) < 0)
        fail(std::string("root attribute '") + name + "' could not be read");
      value = buffer.substr(0, buffer.find('\0'));  // null-terminated or null-padded
    }
    return value;
  }

  [[noreturn]] void fail(const std::string& what) const { h5::bad_file(path_, what); }

 private:
  h5::Handle open_group(const std::string& group) {
    // Each level is checked: H5Lexists fails, rather than says no, below a missing group.
    std::string prefix;
    for (size_t start = 0; start <= group.size();) {
      const size_t slash = std::min(group.find('/', start), group.size());
      if (!prefix.empty()) prefix += '/';
      prefix.append(group, start, slash - start);
      const htri_t exists = H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT);
      if (exists < 0) fail("not a readable HDF5 checkpoint (looking up /" + prefix + ")");
      if (exists == 0) fail("/" + prefix + " is missing (not an sft-dp checkpoint?)");
      start = slash + 1;
    }
    h5::Handle g(H5Gopen2(file_.get(), group.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.valid()) fail("/" + group + " is not a group");
    return g;
  }

  // A different model has tensors this one lacks: refuse rather than ignore them.
  void check_no_extra_links(hid_t g, const std::string& group,
                            const std::set<std::string>& expected) {
    H5G_info_t info{};
    if (H5Gget_info(g, &info) < 0) fail("not a readable HDF5 checkpoint (listing /" + group + ")");
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t len =
          H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0) fail("not a readable HDF5 checkpoint (listing /" + group + ")");
      std::string name(static_cast<size_t>(len) + 1, '\0');
      H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                         H5P_DEFAULT);
      name.resize(static_cast<size_t>(len));
      if (!expected.count(name))
        fail("/" + group + "/" + name +
             " is not a tensor of this model (a checkpoint of a different model?)");
    }
  }

  std::vector<int64_t> dataset_shape(hid_t dset, const std::string& where) {
    h5::Handle space(H5Dget_space(dset), H5Sclose);
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0) fail("not a readable HDF5 checkpoint (shape of " + where + ")");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    return std::vector<int64_t>(dims.begin(), dims.end());
  }

  h5::Handle open_attr(const char* name) {
    const htri_t exists = H5Aexists(file_.get(), name);
    if (exists < 0) fail("not a readable HDF5 checkpoint (looking up attribute '" + std::string(name) + "')");
    if (exists == 0) fail(std::string("root attribute '") + name + "' is missing");
    h5::Handle attr(H5Aopen(file_.get(), name, H5P_DEFAULT), H5Aclose);
    if (!attr.valid()) fail(std::string("root attribute '") + name + "' could not be opened");
    return attr;
  }

  void require_scalar(hid_t attr, const char* name) {
    h5::Handle space(H5Aget_space(attr), H5Sclose);
    if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1)
      fail(std::string("root attribute '") + name + "' must hold one value");
  }

  std::string path_;
  h5::QuietErrors quiet_;  // before file_: silenced for the whole life of the file
  h5::Handle file_;
};

// `value` of root attribute `name` must lie in [lowest, highest]; `bounds` says why in words.
void require_in_range(CheckpointReader& r, const char* name, int64_t value, int64_t lowest,
                      int64_t highest, const std::string& bounds) {
  if (value < lowest || value > highest)
    r.fail(std::string("root attribute '") + name + "' is " + std::to_string(value) +
           ", must be " + bounds);
}

int64_t non_negative_attr(CheckpointReader& r, const char* name) {
  const int64_t value = r.int_attr(name);
  require_in_range(r, name, value, 0, INT64_MAX, ">= 0");
  return value;
}

}  // namespace

void load(const std::string& path, const model::ParamLayout& layout, std::vector<float>& params,
          std::vector<float>& m, std::vector<float>& v, TrainState& state) {
  detail::check_layout(layout, layout.total);
  CheckpointReader r(path);
  const int64_t version = r.int_attr("format_version");
  if (version != detail::kFormatVersion)
    r.fail("format_version " + std::to_string(version) + " is not supported (this build reads " +
           std::to_string(detail::kFormatVersion) + ")");
  const std::string params_group = detail::kParamsGroup;
  const std::string m_group = std::string("opt/") + detail::kMomentGroups[0];
  const std::string v_group = std::string("opt/") + detail::kMomentGroups[1];
  r.check_tensors(params_group, layout);
  r.check_tensors(m_group, layout);
  r.check_tensors(v_group, layout);
  TrainState loaded;
  loaded.step = non_negative_attr(r, "step");
  loaded.epoch = non_negative_attr(r, "epoch");
  loaded.step_in_epoch = non_negative_attr(r, "step_in_epoch");
  loaded.global_batch = r.has_attr("global_batch") ? non_negative_attr(r, "global_batch") : 0;
  loaded.optimizer_updates =
      r.has_attr("optimizer_updates") ? r.int_attr("optimizer_updates") : loaded.step;
  require_in_range(r, "optimizer_updates", loaded.optimizer_updates, 0, loaded.step,
                   "in [0, step] = [0, " + std::to_string(loaded.step) + "]");
  loaded.config_yaml = r.string_attr("config");
  if (r.has_attr("lora_base_hash")) {
    loaded.lora_base_hash = r.string_attr("lora_base_hash");
    loaded.lora_base = r.has_attr("lora_base") ? r.string_attr("lora_base") : "";
  }

  params.resize(layout.total);
  m.resize(layout.total);
  v.resize(layout.total);
  r.read_tensors(params_group, layout, params);
  r.read_tensors(m_group, layout, m);
  r.read_tensors(v_group, layout, v, /*non_negative=*/true);
  state = std::move(loaded);
}

std::optional<std::string> read_config(const std::string& path) {
  try {
    CheckpointReader r(path);
    if (!r.has_attr("config")) return std::nullopt;
    return r.string_attr("config");
  } catch (const UserError&) {
    return std::nullopt;  // damaged: load_newest decides what to do with it
  }
}

void load_params(const std::string& path, const model::ParamLayout& layout,
                 std::vector<float>& params) {
  detail::check_layout(layout, layout.total);
  CheckpointReader r(path);
  r.check_tensors(detail::kParamsGroup, layout);
  params.resize(layout.total);
  r.read_tensors(detail::kParamsGroup, layout, params);
}

}  // namespace sftdp::checkpoint
