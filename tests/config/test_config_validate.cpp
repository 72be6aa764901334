// tests/config/test_config_validate.cpp — impossible values are errors (SPEC §3: "unknown keys,
// wrong types and impossible values are errors, not warnings"). Each case sets one bad value on
// an otherwise valid config and expects UserError with the exact "<key>: <reason>" text; the
// boundary values that are legal are checked to load.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

#include "config/keys.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {
namespace {

const std::string kMinimal = "train_files: train.h5\nglobal_batch_size: 8\nmax_target_length: 64\n";

struct BadValue {
  const char* name;                    // test name suffix
  std::vector<std::string> overrides;  // applied on kMinimal
  std::string message;                 // the whole UserError text
};

void PrintTo(const BadValue& c, std::ostream* os) { *os << c.name; }

class ConfigRejects : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigRejects, WithAMessageThatNamesTheKey) {
  const BadValue& c = GetParam();
  try {
    from_yaml_text(kMinimal, c.overrides);
    FAIL() << "expected UserError: " << c.message;
  } catch (const UserError& e) {
    const std::string key = c.message.substr(0, c.message.find(':') + 1);
    EXPECT_EQ(std::string(e.what()).rfind(key, 0), 0u) << e.what();
    EXPECT_EQ(e.what(), c.message);
  }
}

const std::string kPresets =
    "gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, llama-tiny, smollm2-135m, smollm2-360m, qwen2.5-0.5b, "
    "qwen3-0.6b, llama-3.2-1b, qwen3-1.7b, qwen3-4b, llama-3.1-8b, qwen3-8b";

INSTANTIATE_TEST_SUITE_P(
    ImpossibleValues, ConfigRejects,
    ::testing::Values(
        // Run
        BadValue{"EmptyRunName", {"run_name=''"}, "run_name: must not be empty"},
        BadValue{"RunNameWithSlash", {"run_name=a/b"},
                 "run_name: must be a plain directory name, got 'a/b'"},
        BadValue{"EmptyOutputDir", {"base_output_directory=''"},
                 "base_output_directory: must not be empty"},
        BadValue{"ZeroSteps", {"steps=0"}, "steps: must be >= 1, got 0"},
        BadValue{"NegativeEpochs", {"num_epochs=-2"}, "num_epochs: must be >= 1, got -2"},
        BadValue{"StepsAndEpochs", {"steps=10", "num_epochs=1"},
                 "steps: give steps or num_epochs, not both (set the other to null)"},
        BadValue{"UnknownHardware", {"hardware=tpu"}, "hardware: expected cpu, gpu or auto, got 'tpu'"},
        BadValue{"NegativeCollectiveTimeout", {"collective_timeout_s=-1"},
                 "collective_timeout_s: must be >= 0 (seconds; 0 = no deadline), got -1.0"},
        BadValue{"CollectiveTimeoutNotANumber", {"collective_timeout_s=10m"},
                 "collective_timeout_s: expected a number, got '10m'"},
        BadValue{"CollectiveTimeoutInfinite", {"collective_timeout_s=inf"},
                 "collective_timeout_s: expected a number, got 'inf'"},
        BadValue{"NegativeSeed", {"seed=-1"}, "seed: must be >= 0, got -1"},
        // Batch
        BadValue{"BothBatchSizes", {"per_device_batch_size=2"},
                 "global_batch_size: give global_batch_size or per_device_batch_size, not both"},
        BadValue{"NoBatchSize", {"global_batch_size=null"},
                 "global_batch_size: not set (give global_batch_size or per_device_batch_size)"},
        BadValue{"ZeroGlobalBatch", {"global_batch_size=0"}, "global_batch_size: must be >= 1, got 0"},
        BadValue{"ZeroPerDeviceBatch", {"global_batch_size=null", "per_device_batch_size=0"},
                 "per_device_batch_size: must be >= 1, got 0"},
        BadValue{"ZeroAccumulation", {"gradient_accumulation_steps=0"},
                 "gradient_accumulation_steps: must be >= 1, got 0"},
        BadValue{"ZeroTargetLength", {"max_target_length=0"}, "max_target_length: must be >= 1, got 0"},
        BadValue{"TargetLengthBeyondPositions", {"model_name=gpt2-124m", "max_target_length=2048"},
                 "max_target_length: 2048 exceeds the model's position table "
                 "(max_position_embeddings=1024)"},
        // Data
        BadValue{"EmptyTrainFiles", {"train_files=[]"},
                 "train_files: not set (give a data file, e.g. train_files=data/train.h5, or a list)"},
        BadValue{"NullTrainFiles", {"train_files=null"},
                 "train_files: not set (give a data file, e.g. train_files=data/train.h5, or a list)"},
        BadValue{"EmptyTrainPath", {"train_files=[a.h5, '']"}, "train_files: contains an empty path"},
        BadValue{"EmptyEvalPath", {"eval_files=''"}, "eval_files: contains an empty path"},
        BadValue{"NegativeShuffleSeed", {"data_shuffle_seed=-3"}, "data_shuffle_seed: must be >= 0, got -3"},
        BadValue{"NegativeEvalInterval", {"eval_interval=-1"}, "eval_interval: must be >= 0, got -1"},
        BadValue{"ZeroEvalSteps", {"eval_steps=0"}, "eval_steps: must be >= 1, got 0"},
        // Model
        BadValue{"UnknownPreset", {"model_name=gpt3"},
                 "model_name: unknown preset 'gpt3' (known: " + kPresets + ")"},
        BadValue{"HeadsNotDividingChannels", {"num_heads=3"}, "num_heads: 3 does not divide emb_dim (64)"},
        BadValue{"ZeroEmbDim", {"emb_dim=0"}, "emb_dim: must be >= 1, got 0"},
        BadValue{"NegativeVocab", {"vocab_size=-7"}, "vocab_size: must be >= 1, got -7"},
        BadValue{"NoPresetNoDims", {"model_name=''"},
                 "num_decoder_layers: required when model_name is empty (or pick a preset: " +
                     kPresets + ")"},
        BadValue{"UnknownDecoderBlock", {"decoder_block=mistral"},
                 "decoder_block: expected gpt2, llama, qwen2 or qwen3, got 'mistral'"},
        BadValue{"KvHeadsNotDividingHeads", {"model_name=llama-tiny", "num_kv_heads=3"},
                 "num_kv_heads: 3 does not divide num_heads (4)"},
        BadValue{"OddHeadDimForRope", {"model_name=llama-tiny", "head_dim=15"},
                 "head_dim: RoPE needs an even head size, got 15"},
        BadValue{"Gpt2WithKvHeads", {"num_kv_heads=2"},
                 "num_kv_heads: GPT-2 blocks have one k/v head per query head (leave it out or set "
                 "decoder_block: llama)"},
        BadValue{"Gpt2Untied", {"tie_word_embeddings=false"},
                 "tie_word_embeddings: GPT-2 blocks always tie the LM head to wte"},
        BadValue{"TieNotABool", {"model_name=llama-tiny", "tie_word_embeddings=yes"},
                 "tie_word_embeddings: expected true or false, got 'yes'"},
        BadValue{"ZeroRmsNormEps", {"model_name=llama-tiny", "rms_norm_eps=0"},
                 "rms_norm_eps: must be > 0 (or null for the preset's value), got 0.0"},
        BadValue{"NegativeRopeTheta", {"model_name=llama-tiny", "rope_theta=-10000"},
                 "rope_theta: must be > 0 (or null for the preset's value), got -10000.0"},
        BadValue{"UnknownWeightDtype", {"weight_dtype=fp16"},
                 "weight_dtype: expected float32 or bfloat16, got 'fp16'"},
        BadValue{"UnknownDtype", {"dtype=float16"}, "dtype: expected float32 or bfloat16, got 'float16'"},
        // Optimiser
        BadValue{"NegativeLearningRate", {"learning_rate=-0.001"},
                 "learning_rate: must be >= 0, got -0.001"},
        BadValue{"WarmupAboveOne", {"warmup_steps_fraction=1.5"},
                 "warmup_steps_fraction: must be in [0, 1], got 1.5"},
        BadValue{"NegativeFinalFraction", {"learning_rate_final_fraction=-0.1"},
                 "learning_rate_final_fraction: must be in [0, 1], got -0.1"},
        BadValue{"Beta1One", {"adam_b1=1"}, "adam_b1: must be in [0, 1), got 1.0"},
        BadValue{"Beta2Negative", {"adam_b2=-0.5"}, "adam_b2: must be in [0, 1), got -0.5"},
        BadValue{"ZeroEps", {"adam_eps=0"}, "adam_eps: must be > 0, got 0.0"},
        BadValue{"NegativeWeightDecay", {"adam_weight_decay=-1"},
                 "adam_weight_decay: must be >= 0, got -1.0"},
        BadValue{"NegativeClipping", {"gradient_clipping_threshold=-2"},
                 "gradient_clipping_threshold: must be >= 0 (0 = off), got -2.0"},
        BadValue{"ZeroStageFour", {"zero_stage=4"}, "zero_stage: must be 0, 1, 2 or 3, got 4"},
        BadValue{"ZeroStageNegative", {"zero_stage=-1"}, "zero_stage: must be 0, 1, 2 or 3, got -1"},
        BadValue{"OverlapWithZero1", {"allreduce_overlap=true", "zero_stage=1"},
                 "allreduce_overlap: overlaps the zero_stage 0 allreduce only; it cannot be combined "
                 "with zero_stage: 1 (stages 2 and 3 always overlap their reduce-scatters with backward; "
                 "set one of them to its default)"},
        BadValue{"OverlapWithZero3", {"allreduce_overlap=true", "zero_stage=3"},
                 "allreduce_overlap: overlaps the zero_stage 0 allreduce only; it cannot be combined "
                 "with zero_stage: 3 (stages 2 and 3 always overlap their reduce-scatters with backward; "
                 "set one of them to its default)"},
        // Checkpoints and logging
        BadValue{"NegativeCheckpointPeriod", {"checkpoint_period=-5"},
                 "checkpoint_period: must be >= 0, got -5"},
        BadValue{"NegativeKeep", {"keep_checkpoints=-1"}, "keep_checkpoints: must be >= 0, got -1"},
        BadValue{"ZeroLogPeriod", {"log_period=0"}, "log_period: must be >= 1, got 0"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ConfigAccepts, TheBoundaryValues) {
  const Config cfg = from_yaml_text(
      kMinimal, {"learning_rate=0", "adam_b1=0", "adam_b2=0.999999", "warmup_steps_fraction=1",
                 "learning_rate_final_fraction=0", "gradient_clipping_threshold=0",
                 "adam_weight_decay=0", "eval_interval=0", "keep_checkpoints=0",
                 "checkpoint_period=0", "max_target_length=256", "num_epochs=1", "log_period=1",
                 "hardware=gpu", "dtype=bfloat16", "weight_dtype=bfloat16",
                 "collective_timeout_s=0"});
  EXPECT_EQ(cfg.max_target_length, 256) << "gpt2-tiny's position table holds 256 rows";
  EXPECT_EQ(cfg.num_epochs, 1);
  EXPECT_EQ(cfg.dtype, "bfloat16") << "bf16 on a CPU is refused by the trainer, not here";
  EXPECT_EQ(cfg.collective_timeout_s, 0.0) << "0 turns the collective deadline off";
}

TEST(ConfigAccepts, CollectiveTimeoutInSecondsWithDefault600) {
  EXPECT_EQ(from_yaml_text(kMinimal, {}).collective_timeout_s, 600.0);
  EXPECT_EQ(from_yaml_text(kMinimal + "collective_timeout_s: 2.5\n", {}).collective_timeout_s, 2.5);
  EXPECT_EQ(from_yaml_text(kMinimal, {"collective_timeout_s=30"}).collective_timeout_s, 30.0);
}

// -1 is how the Config struct stores "unset", but a user who writes -1 made a mistake: only
// null (or leaving the key out) unsets. Every key that may be unset is checked, in a file and
// as an override, and the key is named even when the rest of the config would be valid.
const std::vector<std::string> kUnsettableKeys = {
    "steps", "num_epochs", "global_batch_size", "per_device_batch_size", "eval_steps",
    "num_decoder_layers", "num_heads", "emb_dim", "mlp_dim", "vocab_size",
    "max_position_embeddings", "num_kv_heads", "head_dim"};
// The number keys that may be unset (stored as -1): an explicit value must be > 0.
const std::vector<std::string> kUnsettableNumbers = {"rms_norm_eps", "rope_theta"};

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides) {
  try {
    from_yaml_text(yaml, overrides);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ConfigRejectsExplicitMinusOne, AsAnOverrideForEveryUnsettableKey) {
  for (const auto& key : kUnsettableKeys)
    EXPECT_EQ(error_of(kMinimal, {key + "=-1"}), key + ": must be >= 1, got -1");
}

TEST(ConfigRejectsExplicitMinusOne, InTheFileForEveryUnsettableKey) {
  for (const auto& key : kUnsettableKeys) {
    const std::string yaml = key == "global_batch_size"
                                 ? "train_files: train.h5\nmax_target_length: 64\n"
                                 : kMinimal;
    EXPECT_EQ(error_of(yaml + key + ": -1\n", {}), key + ": must be >= 1, got -1");
  }
}

TEST(ConfigRejectsExplicitMinusOne, ZeroAndOtherNegativesToo) {
  for (const auto& key : kUnsettableKeys) {
    // per_device_batch_size beside kMinimal's global_batch_size is a second error line (both given).
    const std::string yaml = key == "per_device_batch_size" ? "train_files: train.h5\nmax_target_length: 64\n"
                                                            : kMinimal;
    EXPECT_EQ(error_of(yaml, {key + "=0"}), key + ": must be >= 1, got 0");
    EXPECT_EQ(error_of(yaml, {key + "=-5"}), key + ": must be >= 1, got -5");
  }
}

TEST(ConfigRejectsExplicitMinusOne, ForEveryUnsettableNumberKey) {
  for (const auto& key : kUnsettableNumbers) {
    EXPECT_EQ(error_of(kMinimal, {key + "=-1"}), key + ": must be > 0 (or null for the preset's value), got -1.0");
    EXPECT_EQ(error_of(kMinimal + key + ": -1\n", {}),
              key + ": must be > 0 (or null for the preset's value), got -1.0");
    EXPECT_EQ(error_of(kMinimal, {key + "=null"}), "(accepted)");
  }
}

TEST(ConfigRejectsExplicitMinusOne, TheTableMarksExactlyTheseKeysUnsettable) {
  std::vector<std::string> unsettable;
  for (const auto& key : detail::all_keys())
    if (key.unset_allowed) unsettable.push_back(key.name);
  auto expected = kUnsettableKeys;
  expected.insert(expected.end(), kUnsettableNumbers.begin(), kUnsettableNumbers.end());
  expected.push_back("warmup_steps");  // null = warmup_steps_fraction's; 0 (no warmup) allowed (ConfigMeanings)
  std::sort(unsettable.begin(), unsettable.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(unsettable, expected);
}

TEST(ConfigAccepts, NullAsUnsetInTheFileAndAsAnOverride) {
  const Config cfg =
      from_yaml_text(kMinimal + "steps: null\nemb_dim: ~\neval_steps:\n", {"num_epochs=null"});
  EXPECT_EQ(cfg.steps, -1);
  EXPECT_EQ(cfg.num_epochs, -1);
  EXPECT_EQ(cfg.emb_dim, -1);
  EXPECT_EQ(cfg.eval_steps, -1);
}

TEST(ConfigAccepts, AnOverrideReplacesAnExplicitMinusOneInTheFile) {
  // Validation sees only the final values: null or a valid number replaces the file's -1.
  EXPECT_EQ(from_yaml_text(kMinimal + "steps: -1\n", {"steps=null"}).steps, -1);
  EXPECT_EQ(from_yaml_text(kMinimal + "steps: -1\n", {"steps=4"}).steps, 4);
  EXPECT_EQ(error_of(kMinimal + "steps: 4\n", {"steps=-1"}), "steps: must be >= 1, got -1");
}

TEST(ConfigAccepts, PerDeviceBatchInsteadOfGlobal) {
  const Config cfg = from_yaml_text(kMinimal, {"global_batch_size=null", "per_device_batch_size=4"});
  EXPECT_EQ(cfg.global_batch_size, -1);
  EXPECT_EQ(cfg.per_device_batch_size, 4);
}

}  // namespace
}  // namespace sftdp::config
