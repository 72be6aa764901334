// tests/checkpoint/test_checkpoint.cpp — checkpoint contents (SPEC §5): save → load is bitwise,
// the file layout is what SPEC names (dotted names are single links, typed root attributes), and
// every kind of bad file gives a UserError naming the file and the tensor or attribute. The
// TrainState round-trips whole; files older than global_batch/optimizer_updates get defaults.
#include <hdf5.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hand_layout.h"
#include "common/test_util.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"

using sftdp::test::user_error_of;

namespace sftdp::checkpoint {
namespace {

using model::ParamLayout;
using test::TempDir;
using test::make_layout;
using test::Specs;

const Specs kSmallModel = {{"wte", {16, 4}},
                           {"h.0.attn.qkv.weight", {12, 4}},
                           {"h.0.mlp.fc.weight", {8, 4}},
                           {"h.0.ln_1.weight", {4}},
                           {"h.0.mlp.fc.bias", {8}}};

// Edits an existing file with the raw HDF5 API (to build the bad files users might have).
void edit_h5(const std::string& path, const std::function<void(hid_t)>& edit) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  edit(file);
  ASSERT_GE(H5Fclose(file), 0);
}

// Replaces dataset `where` by one of `type` and `dims` (zeros).
void replace_dataset(hid_t file, const char* where, hid_t type, std::vector<hsize_t> dims) {
  ASSERT_GE(H5Ldelete(file, where, H5P_DEFAULT), 0);
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t dset = H5Dcreate2(file, where, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  H5Dclose(dset);
  H5Sclose(space);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout = make_layout(kSmallModel);
    params = test::uniform(layout.total, 1);
    m = test::uniform(layout.total, 2, 0.f, 1e-3f);
    v = test::uniform(layout.total, 3, 0.f, 1e-6f);
    // Values a text or double round trip would spoil: -0, a denormal, the extremes.
    params[0] = -0.0f;
    params[1] = 1e-40f;
    params[2] = 3.4028235e38f;
    params[layout.total - 1] = -1.1754944e-38f;
    state.step = 123;
    state.epoch = 2;
    state.step_in_epoch = 7;
    state.global_batch = 24;
    state.optimizer_updates = 120;  // three steps were skipped (non-finite gradients)
    state.config_yaml = "run_name: tiny\nmodel:\n  emb_dim: 4  # ünïcode comment\n";
  }
  std::string save_one() { return save(dir.path(), layout, params, m, v, state); }
  std::string load_error(const std::string& path, const ParamLayout& l) {
    return user_error_of([&] {
      std::vector<float> p, mm, vv;
      TrainState s;
      load(path, l, p, mm, vv, s);
    });
  }

  TempDir dir;
  ParamLayout layout;
  std::vector<float> params, m, v;
  TrainState state;
};

TEST_F(CheckpointTest, SaveThenLoadIsBitwise) {
  const std::string path = save_one();
  EXPECT_EQ(path, dir / "step_123.h5");
  std::vector<float> p2, m2, v2(3, 9.f);  // wrong sizes on purpose: load resizes
  TrainState s2;
  load(path, layout, p2, m2, v2, s2);
  EXPECT_TRUE(test::bitwise_equal(p2, params));
  EXPECT_TRUE(test::bitwise_equal(m2, m));
  EXPECT_TRUE(test::bitwise_equal(v2, v));
  EXPECT_EQ(s2.step, 123);
  EXPECT_EQ(s2.epoch, 2);
  EXPECT_EQ(s2.step_in_epoch, 7);
  EXPECT_EQ(s2.global_batch, 24);
  EXPECT_EQ(s2.optimizer_updates, 120);
  EXPECT_EQ(s2.config_yaml, state.config_yaml);
}

TEST_F(CheckpointTest, FileHoldsSpecNamesAsSingleLinksAndTypedAttributes) {
  const std::string path = save_one();
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const char* group : {"/params", "/opt/m", "/opt/v"}) {
    H5G_info_t info{};
    const hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    ASSERT_GE(g, 0) << group;
    ASSERT_GE(H5Gget_info(g, &info), 0);
    EXPECT_EQ(info.nlinks, kSmallModel.size()) << group << ": one link per tensor, no nesting";
    EXPECT_GT(H5Lexists(g, "h.0.attn.qkv.weight", H5P_DEFAULT), 0) << group;
    EXPECT_EQ(H5Lexists(g, "h", H5P_DEFAULT), 0) << group << ": dots must not make groups";
    const hid_t d = H5Dopen2(g, "h.0.attn.qkv.weight", H5P_DEFAULT);
    const hid_t type = H5Dget_type(d);
    EXPECT_GT(H5Tequal(type, H5T_IEEE_F32LE), 0);
    H5Tclose(type);
    H5Dclose(d);
    H5Gclose(g);
  }
  for (const char* name :
       {"step", "epoch", "step_in_epoch", "global_batch", "optimizer_updates"}) {
    const hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    ASSERT_GE(a, 0) << name;
    const hid_t type = H5Aget_type(a);
    EXPECT_GT(H5Tequal(type, H5T_STD_I64LE), 0) << name;
    H5Tclose(type);
    H5Aclose(a);
  }
  const hid_t a = H5Aopen(file, "format_version", H5P_DEFAULT);
  int version = 0;
  ASSERT_GE(H5Aread(a, H5T_NATIVE_INT, &version), 0);
  EXPECT_EQ(version, 1);
  H5Aclose(a);
  H5Fclose(file);
}

TEST_F(CheckpointTest, FixedLengthConfigStringIsAccepted) {
  const std::string path = save_one();
  edit_h5(path, [](hid_t file) {
    ASSERT_GE(H5Adelete(file, "config"), 0);
    const std::string text = "run_name: fixed\n";
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, text.size() + 4);  // null-padded
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attr = H5Acreate2(file, "config", type, space, H5P_DEFAULT, H5P_DEFAULT);
    std::string padded = text + std::string(4, '\0');
    ASSERT_GE(H5Awrite(attr, type, padded.data()), 0);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  });
  std::vector<float> p, mm, vv;
  TrainState s;
  load(path, layout, p, mm, vv, s);
  EXPECT_EQ(s.config_yaml, "run_name: fixed\n");
}

TEST_F(CheckpointTest, MissingFileIsAUserError) {
  const std::string path = dir / "step_5.h5";
  EXPECT_EQ(load_error(path, layout), path + ": checkpoint not found");
  std::vector<float> p;
  EXPECT_EQ(user_error_of([&] { load_params(path, layout, p); }), path + ": checkpoint not found");
}

TEST_F(CheckpointTest, TextFileIsNotAReadableCheckpoint) {
  const std::string path = dir / "step_5.h5";
  test::write_file(path, "this is not HDF5\n");
  EXPECT_EQ(load_error(path, layout), path + ": not a readable HDF5 checkpoint");
}

TEST_F(CheckpointTest, TruncatedFileIsNotAReadableCheckpoint) {
  const std::string path = save_one();
  const std::string bytes = test::read_file(path);
  test::write_file(path, bytes.substr(0, bytes.size() / 2));
  EXPECT_EQ(load_error(path, layout), path + ": not a readable HDF5 checkpoint");
}

TEST_F(CheckpointTest, ShapeMismatchNamesFileTensorAndBothShapes) {
  const std::string path = save_one();
  Specs bigger = kSmallModel;
  bigger[2].second = {16, 4};  // h.0.mlp.fc.weight
  EXPECT_EQ(load_error(path, make_layout(bigger)),
            path + ": /params/h.0.mlp.fc.weight has shape [8,4], the model needs [16,4]");
}

TEST_F(CheckpointTest, MomentShapeMismatchNamesTheMomentTensor) {
  const std::string path = save_one();
  edit_h5(path, [](hid_t f) { replace_dataset(f, "/opt/v/h.0.ln_1.weight", H5T_IEEE_F32LE, {5}); });
  EXPECT_EQ(load_error(path, layout),
            path + ": /opt/v/h.0.ln_1.weight has shape [5], the model needs [4]");
}

TEST_F(CheckpointTest, WrongDtypeIsAUserError) {
  const std::string path = save_one();
  edit_h5(path, [](hid_t f) { replace_dataset(f, "/params/wte", H5T_IEEE_F64LE, {16, 4}); });
  EXPECT_EQ(load_error(path, layout),
            path + ": /params/wte has type float64, the model needs float32");
}

TEST_F(CheckpointTest, MissingTensorIsAUserError) {
  const std::string path = save_one();
  Specs more = kSmallModel;
  more.push_back({"ln_f.weight", {4}});
  EXPECT_EQ(load_error(path, make_layout(more)),
            path + ": /params/ln_f.weight is missing (the model needs [4])");
}

TEST_F(CheckpointTest, ExtraTensorMeansADifferentModel) {
  const std::string path = save_one();
  Specs fewer = kSmallModel;
  fewer.erase(fewer.begin() + 3);  // the file has h.0.ln_1.weight, the model does not
  EXPECT_EQ(load_error(path, make_layout(fewer)),
            path + ": /params/h.0.ln_1.weight is not a tensor of this model "
                   "(a checkpoint of a different model?)");
}

TEST_F(CheckpointTest, EachMissingRootAttributeIsAUserError) {
  for (const char* name : {"format_version", "step", "epoch", "step_in_epoch", "config"}) {
    const std::string path = save_one();
    edit_h5(path, [&](hid_t f) { ASSERT_GE(H5Adelete(f, name), 0); });
    EXPECT_EQ(load_error(path, layout), path + ": root attribute '" + name + "' is missing");
  }
}

// Replaces root attribute `name` by an int64 scalar holding `value`.
void set_int64_attr(hid_t file, const char* name, int64_t value) {
  if (H5Aexists(file, name) > 0) {
    ASSERT_GE(H5Adelete(file, name), 0);
  }
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attr, 0);
  ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(attr);
  H5Sclose(space);
}

TEST_F(CheckpointTest, FilesWithoutTheNewAttributesLoadWithDefaults) {
  // Written before global_batch and optimizer_updates existed: every step was an update.
  const std::string path = save_one();
  edit_h5(path, [](hid_t f) {
    ASSERT_GE(H5Adelete(f, "global_batch"), 0);
    ASSERT_GE(H5Adelete(f, "optimizer_updates"), 0);
  });
  std::vector<float> p, mm, vv;
  TrainState s;
  s.global_batch = 99;
  s.optimizer_updates = 99;
  load(path, layout, p, mm, vv, s);
  EXPECT_EQ(s.step, 123);
  EXPECT_EQ(s.global_batch, 0) << "0 = unknown";
  EXPECT_EQ(s.optimizer_updates, 123);
  EXPECT_TRUE(test::bitwise_equal(p, params));
}

TEST_F(CheckpointTest, OutOfRangeStateAttributesAreUserErrors) {
  const std::vector<std::pair<std::string, int64_t>> bad = {
      {"step", -1}, {"epoch", -1}, {"step_in_epoch", -2}, {"global_batch", -1},
      {"optimizer_updates", -1}, {"optimizer_updates", 124}};
  for (const auto& [name, value] : bad) {
    const std::string path = save_one();
    // Captured by init-capture: clang 14 (the sanitized build) cannot capture structured bindings.
    edit_h5(path, [&n = name, v = value](hid_t f) { set_int64_attr(f, n.c_str(), v); });
    const std::string bounds = name == "optimizer_updates" ? "in [0, step] = [0, 123]" : ">= 0";
    EXPECT_EQ(load_error(path, layout), path + ": root attribute '" + name + "' is " +
                                            std::to_string(value) + ", must be " + bounds);
  }
  // The bounds themselves load: no update yet, or one per step.
  for (const int64_t updates : {int64_t{0}, int64_t{123}}) {
    const std::string path = save_one();
    edit_h5(path, [&](hid_t f) { set_int64_attr(f, "optimizer_updates", updates); });
    std::vector<float> p, mm, vv;
    TrainState s;
    load(path, layout, p, mm, vv, s);
    EXPECT_EQ(s.optimizer_updates, updates);
  }
}

TEST_F(CheckpointTest, SaveRefusesAStateThatLoadWouldRefuse) {
  state.optimizer_updates = state.step + 1;
  EXPECT_EXIT(save_one(), ::testing::ExitedWithCode(1),
              "optimizer_updates outside \\[0, step\\]");
  state.optimizer_updates = 0;
  state.global_batch = -1;
  EXPECT_EXIT(save_one(), ::testing::ExitedWithCode(1), "global batch");
  EXPECT_TRUE(test::list_files(dir.path()).empty());
}

TEST_F(CheckpointTest, MismatchLeavesCallerBuffersUntouched) {
  const std::string path = save_one();
  Specs bigger = kSmallModel;
  bigger[0].second = {32, 4};
  const ParamLayout other = make_layout(bigger);
  std::vector<float> p(7, 1.5f), mm(7, 2.5f), vv(7, 3.5f);
  TrainState s;
  EXPECT_THROW(load(path, other, p, mm, vv, s), UserError);
  EXPECT_EQ(p, std::vector<float>(7, 1.5f));
  EXPECT_EQ(s.step, 0);
}

TEST_F(CheckpointTest, LoadParamsReadsAParamsOnlyFile) {
  const std::string path = dir / "init/model.h5";
  save_params(path, layout, params);
  EXPECT_EQ(test::list_files(dir.path()), std::vector<std::string>{path}) << "no temp file left";
  std::vector<float> p;
  load_params(path, layout, p);
  EXPECT_TRUE(test::bitwise_equal(p, params));
  // A whole checkpoint needs the moments: the error names the first missing group.
  EXPECT_EQ(load_error(path, layout), path + ": /opt is missing (not an sft-dp checkpoint?)");
}

TEST_F(CheckpointTest, LoadParamsAcceptsFilesFromOtherWritersAndFullCheckpoints) {
  // A converted model may carry no attributes at all: load_params only needs /params.
  const std::string path = dir / "converted.h5";
  save_params(path, layout, params);
  edit_h5(path, [](hid_t f) { ASSERT_GE(H5Adelete(f, "format_version"), 0); });
  std::vector<float> p;
  load_params(path, layout, p);
  EXPECT_TRUE(test::bitwise_equal(p, params));
  std::vector<float> p2;
  load_params(save_one(), layout, p2);
  EXPECT_TRUE(test::bitwise_equal(p2, params));
}

TEST_F(CheckpointTest, LoadParamsValidatesShapesAndExtras) {
  const std::string path = dir / "model.h5";
  save_params(path, layout, params);
  Specs fewer = kSmallModel;
  fewer.pop_back();
  std::vector<float> p;
  EXPECT_EQ(user_error_of([&] { load_params(path, make_layout(fewer), p); }),
            path + ": /params/h.0.mlp.fc.bias is not a tensor of this model "
                   "(a checkpoint of a different model?)");
  Specs other = kSmallModel;
  other[1].second = {4, 12};
  EXPECT_EQ(user_error_of([&] { load_params(path, make_layout(other), p); }),
            path + ": /params/h.0.attn.qkv.weight has shape [12,4], the model needs [4,12]");
}

TEST_F(CheckpointTest, FileWithoutParamsGroupIsAUserError) {
  const std::string path = dir / "empty.h5";
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5Fclose(f);
  std::vector<float> p;
  EXPECT_EQ(user_error_of([&] { load_params(path, layout, p); }),
            path + ": /params is missing (not an sft-dp checkpoint?)");
}

}  // namespace
}  // namespace sftdp::checkpoint

// A checkpoint of a run that had already diverged (NaN or Inf weights, a negative second moment)
// is refused by name, so resuming never continues from garbage.
TEST(CheckpointValues, NonFiniteParamsAndNegativeSecondMomentAreRefused) {
  sftdp::test::TempDir dir;
  const auto lay = sftdp::model::gpt2_layout({1, 2, 8, 16, 11, 4});
  std::vector<float> p(lay.total, 0.5f), m(lay.total, 0.1f), v(lay.total, 0.2f);
  sftdp::checkpoint::TrainState st;
  st.step = 1, st.optimizer_updates = 1, st.config_yaml = "x: 1";
  const auto& wte = lay.find("wte");
  int n = 0;
  auto expect_refused = [&](std::vector<float> pp, std::vector<float> vv, const std::string& what) {
    const auto path = sftdp::checkpoint::save(dir.path() + "/case" + std::to_string(n++), lay, pp, m, vv, st);
    std::vector<float> a, b, c;
    sftdp::checkpoint::TrainState s2;
    try {
      sftdp::checkpoint::load(path, lay, a, b, c, s2);
      ADD_FAILURE() << what << ": loaded";
    } catch (const sftdp::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto bad = p;
  bad[wte.offset + 3] = std::nanf("");
  expect_refused(bad, v, "/params/wte");
  bad = p;
  bad[lay.find("ln_f.bias").offset] = INFINITY;
  expect_refused(bad, v, "/params/ln_f.bias");
  auto badv = v;
  badv[wte.offset] = -1e-9f;
  expect_refused(p, badv, "/opt/v/wte");
}
