// tests/config/test_model_dims.cpp — model presets and explicit dimensions (SPEC §3 "model_name
// (a preset such as gpt2-tiny, gpt2-124m) or explicit num_decoder_layers, ..."). An explicit key
// overrides only itself; without a preset every dimension is explicit. A Hugging Face directory in
// load_parameters_path gives the model: the log says so, and model_name must still be a preset.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
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
            (std::vector<std::string>{"gpt2-tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "llama-tiny",
                                      "smollm2-135m", "smollm2-360m", "qwen2.5-0.5b", "qwen3-0.6b",
                                      "llama-3.2-1b", "qwen3-1.7b", "qwen3-4b", "llama-3.1-8b", "qwen3-8b"}));
}

// The Llama-family presets are the Hugging Face models' config.json values.
TEST(ModelPresets, LlamaFamilyMatchesTheReleasedModels) {
  const ModelDims smol = dims_of({"model_name=smollm2-135m"});
  expect_dims(smol, 30, 9, 576, 1536, 49152, 8192);
  EXPECT_EQ(smol.block, Block::kLlama);
  EXPECT_EQ(block_name(smol), "llama");
  EXPECT_EQ(smol.kv_heads(), 3);
  EXPECT_EQ(smol.head_size(), 64);
  EXPECT_EQ(smol.rope_theta, 100000);
  EXPECT_TRUE(smol.tied);
  EXPECT_FALSE(smol.rope_scaling.llama3);

  const ModelDims qwen2 = dims_of({"model_name=qwen2.5-0.5b"});
  expect_dims(qwen2, 24, 14, 896, 4864, 151936, 32768);
  EXPECT_EQ(block_name(qwen2), "qwen2");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_EQ(qwen2.kv_heads(), 2);
  EXPECT_EQ(qwen2.norm_eps, 1e-6);

  const ModelDims qwen3 = dims_of({"model_name=qwen3-0.6b"});
  expect_dims(qwen3, 28, 16, 1024, 3072, 151936, 40960);
  EXPECT_EQ(block_name(qwen3), "qwen3");
  EXPECT_EQ(qwen3.head_size(), 128);  // not C / NH = 64
  EXPECT_EQ(qwen3.qkv_dim(), (16 + 2 * 8) * 128);
  EXPECT_EQ(qwen3.attn_dim(), 2048);

  const ModelDims llama = dims_of({"model_name=llama-3.2-1b"});
  expect_dims(llama, 16, 32, 2048, 8192, 128256, 131072);
  EXPECT_EQ(llama.kv_heads(), 8);
  EXPECT_EQ(llama.rope_theta, 500000);
  EXPECT_TRUE(llama.rope_scaling.llama3);
  EXPECT_EQ(llama.rope_scaling.factor, 32);
  EXPECT_EQ(llama.rope_scaling.original_max_positions, 8192);
}

// The 2-8B presets users fine-tune most (tests/integration/test_plan.py counts their parameters
// against transformers models of the same config.json values).
TEST(ModelPresets, TheEightBClassMatchesTheReleasedModels) {
  const ModelDims q4 = dims_of({"model_name=qwen3-4b"});
  expect_dims(q4, 36, 32, 2560, 9728, 151936, 40960);
  EXPECT_EQ(block_name(q4), "qwen3");
  EXPECT_EQ(q4.kv_heads(), 8);
  EXPECT_EQ(q4.head_size(), 128);  // not C / NH = 80
  EXPECT_TRUE(q4.tied);
  EXPECT_EQ(q4.rope_theta, 1000000);
  EXPECT_EQ(q4.norm_eps, 1e-6);

  const ModelDims q17 = dims_of({"model_name=qwen3-1.7b"});
  expect_dims(q17, 28, 16, 2048, 6144, 151936, 40960);
  EXPECT_TRUE(q17.tied);

  const ModelDims q8 = dims_of({"model_name=qwen3-8b"});
  expect_dims(q8, 36, 32, 4096, 12288, 151936, 40960);
  EXPECT_EQ(block_name(q8), "qwen3");
  EXPECT_FALSE(q8.tied);  // lm_head.weight of its own

  const ModelDims l8 = dims_of({"model_name=llama-3.1-8b"});
  expect_dims(l8, 32, 32, 4096, 14336, 128256, 131072);
  EXPECT_EQ(block_name(l8), "llama");
  EXPECT_EQ(l8.kv_heads(), 8);
  EXPECT_EQ(l8.head_size(), 128);
  EXPECT_FALSE(l8.tied);
  EXPECT_EQ(l8.rope_theta, 500000);
  EXPECT_EQ(l8.norm_eps, 1e-5);
  EXPECT_TRUE(l8.rope_scaling.llama3);
  EXPECT_EQ(l8.rope_scaling.factor, 8);
  EXPECT_EQ(l8.rope_scaling.low_freq_factor, 1);
  EXPECT_EQ(l8.rope_scaling.high_freq_factor, 4);
  EXPECT_EQ(l8.rope_scaling.original_max_positions, 8192);
}

TEST(ModelExplicitDims, LlamaKeysOverrideOnlyThemselves) {
  const ModelDims d = dims_of({"model_name=llama-tiny", "num_kv_heads=1", "head_dim=8",
                               "rms_norm_eps=1e-6", "rope_theta=500000", "tie_word_embeddings=false",
                               "decoder_block=qwen3"});
  expect_dims(d, 2, 4, 64, 176, 264, 256);
  EXPECT_EQ(block_name(d), "qwen3");
  EXPECT_EQ(d.kv_heads(), 1);
  EXPECT_EQ(d.head_size(), 8);
  EXPECT_EQ(d.norm_eps, 1e-6);
  EXPECT_EQ(d.rope_theta, 500000);
  EXPECT_FALSE(d.tied);
  // decoder_block on a GPT-2 preset switches the family and keeps the dimensions.
  const ModelDims g = dims_of({"decoder_block=qwen2"});
  expect_dims(g, 2, 4, 64, 256, 264, 256);
  EXPECT_EQ(block_name(g), "qwen2");
  EXPECT_EQ(g.kv_heads(), 4);
  EXPECT_EQ(g.head_size(), 16);
  // Without a preset: gpt2, unless decoder_block says otherwise.
  EXPECT_EQ(dims_of({"model_name=''", "num_decoder_layers=1", "num_heads=2", "emb_dim=32", "vocab_size=300"}).block,
            Block::kGpt2);
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


// A Hugging Face GPT-2 directory of gpt2-tiny's shape (only config.json: dimensions need no tensors).
std::string tiny_hf_dir(const test::TempDir& tmp) {
  std::ofstream(tmp / "config.json") << R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64,
                                          "n_inner": 256, "vocab_size": 264, "n_positions": 256})";
  return tmp.path();
}

TEST(ModelFromHfDir, AModelNameThatIsNoPresetIsAnErrorEvenThen) {
  test::TempDir tmp;
  const std::string dir = tiny_hf_dir(tmp);
  const std::string known = "gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, llama-tiny, smollm2-135m, smollm2-360m, "
                            "qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b, qwen3-1.7b, qwen3-4b, llama-3.1-8b, qwen3-8b";
  EXPECT_EQ(test::user_error_of([&] { dims_of({"model_name=Qwen/Qwen2.5-0.5B", "load_parameters_path=" + dir}); }),
            "model_name: unknown preset 'Qwen/Qwen2.5-0.5B' (known: " + known + "); load_parameters_path " + dir +
                " gives the model (its config.json): leave model_name out or set it to \"\"");
  EXPECT_EQ(test::user_error_of([&] { dims_of({"model_name=Qwen/Qwen2.5-0.5B"}); }),
            "model_name: unknown preset 'Qwen/Qwen2.5-0.5B' (known: " + known + "); a Hugging Face model id is not "
            "downloaded: download the model and set load_parameters_path to its directory");
}

TEST(ModelFromHfDir, TheLogSaysTheDirectorysConfigWinsAndWhatBecameOfModelName) {
  test::TempDir tmp;
  const std::string dir = tiny_hf_dir(tmp);
  const std::string head = "model: gpt2 from " + dir + "/config.json (2 layers, emb_dim 64, vocab_size 264): the "
                           "directory's config wins";
  auto note = [&](const std::string& model_name) {
    return hf_model_note(from_yaml_text(kData, {"model_name=" + model_name, "load_parameters_path=" + dir}));
  };
  EXPECT_EQ(note("gpt2-tiny"), head + "; model_name gpt2-tiny is that shape");
  EXPECT_EQ(note(""), head);
  EXPECT_EQ(note("qwen2.5-0.5b"),
            head + "; model_name qwen2.5-0.5b is not used (its preset differs: decoder_block gpt2 vs qwen2, "
                   "num_decoder_layers 2 vs 24, num_heads 4 vs 14, num_kv_heads 4 vs 2, head_dim 16 vs 64, emb_dim 64 "
                   "vs 896, mlp_dim 256 vs 4864, vocab_size 264 vs 151936, max_position_embeddings 256 vs 32768)");
  // A preset of another shape is a note, not an error: the default model_name is a preset too.
  expect_dims(model_dims(from_yaml_text(kData, {"model_name=qwen3-0.6b", "load_parameters_path=" + dir})), 2, 4, 64,
              256, 264, 256);
  EXPECT_EQ(hf_model_note(from_yaml_text(kData, {})), "") << "no directory: the preset gives the model";
}

}  // namespace
}  // namespace sftdp::config
