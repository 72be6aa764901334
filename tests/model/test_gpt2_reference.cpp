// tests/model/test_gpt2_reference.cpp — our fp32 GPT-2 against an independent float64 PyTorch
// implementation of the SPEC's maths (tests/model/reference_gpt2.py, generated on the fly): the
// loss sum, the weight sum and every gradient tensor, with and without packed segments, and with
// the fused LM head in chunks of 4 gathered positions (crossing rows of T = 10).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/checkpoint.h"
#include "sftdp/model.h"

using namespace sftdp;

namespace {

void add_int_attr(const std::string& path, const char* name, int value) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, name, H5T_NATIVE_INT, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT, &value);
  H5Aclose(a), H5Sclose(s), H5Fclose(f);
}

void compare_with_reference(bool segments, int head_chunk_rows = 0) {
  const auto d = test::tiny_dims();
  const int B = 3, T = 10;
  model::Gpt2 m(d, cpu_ops(), B, T);
  m.set_head_chunking(head_chunk_rows);
  std::vector<float> p;
  model::init_params(p, m.layout(), d, 5);
  const auto noise = test::uniform(p.size(), 17, -0.1f, 0.1f);  // no special values anywhere
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  m.set_params_from_host(p);
  const auto batch = test::random_rows(B, T, d.V, 31, segments);
  m.zero_grads();
  m.forward_backward(batch);
  const auto ours = m.grads_to_host();

  test::TempDir dir;
  checkpoint::save_params(dir / "params.h5", m.layout(), p);
  add_int_attr(dir / "params.h5", "L", d.L);
  add_int_attr(dir / "params.h5", "NH", d.NH);
  nlohmann::json j = {{"B", B}, {"T", T}, {"inputs", batch.inputs}, {"targets", batch.targets},
                      {"loss_weights", batch.loss_weights}, {"segment_ids", batch.segment_ids},
                      {"positions", batch.positions}};
  test::write_file(dir / "batch.json", j.dump());
  const auto r = test::run_command("/usr/bin/python3 " + test::source_path("tests/model/reference_gpt2.py") +
                                   " " + (dir / "params.h5") + " " + (dir / "batch.json") + " " +
                                   (dir / "grads.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto sums = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  const size_t P = m.layout().total;
  EXPECT_NEAR(ours[P], sums["loss_sum"].get<double>(), 1e-5 * sums["loss_sum"].get<double>());
  EXPECT_DOUBLE_EQ(ours[P + 1], sums["weight_sum"].get<double>());

  std::vector<float> ref;
  checkpoint::load_params(dir / "grads.h5", m.layout(), ref);
  for (const auto& t : m.layout().tensors) {
    const std::vector<float> a(ours.begin() + t.offset, ours.begin() + t.offset + t.numel);
    const std::vector<float> b(ref.begin() + t.offset, ref.begin() + t.offset + t.numel);
    EXPECT_LE(test::max_rel_diff(a, b), 1e-4) << t.name << (segments ? " (segments)" : "");
  }
}

}  // namespace

TEST(Gpt2Reference, MatchesFloat64PyTorch) { compare_with_reference(false); }
TEST(Gpt2Reference, MatchesFloat64PyTorchWithPackedSegments) { compare_with_reference(true); }
TEST(Gpt2Reference, MatchesFloat64PyTorchWithSmallHeadChunks) { compare_with_reference(true, 4); }
