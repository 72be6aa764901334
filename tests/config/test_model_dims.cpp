// tests/config/test_model_dims.cpp — model presets and explicit dimensions (SPEC §3 "model_name
// (a preset such as gpt2-tiny, gpt2-124m) or explicit num_decoder_layers, ..."). An explicit key
// overrides only itself; without a preset every dimension is explicit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {
namespace {

const std::string kData = "train_files: train.h5\nglobal_batch_size: 8\nmax_target_length: 64\n";

ModelDims dims_of(const std::vector<std::string>& overrides) {
  return model_dims(from_yaml_text(kData, overrides));
}

void expect_dims(const ModelDims& d, int L, int NH, int C, int F, int V, int maxT) {
  EXPECT_EQ(d.L, L);
  EXPECT_EQ(d.NH, NH);
  EXPECT_EQ(d.C, C);
  EXPECT_EQ(d.F, F);
  EXPECT_EQ(d.V, V);
  EXPECT_EQ(d.maxT, maxT);
}

TEST(ModelPresets, NamesAreListedInSizeOrder) {
  EXPECT_EQ(preset_names(),
            (std::vector<std::string>{"gpt2-tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m"}));
}

TEST(ModelPresets, TinyIsTwoLayersOverTheByteTokenizer) {
  // V = 256 byte ids + 8 special ids.
  expect_dims(dims_of({}), 2, 4, 64, 256, 264, 256);
  expect_dims(model_dims(Config{}), 2, 4, 64, 256, 264, 256);
}

TEST(ModelPresets, Gpt2FamilyMatchesTheReleasedModels) {
  expect_dims(dims_of({"model_name=gpt2-124m"}), 12, 12, 768, 3072, 50257, 1024);
  expect_dims(dims_of({"model_name=gpt2-350m"}), 24, 16, 1024, 4096, 50257, 1024);
  expect_dims(dims_of({"model_name=gpt2-774m"}), 36, 20, 1280, 5120, 50257, 1024);
}

TEST(ModelPresets, EveryPresetLoadsAndHasWholeHeads) {
  for (const auto& name : preset_names()) {
    const ModelDims d = dims_of({"model_name=" + name});
    EXPECT_EQ(d.C % d.NH, 0) << name;
    EXPECT_GE(d.maxT, 64) << name;
  }
}

TEST(ModelExplicitDims, EachKeyOverridesOnlyItself) {
  expect_dims(dims_of({"num_decoder_layers=3"}), 3, 4, 64, 256, 264, 256);
  expect_dims(dims_of({"num_heads=8"}), 2, 8, 64, 256, 264, 256);
  expect_dims(dims_of({"emb_dim=128"}), 2, 4, 128, 256, 264, 256);  // mlp_dim stays the preset's
  expect_dims(dims_of({"mlp_dim=100"}), 2, 4, 64, 100, 264, 256);
  expect_dims(dims_of({"vocab_size=256"}), 2, 4, 64, 256, 256, 256);
  expect_dims(dims_of({"max_position_embeddings=128"}), 2, 4, 64, 256, 264, 128);
  expect_dims(dims_of({"model_name=gpt2-124m", "num_decoder_layers=2"}), 2, 12, 768, 3072, 50257,
              1024);
}

TEST(ModelExplicitDims, WithoutAPresetMlpIsFourTimesEmbAndPositionsFollowTheTargetLength) {
  expect_dims(dims_of({"model_name=''", "num_decoder_layers=1", "num_heads=2", "emb_dim=32",
                       "vocab_size=300"}),
              1, 2, 32, 128, 300, 64);
  expect_dims(dims_of({"model_name=null", "num_decoder_layers=1", "num_heads=2", "emb_dim=32",
                       "vocab_size=300", "mlp_dim=40", "max_position_embeddings=80"}),
              1, 2, 32, 40, 300, 80);
}

TEST(ModelExplicitDims, ShrinkingThePositionTableBelowTheTargetLengthIsAnError) {
  try {
    dims_of({"max_position_embeddings=32"});
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "max_target_length: 64 exceeds the model's position table "
                 "(max_position_embeddings=32)");
  }
}

TEST(ModelExplicitDims, MissingDimensionWithoutAPresetNamesTheKey) {
  try {
    dims_of({"model_name=''", "num_decoder_layers=1", "num_heads=2", "vocab_size=300"});
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("emb_dim: required when model_name is empty", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace sftdp::config
