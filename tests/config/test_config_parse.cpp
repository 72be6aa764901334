// tests/config/test_config_parse.cpp — reading a config (SPEC §2, §3): a flat YAML map of known
// keys, each given once and with the right type, then key=value overrides applied in order.
// Every mistake is a UserError whose message starts with the key (or file) at fault.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

using sftdp::test::user_error_of;

namespace sftdp::config {
namespace {

// The smallest valid config: everything else has a usable default.
const std::string kMinimal = "train_files: train.h5\nglobal_batch_size: 8\nmax_target_length: 64\n";

std::string yaml_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return user_error_of([&] { from_yaml_text(yaml, overrides); });
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(ConfigParse, MinimalConfigKeepsTheHeaderDefaults) {
  const Config cfg = from_yaml_text(kMinimal, {});
  const Config defaults;
  EXPECT_EQ(cfg.train_files, std::vector<std::string>{"train.h5"});
  EXPECT_EQ(cfg.global_batch_size, 8);
  EXPECT_EQ(cfg.per_device_batch_size, -1);
  EXPECT_EQ(cfg.run_name, defaults.run_name);
  EXPECT_EQ(cfg.model_name, "gpt2-tiny");
  EXPECT_EQ(cfg.steps, -1);
  EXPECT_EQ(cfg.num_epochs, -1);
  EXPECT_DOUBLE_EQ(cfg.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(cfg.adam_b2, 0.95);
  EXPECT_TRUE(cfg.enable_data_shuffling);
  EXPECT_TRUE(cfg.resume);
}

TEST(ConfigParse, ReadsEveryScalarType) {
  const Config cfg = from_yaml_text(kMinimal +
                                        "steps: 10\nlearning_rate: 3e-3\nadam_eps: 1.0e-6\n"
                                        "enable_data_shuffling: false\nrun_name: demo\n"
                                        "eval_files: [a.h5, b.h5]\nhardware: cpu\n",
                                    {});
  EXPECT_EQ(cfg.steps, 10);
  EXPECT_DOUBLE_EQ(cfg.learning_rate, 3e-3);
  EXPECT_DOUBLE_EQ(cfg.adam_eps, 1e-6);
  EXPECT_FALSE(cfg.enable_data_shuffling);
  EXPECT_EQ(cfg.run_name, "demo");
  EXPECT_EQ(cfg.eval_files, (std::vector<std::string>{"a.h5", "b.h5"}));
  EXPECT_EQ(cfg.hardware, "cpu");
}

TEST(ConfigParse, FileListsMayBeOnePathOrABlockList) {
  const Config one = from_yaml_text(kMinimal, {});
  EXPECT_EQ(one.train_files.size(), 1u);
  const Config block = from_yaml_text(
      "train_files:\n  - x.h5\n  - y.h5\nglobal_batch_size: 8\nmax_target_length: 64\n", {});
  EXPECT_EQ(block.train_files, (std::vector<std::string>{"x.h5", "y.h5"}));
}

TEST(ConfigParse, NullMeansUnset) {
  const Config cfg = from_yaml_text(kMinimal + "steps: null\neval_steps: ~\neval_files:\n", {});
  EXPECT_EQ(cfg.steps, -1);
  EXPECT_EQ(cfg.eval_steps, -1);
  EXPECT_TRUE(cfg.eval_files.empty());
}

TEST(ConfigParse, EmptyFileIsAllDefaultsAndOverridesCanCompleteIt) {
  const Config cfg =
      from_yaml_text("", {"train_files=t.h5", "global_batch_size=4", "max_target_length=32"});
  EXPECT_EQ(cfg.global_batch_size, 4);
  EXPECT_EQ(cfg.train_files, std::vector<std::string>{"t.h5"});
}

TEST(ConfigParse, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(yaml_error(kMinimal + "learning_rat: 0.1\n"),
            "learning_rat: unknown key (did you mean learning_rate?)");
  EXPECT_EQ(yaml_error(kMinimal + "num_epoch: 2\n"),
            "num_epoch: unknown key (did you mean num_epochs?)");
  EXPECT_EQ(yaml_error(kMinimal, {"gradient_accumulation=2"}),
            "gradient_accumulation: unknown key (did you mean gradient_accumulation_steps?)");
}

TEST(ConfigParse, WrongTypesNameTheKeyAndTheValue) {
  EXPECT_EQ(yaml_error(kMinimal + "steps: abc\n"), "steps: expected an integer, got 'abc'");
  EXPECT_EQ(yaml_error(kMinimal + "steps: 1.5\n"), "steps: expected an integer, got '1.5'");
  EXPECT_EQ(yaml_error(kMinimal + "learning_rate: fast\n"),
            "learning_rate: expected a number, got 'fast'");
  EXPECT_EQ(yaml_error(kMinimal + "adam_eps: nan\n"), "adam_eps: expected a number, got 'nan'");
  EXPECT_EQ(yaml_error(kMinimal + "seed: 99999999999999999999\n"),
            "seed: expected an integer, got '99999999999999999999'");
}

TEST(ConfigParse, BooleansAreTrueOrFalseOnly) {
  EXPECT_EQ(yaml_error(kMinimal + "resume: yes\n"), "resume: expected true or false, got 'yes'");
  EXPECT_EQ(yaml_error(kMinimal, {"enable_data_shuffling=1"}),
            "enable_data_shuffling: expected true or false, got '1'");
  EXPECT_FALSE(from_yaml_text(kMinimal + "resume: False\n", {}).resume);
}

TEST(ConfigParse, NestedValuesWhereScalarsBelongAreErrors) {
  EXPECT_EQ(yaml_error(kMinimal + "steps: {a: 1}\n"), "steps: expected an integer, got a map");
  EXPECT_EQ(yaml_error(kMinimal + "run_name: [a, b]\n"), "run_name: expected a string, got a list");
  EXPECT_EQ(yaml_error(kMinimal + "resume:\n  deep: true\n"),
            "resume: expected true or false, got a map");
  EXPECT_EQ(yaml_error(kMinimal + "eval_files: [a.h5, [b.h5]]\n"),
            "eval_files: expected a list of paths, but one item is a list");
  EXPECT_EQ(yaml_error(kMinimal + "eval_files: {a: b}\n"),
            "eval_files: expected a path or a list of paths, got a map");
  EXPECT_EQ(yaml_error(kMinimal + "seed:\n"), "seed: expected an integer, got nothing")
      << "only keys that may be unset accept an empty value";
}

TEST(ConfigParse, TheSameKeyTwiceIsAnError) {
  EXPECT_EQ(yaml_error("steps: 3\n" + kMinimal + "steps: 4\n"),
            "steps: given twice in <config> (lines 1 and 5)");
}

TEST(ConfigParse, TheDocumentMustBeAMap) {
  EXPECT_EQ(yaml_error("- a\n- b\n"), "<config>: expected a YAML map of `key: value` lines, got a list");
  EXPECT_EQ(yaml_error("just text\n"),
            "<config>: expected a YAML map of `key: value` lines, got a single value");
  EXPECT_TRUE(starts_with(yaml_error("steps: [1, 2\n"), "<config>:")) << "invalid YAML names the source";
}

TEST(ConfigOverrides, LaterOverridesWinOverTheFileAndEachOther) {
  const Config cfg = from_yaml_text(kMinimal + "steps: 5\nlearning_rate: 0.1\n",
                                    {"steps=10", "learning_rate=0.2", "steps=20"});
  EXPECT_EQ(cfg.steps, 20);
  EXPECT_DOUBLE_EQ(cfg.learning_rate, 0.2);
}

TEST(ConfigOverrides, ValuesAreYamlScalarsOrFlowLists) {
  const Config cfg = from_yaml_text(
      kMinimal, {"train_files=[a.h5,b.h5]", "eval_files=e.h5", "enable_data_shuffling=false",
                 "run_name=my run", "adam_eps=1e-6"});
  EXPECT_EQ(cfg.train_files, (std::vector<std::string>{"a.h5", "b.h5"}));
  EXPECT_EQ(cfg.eval_files, std::vector<std::string>{"e.h5"});
  EXPECT_FALSE(cfg.enable_data_shuffling);
  EXPECT_EQ(cfg.run_name, "my run");
  EXPECT_DOUBLE_EQ(cfg.adam_eps, 1e-6);
}

TEST(ConfigOverrides, ValidationSeesOnlyTheFinalValues) {
  // The file alone is invalid (steps and num_epochs both set); the override unsets one.
  const Config cfg = from_yaml_text(kMinimal + "steps: 5\nnum_epochs: 2\n", {"steps=null"});
  EXPECT_EQ(cfg.steps, -1);
  EXPECT_EQ(cfg.num_epochs, 2);
}

TEST(ConfigOverrides, MalformedOverridesAreErrors) {
  EXPECT_EQ(yaml_error(kMinimal, {"steps"}), "steps: expected key=value");
  EXPECT_EQ(yaml_error(kMinimal, {"=5"}), "=5: expected key=value");
  // A flag after the config file (sft_train --plan CONFIG.yml --ranks 4) says where flags go.
  EXPECT_EQ(yaml_error(kMinimal, {"--ranks"}),
            "--ranks: flags go before CONFIG.yml; after it only key=value overrides");
  EXPECT_EQ(yaml_error(kMinimal, {"--steps=5"}),
            "--steps: flags go before CONFIG.yml; after it only key=value overrides");
  EXPECT_EQ(yaml_error(kMinimal, {"steps=ten"}), "steps: expected an integer, got 'ten'");
  EXPECT_TRUE(starts_with(yaml_error(kMinimal, {"train_files=[a.h5,"}),
                          "train_files: cannot read '[a.h5,' as a YAML value"));
}

TEST(ConfigFile, ReadsAFileAndNamesItInErrors) {
  test::TempDir dir;
  test::write_file(dir / "run.yml", kMinimal + "steps: 7\n");
  EXPECT_EQ(from_file(dir / "run.yml", {"steps=9"}).steps, 9);
  test::write_file(dir / "dup.yml", kMinimal + "seed: 1\nseed: 2\n");
  EXPECT_EQ(user_error_of([&] { from_file(dir / "dup.yml", {}); }),
            "seed: given twice in " + (dir / "dup.yml") + " (lines 4 and 5)");
}

TEST(ConfigFile, MissingOrUnreadableFileIsAnError) {
  test::TempDir dir;
  EXPECT_EQ(user_error_of([&] { from_file(dir / "nope.yml", {}); }),
            (dir / "nope.yml") + ": cannot read config file");
  EXPECT_TRUE(starts_with(user_error_of([&] { from_file(dir.path(), {}); }),
                          dir.path() + ": cannot read config file"));
}

TEST(ConfigArgs, FirstArgumentIsTheFileTheRestAreOverrides) {
  test::TempDir dir;
  const std::string path = dir / "run.yml";
  test::write_file(path, kMinimal);
  std::vector<std::string> args = {"sft_train", path, "steps=3", "seed=4"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const Config cfg = from_args(int(argv.size()), argv.data());
  EXPECT_EQ(cfg.steps, 3);
  EXPECT_EQ(cfg.seed, 4);
}

TEST(ConfigArgs, NoConfigPathIsAUsageError) {
  std::string prog = "sft_train", override_first = "steps=3";
  char* alone[] = {prog.data()};
  EXPECT_EQ(user_error_of([&] { from_args(1, alone); }),
            "usage: sft_train CONFIG.yml [key=value ...]");
  char* no_file[] = {prog.data(), override_first.data()};
  EXPECT_TRUE(starts_with(user_error_of([&] { from_args(2, no_file); }),
                          "usage: sft_train CONFIG.yml [key=value ...]"));
}

}  // namespace
}  // namespace sftdp::config
