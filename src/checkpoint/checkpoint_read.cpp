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
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/sharded_format.h"
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
  hid_t file() const { return file_.get(); }
  const std::string& path() const { return path_; }

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


// The root attributes of a checkpoint file or an index: step, cursor, G, t, config, LoRA base.
TrainState read_state(CheckpointReader& r) {
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

  return loaded;
}

}  // namespace

void load(const std::string& path, const model::ParamLayout& layout, std::vector<float>& params,
          std::vector<float>& m, std::vector<float>& v, TrainState& state) {
  detail::check_layout(layout, layout.total);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {  // sharded (issue 36): the whole of every group
    Reader r(path, layout);
    std::array<std::vector<float>, kGroups> out;
    for (int g = 0; g < kGroups; ++g) out[g].resize(layout.total), r.read(g, 0, layout.total, out[g].data());
    params = std::move(out[0]), m = std::move(out[1]), v = std::move(out[2]);
    state = r.state();
    return;
  }
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
  TrainState loaded = read_state(r);

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
    std::error_code ec;
    CheckpointReader r(std::filesystem::is_directory(path, ec)
                           ? (std::filesystem::path(path) / detail::kIndexName).string() : path);
    if (!r.has_attr("config")) return std::nullopt;
    return r.string_attr("config");
  } catch (const UserError&) {
    return std::nullopt;  // damaged: load_newest decides what to do with it
  }
}

void load_params(const std::string& path, const model::ParamLayout& layout,
                 std::vector<float>& params) {
  detail::check_layout(layout, layout.total);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {  // sharded (issue 36)
    Reader r(path, layout);
    std::vector<float> out(layout.total);
    r.read(0, 0, layout.total, out.data());
    params = std::move(out);
    return;
  }
  CheckpointReader r(path);
  r.check_tensors(detail::kParamsGroup, layout);
  params.resize(layout.total);
  r.read_tensors(detail::kParamsGroup, layout, params);
}


// ---- Reader: either format, range by range (issue 36) ----------------------------------------

namespace {

// Adds flat elements [lo, hi) of the block below `prefix` (dims[d:]) to the selection of `space`.
void select_flat(hid_t space, const std::vector<hsize_t>& dims, std::vector<hsize_t> prefix, size_t d,
                 hsize_t lo, hsize_t hi) {
  if (lo >= hi) return;
  hsize_t inner = 1;
  for (size_t k = d + 1; k < dims.size(); ++k) inner *= dims[k];
  auto add = [&](std::vector<hsize_t> start, std::vector<hsize_t> count) {
    CHECK_H5(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
  };
  std::vector<hsize_t> ones(prefix.size(), 1);
  if (d + 1 == dims.size()) {
    auto start = prefix, count = ones;
    start.push_back(lo), count.push_back(hi - lo);
    return add(start, count);
  }
  hsize_t first = lo / inner;
  const hsize_t last = (hi - 1) / inner;
  auto sub = [&](hsize_t row, hsize_t a, hsize_t b) {
    auto p = prefix;
    p.push_back(row);
    select_flat(space, dims, p, d + 1, a, b);
  };
  if (first == last) return sub(first, lo - first * inner, hi - first * inner);
  if (lo % inner != 0) sub(first, lo % inner, inner), ++first;
  hsize_t end_full = last + 1;  // rows [first, end_full) are whole
  if (hi % inner != 0) sub(last, 0, hi % inner), end_full = last;
  if (first < end_full) {
    auto start = prefix, count = ones;
    start.push_back(first), count.push_back(end_full - first);
    for (size_t k = d + 1; k < dims.size(); ++k) start.push_back(0), count.push_back(dims[k]);
    add(start, count);
  }
}

struct PieceRef {
  int file = -1;  // shard rank; -1: the single file
  size_t start = 0, count = 0;
};

}  // namespace

struct Reader::Impl {
  std::string path;  // the file, or the directory
  bool sharded = false;
  const model::ParamLayout* layout = nullptr;
  std::unique_ptr<CheckpointReader> main;  // the single file, or index.h5
  TrainState state;
  int64_t world = 1;
  std::array<std::vector<std::vector<PieceRef>>, kGroups> pieces;  // [group][tensor], ascending start
  std::map<int, h5::Handle> shards;
  h5::QuietErrors quiet;

  std::string group_path(int g) const {
    if (sharded) return detail::kShardGroups[g];
    return g == 0 ? std::string(detail::kParamsGroup) : std::string("opt/") + detail::kMomentGroups[g - 1];
  }

  void open_single() {
    CheckpointReader& r = *main;
    const int64_t version = r.int_attr("format_version");
    if (version != detail::kFormatVersion)
      r.fail("format_version " + std::to_string(version) + " is not supported (this build reads " +
             std::to_string(detail::kFormatVersion) + " and directories of " +
             std::to_string(detail::kShardedFormatVersion) + ")");
    for (int g = 0; g < kGroups; ++g) {
      r.check_tensors(group_path(g), *layout);
      pieces[g].assign(layout->tensors.size(), {});
      for (size_t t = 0; t < layout->tensors.size(); ++t) pieces[g][t].push_back({-1, 0, layout->tensors[t].numel});
    }
    state = read_state(r);
  }

  std::vector<int64_t> i64_table(const char* where, hsize_t cols) {
    CheckpointReader& r = *main;
    h5::Handle dset(H5Dopen2(r.file(), where, H5P_DEFAULT), H5Dclose);
    if (!dset.valid()) r.fail(std::string("/") + where + " is missing");
    h5::Handle space(H5Dget_space(dset.get()), H5Sclose);
    hsize_t dims[2] = {0, 0};
    if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != 2 ||
        H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0 || (cols != 0 && dims[1] != cols))
      r.fail(std::string("/") + where + " must be an integer table of " + std::to_string(cols) + " columns");
    std::vector<int64_t> out(dims[0] * dims[1]);
    if (!out.empty() && H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
      r.fail(std::string("/") + where + " could not be read (the file is corrupt)");
    return out;
  }

  void open_index() {
    CheckpointReader& r = *main;
    const int64_t version = r.int_attr("format_version");
    if (version != detail::kShardedFormatVersion)
      r.fail("format_version " + std::to_string(version) + " is not supported in an index (this build reads " +
             std::to_string(detail::kShardedFormatVersion) + ")");
    world = r.int_attr("world_size");
    require_in_range(r, "world_size", world, 1, INT32_MAX, ">= 1");
    // Tensor names and shapes: the layout's, in its order.
    std::vector<std::string> names;
    {
      h5::Handle dset(H5Dopen2(r.file(), "tensors/names", H5P_DEFAULT), H5Dclose);
      if (!dset.valid()) r.fail("/tensors/names is missing (not an sft-dp index?)");
      h5::Handle space(H5Dget_space(dset.get()), H5Sclose);
      const hssize_t n = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
      if (n < 0) r.fail("/tensors/names could not be read");
      h5::Handle mem(CHECK_H5(H5Tcopy(H5T_C_S1)), H5Tclose);
      CHECK_H5(H5Tset_size(mem.get(), H5T_VARIABLE));
      CHECK_H5(H5Tset_cset(mem.get(), H5T_CSET_UTF8));
      std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
      if (n > 0 && H5Dread(dset.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
        r.fail("/tensors/names could not be read (must be strings)");
      for (char* p : ptrs) names.emplace_back(p ? p : ""), H5free_memory(p);
    }
    const std::vector<int64_t> shapes = i64_table("tensors/shapes", 0);
    const size_t T = layout->tensors.size();
    const size_t D = names.empty() ? 1 : shapes.size() / std::max<size_t>(names.size(), 1);
    if (shapes.size() != names.size() * D) r.fail("/tensors/shapes does not match /tensors/names");
    for (size_t t = 0; t < std::max(T, names.size()); ++t) {
      if (t >= names.size())
        r.fail("/tensors/names lacks " + layout->tensors[t].name + " (the model needs " +
               shape_text(layout->tensors[t].shape) + ")");
      if (t >= T || names[t] != layout->tensors[t].name)
        r.fail("/tensors/names holds " + names[t] + " where the model has " +
               (t < T ? layout->tensors[t].name : std::string("no more tensors")) +
               " (a checkpoint of a different model?)");
      std::vector<int64_t> shape;
      for (size_t d = 0; d < D && shapes[t * D + d] >= 0; ++d) shape.push_back(shapes[t * D + d]);
      if (shape != layout->tensors[t].shape)
        r.fail(names[t] + " has shape " + shape_text(shape) + ", the model needs " + shape_text(layout->tensors[t].shape));
    }
    for (int g = 0; g < kGroups; ++g) {
      const std::string where = std::string("pieces/") + detail::kShardGroups[g];
      const std::vector<int64_t> rows = i64_table(where.c_str(), 4);
      pieces[g].assign(T, {});
      for (size_t i = 0; i < rows.size(); i += 4) {
        const int64_t t = rows[i], start = rows[i + 1], count = rows[i + 2], rank = rows[i + 3];
        if (t < 0 || static_cast<size_t>(t) >= T || start < 0 || count <= 0 || rank < 0 || rank >= world ||
            static_cast<size_t>(start + count) > layout->tensors[static_cast<size_t>(t)].numel)
          r.fail("/" + where + " row " + std::to_string(i / 4) + " is out of range");
        pieces[g][static_cast<size_t>(t)].push_back(
            {static_cast<int>(rank), static_cast<size_t>(start), static_cast<size_t>(count)});
      }
      for (size_t t = 0; t < T; ++t) {  // the pieces must tile the tensor
        auto& ps = pieces[g][t];
        std::sort(ps.begin(), ps.end(), [](const PieceRef& a, const PieceRef& b) { return a.start < b.start; });
        size_t at = 0;
        for (const auto& p : ps) {
          if (p.start != at) break;
          at += p.count;
        }
        if (at != layout->tensors[t].numel)
          r.fail("/" + where + " does not cover " + layout->tensors[t].name + " exactly once");
      }
    }
    state = read_state(r);
  }

  hid_t shard(int rank) {
    auto it = shards.find(rank);
    if (it != shards.end()) return it->second.get();
    const std::string file = (std::filesystem::path(path) / detail::shard_name(rank)).string();
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
      h5::bad_file(file, "is missing (the index names its pieces)");
    if (H5Fis_hdf5(file.c_str()) <= 0) h5::bad_file(file, "not a readable HDF5 shard");
    const h5::Handle fapl = detail::checkpoint_file_access(false);
    h5::Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    if (!f.valid()) h5::bad_file(file, "not a readable HDF5 shard");
    const hid_t id = f.get();
    shards.emplace(rank, std::move(f));
    // The shard must be this checkpoint's (not a stale file of another write).
    for (auto [name, want] : {std::pair<const char*, int64_t>{"step", state.step}, {"rank", rank}, {"world_size", world}}) {
      int64_t got = -1;
      h5::Handle attr(H5Aopen(id, name, H5P_DEFAULT), H5Aclose);
      if (!attr.valid() || H5Aread(attr.get(), H5T_NATIVE_INT64, &got) < 0 || got != want)
        h5::bad_file(file, std::string("root attribute '") + name + "' is not " + std::to_string(want) +
                               " (a shard of another checkpoint?)");
    }
    return id;
  }

  // Elements [lo, hi) of tensor t from piece p of group g into out.
  void read_piece(int g, size_t t, const PieceRef& p, size_t lo, size_t hi, float* out) {
    const auto& info = layout->tensors[t];
    const hid_t file = p.file < 0 ? main->file() : shard(p.file);
    const std::string file_name =
        p.file < 0 ? path : (std::filesystem::path(path) / detail::shard_name(p.file)).string();
    const std::string dset_name =
        group_path(g) + "/" + (p.file < 0 ? info.name : detail::piece_name(info.name, p.start));
    h5::Handle dset(H5Dopen2(file, dset_name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dset.valid()) h5::bad_file(file_name, "/" + dset_name + " is missing");
    h5::Handle space(H5Dget_space(dset.get()), H5Sclose);
    const int nd = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (nd < 1) h5::bad_file(file_name, "/" + dset_name + " has no shape");
    std::vector<hsize_t> dims(static_cast<size_t>(nd));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    hsize_t numel = 1;
    for (hsize_t d : dims) numel *= d;
    if (numel != p.count) h5::bad_file(file_name, "/" + dset_name + " holds " + std::to_string(numel) +
                                                      " floats, the index says " + std::to_string(p.count));
    CHECK_H5(H5Sselect_none(space.get()));
    select_flat(space.get(), dims, {}, 0, lo - p.start, hi - p.start);
    const hsize_t n[1] = {hi - lo};
    h5::Handle mem(CHECK_H5(H5Screate_simple(1, n, nullptr)), H5Sclose);
    if (H5Dread(dset.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, out) < 0)
      h5::bad_file(file_name, "/" + dset_name + " could not be read (the file is corrupt)");
    const bool non_negative = g == 2;
    for (size_t i = 0; i < hi - lo; ++i)
      if (!std::isfinite(out[i]) || (non_negative && out[i] < 0))
        h5::bad_file(file_name, "/" + dset_name + " element " + std::to_string(lo - p.start + i) + " (" +
                                    info.name + " element " + std::to_string(lo + i) + ") is " +
                                    std::to_string(out[i]) +
                                    (non_negative ? " (must be finite and >= 0)" : " (must be finite)"));
  }
};

Reader::Reader(const std::string& path, const model::ParamLayout& layout) : impl_(std::make_unique<Impl>()) {
  detail::check_layout(layout, layout.total);
  impl_->path = path;
  impl_->layout = &layout;
  std::error_code ec;
  impl_->sharded = std::filesystem::is_directory(path, ec);
  if (impl_->sharded) {
    const std::string index = (std::filesystem::path(path) / detail::kIndexName).string();
    if (!std::filesystem::exists(index, ec))
      h5::bad_file(path, "has no index.h5 (a checkpoint write that never finished, not a checkpoint)");
    impl_->main = std::make_unique<CheckpointReader>(index);
    impl_->open_index();
  } else {
    impl_->main = std::make_unique<CheckpointReader>(path);
    impl_->open_single();
  }
}

Reader::~Reader() = default;

const TrainState& Reader::state() const { return impl_->state; }

void Reader::read(int group, size_t begin, size_t n, float* out) {
  SFTDP_ASSERT(group >= 0 && group < kGroups, "Reader::read: no such group");
  const auto& layout = *impl_->layout;
  SFTDP_ASSERT(begin + n <= layout.total, "Reader::read: a range beyond the layout");
  const size_t end = begin + n;
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const auto& info = layout.tensors[t];
    const size_t lo = std::max(begin, info.offset), hi = std::min(end, info.offset + info.numel);
    if (lo >= hi) continue;
    for (const auto& p : impl_->pieces[group][t]) {  // within the tensor: [lo - offset, hi - offset)
      const size_t a = std::max(lo - info.offset, p.start), b = std::min(hi - info.offset, p.start + p.count);
      if (a < b) impl_->read_piece(group, t, p, a, b, out + (info.offset + a - begin));
    }
  }
}

}  // namespace sftdp::checkpoint
