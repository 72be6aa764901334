// tests/common/reference_gpt2.cpp — see reference_gpt2.h: the parameters go to an HDF5 file (SPEC
// names, with L and NH as root attributes), the batch to JSON, the gradients come back as HDF5.
#include "common/reference_gpt2.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "sftdp/checkpoint.h"

namespace sftdp::test {
namespace {
void add_int_attr(const std::string& path, const char* name, int value) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, name, H5T_NATIVE_INT, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT, &value);
  H5Aclose(a), H5Sclose(s), H5Fclose(f);
}
}  // namespace

Gpt2Reference reference_gpt2(const config::ModelDims& d, const model::ParamLayout& layout,
                             const std::vector<float>& params, const data::Batch& batch) {
  TempDir dir;
  checkpoint::save_params(dir / "params.h5", layout, params);
  add_int_attr(dir / "params.h5", "L", d.L);
  add_int_attr(dir / "params.h5", "NH", d.NH);
  nlohmann::json j = {{"B", batch.B}, {"T", batch.T}, {"inputs", batch.inputs}, {"targets", batch.targets},
                      {"loss_weights", batch.loss_weights}, {"segment_ids", batch.segment_ids},
                      {"positions", batch.positions}};
  write_file(dir / "batch.json", j.dump());
  const auto r = run_command("/usr/bin/python3 " + source_path("tests/model/reference_gpt2.py") + " " +
                             (dir / "params.h5") + " " + (dir / "batch.json") + " " + (dir / "grads.h5"));
  Gpt2Reference ref;
  if (r.exit_code != 0) {
    ADD_FAILURE() << "the float64 reference failed:\n" << r.output;
    return ref;
  }
  const auto sums = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  ref.loss_sum = sums["loss_sum"].get<double>();
  ref.weight_sum = sums["weight_sum"].get<double>();
  checkpoint::load_params(dir / "grads.h5", layout, ref.grads);
  return ref;
}

}  // namespace sftdp::test
