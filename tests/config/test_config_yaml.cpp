// tests/config/test_config_yaml.cpp — Config::to_yaml() writes every key so that from_yaml_text()
// reads back the same config (checkpoints store it), and the example configs in configs/ parse:
// reference.yml documents every key with its true default, tiny.yml is the demo's settings.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "config/keys.h"
#include "sftdp/config.h"

namespace sftdp::config {
namespace {

using detail::all_keys;
using detail::format_value;

// Two configs that between them give every key a value other than its default (steps and
// num_epochs, and the two batch keys, exclude each other), including awkward strings and
// doubles that need all 17 digits.
std::vector<Config> configs_touching_every_key() {
  const std::vector<std::string> common = {
      "run_name='null'", "base_output_directory='out dir: #1'", "hardware=cpu", "seed=7",
      "collective_timeout_s=2.5",
      "gradient_accumulation_steps=3", "max_target_length=48",
      "train_files=[a.h5, 'b,c.h5', '[d].h5']", "eval_files=[e.h5]",
      "enable_data_shuffling=false", "data_shuffle_seed=11", "eval_interval=5", "eval_steps=2",
      "load_parameters_path=~/w.h5", "weight_dtype=bfloat16", "dtype=bfloat16", "remat=true",
      "learning_rate=0.30000000000000004", "lr_schedule=linear",
      "learning_rate_final_fraction=0", "adam_b1=0.8", "adam_b2=0.999",
      "adam_eps=1.2345678901234567e-09", "adam_weight_decay=0.01",
      "gradient_clipping_threshold=0.5", "checkpoint_period=10", "keep_checkpoints=4", "async_checkpointing=false",
      "resume=false", "hf_export=true", "hf_export_tokenizer='tok dir/'", "log_period=3",
      "param_check_period=7"};
  std::vector<std::string> a = common, b = common;
  // warmup_steps wins over warmup_steps_fraction: one in each config.
  for (const char* kv : {"steps=17", "global_batch_size=24", "warmup_steps_fraction=0.25", "model_name=gpt2-124m", "allreduce_overlap=true",
                         "context_parallelism=2", "num_decoder_layers=3", "vocab_size=1000"})
    a.push_back(kv);
  // allreduce_overlap excludes zero_stage 1: one in each config.
  for (const char* kv : {"num_epochs=2", "warmup_steps=3", "lr_schedule_convention=transformers",
                         "per_device_batch_size=5",
                         "model_name=''",
                         "zero_stage=1",
                         "num_decoder_layers=1",
                         "num_heads=2",
                         "emb_dim=16",
                         "mlp_dim=40",
                         "vocab_size=300",
                         "max_position_embeddings=96",
                         "decoder_block=qwen3",
                         "num_kv_heads=1",
                         "head_dim=8",
                         "rms_norm_eps=1e-6",
                         "rope_theta=500000",
                         "tie_word_embeddings=false",
                         "lora_rank=8",
                         "lora_alpha=16",
                         "lora_dropout=0.05",
                         "lora_target_modules=[q_proj, 'mlp.down_proj']",
                         "load_adapter_path='adapters/run 1'",
                         "cuda_graphs=false"})
    b.push_back(kv);
  return {from_yaml_text("", a), from_yaml_text("", b)};
}

TEST(ConfigYaml, TheFixtureChangesEveryKeyFromItsDefault) {
  const Config defaults;
  const auto configs = configs_touching_every_key();
  for (const auto& key : all_keys()) {
    bool changed = false;
    for (const auto& cfg : configs) changed |= format_value(cfg, key) != format_value(defaults, key);
    EXPECT_TRUE(changed) << key.name << " is not exercised by the round trip";
  }
}

TEST(ConfigYaml, RoundTripGivesTheSameValueForEveryKey) {
  for (const auto& cfg : configs_touching_every_key()) {
    const std::string yaml = cfg.to_yaml();
    const Config back = from_yaml_text(yaml, {}, "to_yaml()");
    for (const auto& key : all_keys())
      EXPECT_EQ(format_value(back, key), format_value(cfg, key)) << key.name << " in\n" << yaml;
    EXPECT_EQ(back.to_yaml(), yaml);
  }
}

TEST(ConfigYaml, RoundTripKeepsAwkwardValuesExactly) {
  const Config cfg = configs_touching_every_key()[0];
  const Config back = from_yaml_text(cfg.to_yaml(), {});
  EXPECT_EQ(back.run_name, "null") << "a string that looks like null stays a string";
  EXPECT_EQ(back.base_output_directory, "out dir: #1");
  EXPECT_EQ(back.train_files, (std::vector<std::string>{"a.h5", "b,c.h5", "[d].h5"}));
  EXPECT_EQ(back.load_parameters_path, "~/w.h5");
  EXPECT_EQ(back.learning_rate, 0.30000000000000004);  // bit-exact, not just close
  EXPECT_EQ(back.adam_eps, 1.2345678901234567e-09);
  EXPECT_EQ(back.steps, 17);
  EXPECT_EQ(back.num_epochs, -1);
  EXPECT_FALSE(back.resume);
}

TEST(ConfigYaml, WritesEveryKeyOnItsOwnLineAndUnsetAsNull) {
  const Config cfg = from_yaml_text("train_files: t.h5\nglobal_batch_size: 8\n"
                                    "max_target_length: 64\n", {});
  const std::string yaml = cfg.to_yaml();
  for (const auto& key : all_keys()) {
    const std::string line_start = std::string(1, '\n').append(key.name).append(": ");
    EXPECT_NE(yaml.find(line_start), std::string::npos) << key.name;
  }
  EXPECT_NE(yaml.find("\nsteps: null\n"), std::string::npos);
  EXPECT_NE(yaml.find("\ntrain_files: [t.h5]\n"), std::string::npos) << "lists are flow lists";
  EXPECT_NE(yaml.find("\nemb_dim: null  # resolved: 64\n"), std::string::npos)
      << "preset dimensions are shown as comments, so the YAML keeps following model_name";
}

// The comment lines directly above `key:` in a YAML file, joined.
std::string comment_above(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line, block;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return block;
    block = line.rfind("#", 0) == 0 ? block + line + "\n" : "";
  }
  return "";
}

TEST(ExampleConfigs, ReferenceParsesAndDocumentsEveryKeyWithItsDefault) {
  const std::string path = test::source_path("configs/reference.yml");
  const Config cfg = from_file(path, {});
  EXPECT_EQ(cfg.model_name, "gpt2-124m");
  const std::string text = test::read_file(path);
  const Config defaults;
  for (const auto& key : all_keys()) {
    const std::string doc = comment_above(text, key.name);
    EXPECT_FALSE(doc.empty()) << key.name << " has no comment line above it";
    const std::string default_text = "Default: " + format_value(defaults, key);
    EXPECT_NE(doc.find(default_text), std::string::npos)
        << key.name << ": expected \"" << default_text << "\" in:\n" << doc;
  }
}

TEST(ExampleConfigs, TinyIsTheDemoOnTheGeneratedData) {
  const Config cfg = from_file(test::source_path("configs/tiny.yml"), {});
  EXPECT_EQ(cfg.model_name, "gpt2-tiny");
  EXPECT_EQ(cfg.hardware, "cpu");
  EXPECT_EQ(cfg.train_files, std::vector<std::string>{"data/generated/train.h5"});
  EXPECT_EQ(cfg.eval_files, std::vector<std::string>{"data/generated/eval.h5"});
  EXPECT_EQ(cfg.max_target_length, 64);
  EXPECT_EQ(cfg.run_name, "tiny");
  const BatchPlan one_rank = resolve_batch(cfg, 1), two_ranks = resolve_batch(cfg, 2);
  EXPECT_EQ(one_rank.global_batch, two_ranks.global_batch) << "mpirun -np 2 trains the same steps";
  EXPECT_GT(cfg.steps, 0);
}

}  // namespace
}  // namespace sftdp::config
