// tests/fuzz/fuzz_checkpoint.cpp — fuzzes the SPEC §5 checkpoint reader (src/checkpoint: load and
// load_params). As for the data reader, the input drives a generator of well-formed HDF5 files
// with hostile contents: groups present, absent or datasets; tensors missing, extra, dangling,
// of other dtypes, ranks and shapes, unreadable; values NaN/Inf/negative; the root attributes
// (format_version, step, epoch, ..., config) missing, of other types, shapes and values. The
// reader must answer with a UserError or with state that honours its contract, close every HDF5
// id, and never crash, hang or trip a sanitizer.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"
#include "sftdp/model.h"

namespace {

using sftdp::fuzz::ByteReader;

const sftdp::model::ParamLayout& tiny_layout() {
  static const sftdp::model::ParamLayout layout = [] {
    sftdp::config::ModelDims d;
    d.L = 1, d.NH = 1, d.C = 2, d.F = 3, d.V = 3, d.maxT = 2;
    return sftdp::model::gpt2_layout(d);
  }();
  return layout;
}

// One tensor: mostly right, sometimes absent, a dangling link, a group, another type or shape.
void write_tensor(ByteReader& in, hid_t group, const sftdp::model::ParamInfo& t) {
  const char* name = t.name.c_str();
  switch (in.pick(24)) {
    case 23: return;
    case 22: H5Lcreate_soft("/nowhere", group, name, H5P_DEFAULT, H5P_DEFAULT); return;
    case 21: H5Gclose(sftdp::fuzz::h5_ok(H5Gcreate2(group, name, H5P_DEFAULT, H5P_DEFAULT,
                                                    H5P_DEFAULT), "H5Gcreate2")); return;
    default: break;
  }
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  switch (in.pick(16)) {
    case 12: dims.push_back(1); break;
    case 13: dims.pop_back(); break;
    case 14: dims.back() += 1; break;
    case 15: dims.clear(); break;
    default: break;
  }
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  std::vector<double> values(n);
  const bool hostile = in.pick(4) == 3;
  for (auto& v : values) v = hostile ? in.interesting_float() : in.pick(200) / 100.0;
  const hid_t type = sftdp::fuzz::pick_type(in, H5T_IEEE_F32LE);
  const bool chunked = in.pick(4) == 3, missing_external = in.pick(24) == 23;
  sftdp::fuzz::write_dataset(group, name, type, dims, values, chunked, missing_external);
}

// "params", "opt/m" or "opt/v" (parents created on the way): absent, a dataset, or a group of the
// layout's tensors, sometimes with one more.
void write_group(ByteReader& in, hid_t file, const char* path) {
  const uint32_t mode = in.pick(12);
  if (mode == 11) return;
  const hid_t lcpl = sftdp::fuzz::h5_ok(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  H5Pset_create_intermediate_group(lcpl, 1);
  if (mode == 10) {
    const hsize_t one = 1;
    const hid_t space = H5Screate_simple(1, &one, nullptr);
    H5Dclose(sftdp::fuzz::h5_ok(
        H5Dcreate2(file, path, H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), path));
    H5Sclose(space);
    H5Pclose(lcpl);
    return;
  }
  const hid_t group =
      sftdp::fuzz::h5_ok(H5Gcreate2(file, path, lcpl, H5P_DEFAULT, H5P_DEFAULT), path);
  H5Pclose(lcpl);
  for (const auto& t : tiny_layout().tensors) write_tensor(in, group, t);
  if (in.pick(16) == 15)
    sftdp::fuzz::write_dataset(group, "h.7.extra.weight", H5T_IEEE_F32LE, {2}, {0, 0}, false, false);
  H5Gclose(group);
}

// An integer attribute, mostly in [lo, hi].
void write_int_attr(ByteReader& in, hid_t file, const char* name, int64_t lo, int64_t hi) {
  const double value = in.pick(4) == 3 ? static_cast<double>(in.interesting_int(hi))
                                       : static_cast<double>(in.range(lo, hi));
  switch (in.pick(12)) {
    case 11: return;
    case 10: sftdp::fuzz::write_string_attr(file, name, "7", in.flag()); return;
    case 9: sftdp::fuzz::write_numeric_attr(file, name, H5T_IEEE_F64LE, {value}); return;
    case 8: sftdp::fuzz::write_numeric_attr(file, name, H5T_STD_I64LE, {value, value}); return;
    case 7: sftdp::fuzz::write_numeric_attr(file, name, H5T_STD_I64LE, {}); return;
    default:
      sftdp::fuzz::write_numeric_attr(file, name, sftdp::fuzz::pick_type(in, H5T_STD_I64LE), {value});
  }
}

void write_config_attr(ByteReader& in, hid_t file) {
  std::string text;
  for (int n = static_cast<int>(in.range(0, 24)); n > 0; --n) text += static_cast<char>(in.byte());
  switch (in.pick(8)) {
    case 7: return;
    case 6: sftdp::fuzz::write_numeric_attr(file, "config", H5T_STD_I32LE, {1}); return;
    default: sftdp::fuzz::write_string_attr(file, "config", text, in.flag());
  }
}

void check_loaded(const std::vector<float>& params, const std::vector<float>& m,
                  const std::vector<float>& v, const sftdp::checkpoint::TrainState& s, bool full) {
  const size_t total = tiny_layout().total;
  bool ok = params.size() == total && (!full || (m.size() == total && v.size() == total));
  for (const auto& t : tiny_layout().tensors)
    for (size_t i = t.offset; ok && i < t.offset + t.numel; ++i)
      ok = std::isfinite(params[i]) && (!full || (std::isfinite(m[i]) && std::isfinite(v[i]) && v[i] >= 0));
  if (full)
    ok = ok && s.step >= 0 && s.epoch >= 0 && s.step_in_epoch >= 0 && s.global_batch >= 0 &&
         s.optimizer_updates >= 0 && s.optimizer_updates <= s.step;
  if (!ok) {
    std::fprintf(stderr, "fuzz_checkpoint: a load that succeeded broke its contract\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return -1;
  sftdp::fuzz::internal_errors_abort();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  ByteReader in(data, size);
  const std::string path = sftdp::fuzz::scratch_path("ckpt");
  const hid_t file = sftdp::fuzz::create_file(path);
  write_group(in, file, "params");
  write_group(in, file, "opt/m");
  write_group(in, file, "opt/v");
  write_int_attr(in, file, "format_version", 1, 1);
  for (const char* name : {"step", "epoch", "step_in_epoch", "global_batch", "optimizer_updates"})
    write_int_attr(in, file, name, 0, 9);
  write_config_attr(in, file);
  H5Fclose(file);

  const auto& layout = tiny_layout();
  std::vector<float> params, m, v;
  sftdp::checkpoint::TrainState state;
  try {
    sftdp::checkpoint::load(path, layout, params, m, v, state);
    check_loaded(params, m, v, state, true);
  } catch (const sftdp::UserError&) {
  }
  sftdp::fuzz::require_no_open_h5_objects("fuzz_checkpoint (load)");
  params.clear();
  try {
    sftdp::checkpoint::load_params(path, layout, params);
    check_loaded(params, m, v, state, false);
  } catch (const sftdp::UserError&) {
  }
  sftdp::fuzz::require_no_open_h5_objects("fuzz_checkpoint (load_params)");
  std::remove(path.c_str());
  return 0;
}
