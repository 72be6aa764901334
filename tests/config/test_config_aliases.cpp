// tests/config/test_config_aliases.cpp — other trainers' names (SPEC §3 "Other trainers' names"):
// TRL / transformers / axolotl / torchtune keys are read as the sft-dp keys they mean, each with one
// note for the log; a value with no equivalent, a name no key means, and an alias given beside the
// key it sets are errors that name the alias and say what to set instead.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "config/aliases.h"
#include "config/keys.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

using sftdp::test::user_error_of;

namespace sftdp::config {
namespace {

const std::string kMinimal = "train_files: train.h5\nglobal_batch_size: 8\nmax_target_length: 64\n";

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return user_error_of([&] { from_yaml_text(yaml, overrides); });
}

TEST(ConfigAliases, TrlNamesAreReadAsTheKeysTheyMeanWithANoteEach) {
  const Config cfg = from_yaml_text("train_files: train.h5\nper_device_train_batch_size: 4\nmax_seq_length: 128\n"
                                    "warmup_ratio: 0.05\nnum_train_epochs: 3.0\n",
                                    {"lr_scheduler_type=cosine", "weight_decay=0.0", "max_grad_norm=0.5"});
  EXPECT_EQ(cfg.per_device_batch_size, 4);
  EXPECT_EQ(cfg.global_batch_size, -1);
  EXPECT_EQ(cfg.max_target_length, 128);
  EXPECT_EQ(cfg.warmup_steps_fraction, 0.05);
  EXPECT_EQ(cfg.num_epochs, 3);
  EXPECT_EQ(cfg.learning_rate_final_fraction, 0.0);
  EXPECT_EQ(cfg.adam_weight_decay, 0.0);
  EXPECT_EQ(cfg.gradient_clipping_threshold, 0.5);
  EXPECT_EQ(cfg.alias_notes, (std::vector<std::string>{
                                 "per_device_train_batch_size=4 read as per_device_batch_size=4",
                                 "max_seq_length=128 read as max_target_length=128",
                                 "warmup_ratio=0.05 read as warmup_steps_fraction=0.05",
                                 "num_train_epochs=3.0 read as num_epochs=3",
                                 "lr_scheduler_type=cosine read as learning_rate_final_fraction=0.0",
                                 "weight_decay=0.0 read as adam_weight_decay=0.0",
                                 "max_grad_norm=0.5 read as gradient_clipping_threshold=0.5"}));
  // The stored config has sft-dp's keys only: read back, it is the same run and has no notes.
  const Config again = from_yaml_text(cfg.to_yaml(), {});
  EXPECT_EQ(again.to_yaml(), cfg.to_yaml());
  EXPECT_TRUE(again.alias_notes.empty());
  EXPECT_EQ(cfg.to_yaml().find("warmup_ratio"), std::string::npos);
}

TEST(ConfigAliases, ValuesAreTranslatedWhereTheMeaningsDiffer) {
  const Config minus_one = from_yaml_text(kMinimal, {"max_steps=-1"});  // transformers' "not set"
  EXPECT_EQ(minus_one.steps, -1);
  EXPECT_EQ(from_yaml_text(kMinimal, {"max_steps=20"}).steps, 20);
  EXPECT_EQ(from_yaml_text(kMinimal, {"save_total_limit=null"}).keep_checkpoints, 0);  // None: keep all
  EXPECT_EQ(from_yaml_text(kMinimal, {"save_total_limit=3"}).keep_checkpoints, 3);
  EXPECT_EQ(from_yaml_text(kMinimal, {"bf16=true"}).dtype, "bfloat16");
  EXPECT_EQ(from_yaml_text(kMinimal, {"bf16=false"}).dtype, "float32");
  EXPECT_TRUE(from_yaml_text(kMinimal, {"gradient_checkpointing=true"}).remat);
  const Config constant = from_yaml_text(kMinimal, {"lr_scheduler_type=constant"});
  EXPECT_EQ(constant.learning_rate_final_fraction, 1.0);
  EXPECT_EQ(constant.warmup_steps_fraction, 0.0);
  EXPECT_EQ(constant.alias_notes, std::vector<std::string>{
                                      "lr_scheduler_type=constant read as warmup_steps_fraction=0.0, "
                                      "learning_rate_final_fraction=1.0"});
  const Config with_warmup = from_yaml_text(kMinimal, {"lr_scheduler_type=constant_with_warmup", "warmup_ratio=0.2"});
  EXPECT_EQ(with_warmup.learning_rate_final_fraction, 1.0);
  EXPECT_EQ(with_warmup.warmup_steps_fraction, 0.2);
  // axolotl and torchtune spellings.
  const Config axolotl = from_yaml_text("train_files: train.h5\nmicro_batch_size: 2\nsequence_len: 256\nlora_r: 8\n"
                                        "lr_scheduler: cosine\nepochs: 2\n", {});
  EXPECT_EQ(axolotl.per_device_batch_size, 2);
  EXPECT_EQ(axolotl.max_target_length, 256);
  EXPECT_EQ(axolotl.lora_rank, 8);
  EXPECT_EQ(axolotl.num_epochs, 2);
}

TEST(ConfigAliases, AValueWithoutAnEquivalentSaysWhatToSetInstead) {
  EXPECT_EQ(error_of(kMinimal, {"num_train_epochs=1.5"}),
            "num_train_epochs: 1.5 is not a whole number of epochs >= 1: sft-dp trains whole epochs (num_epochs) "
            "or a number of optimizer steps; set steps instead (the start-up log says the steps per epoch)");
  EXPECT_EQ(error_of(kMinimal, {"lr_scheduler_type=linear"}),
            "lr_scheduler_type: 'linear' has no sft-dp equivalent: the schedule is linear warmup "
            "(warmup_steps_fraction) then cosine decay to learning_rate x learning_rate_final_fraction; cosine "
            "(0.0), constant_with_warmup (1.0) and constant (1.0, no warmup) map onto it");
  EXPECT_EQ(error_of(kMinimal, {"output_dir=runs/a"}),
            "output_dir: is TRL's name; sft-dp has no such key: set base_output_directory and run_name: outputs go "
            "to <base_output_directory>/<run_name>/");
  EXPECT_EQ(error_of(kMinimal + "batch_size: 8\n"),
            "batch_size: is torchtune's name; sft-dp has no such key: set global_batch_size (rows per optimizer "
            "step) or per_device_batch_size (rows per rank per micro-step)");
  EXPECT_EQ(error_of(kMinimal, {"bf16=maybe"}), "bf16: expected true or false, got 'maybe'");
  // A wrong type names the alias as written and the key it is read as.
  EXPECT_EQ(error_of(kMinimal, {"warmup_ratio=abc"}), "warmup_ratio (read as warmup_steps_fraction): expected a "
                                                      "number, got 'abc'");
}

TEST(ConfigAliases, AnAliasAndTheKeyItSetsBothGivenIsAnError) {
  EXPECT_EQ(error_of(kMinimal + "warmup_steps_fraction: 0.1\n", {"warmup_ratio=0.2"}),
            "warmup_ratio: warmup_steps_fraction is given too, and both set warmup_steps_fraction (warmup_ratio is "
            "TRL's name for it); give one of them");
  EXPECT_EQ(error_of(kMinimal + "warmup_ratio: 0.2\nwarmup_steps_fraction: 0.1\n"),
            "warmup_steps_fraction: warmup_ratio is given too, and both set warmup_steps_fraction (warmup_ratio is "
            "TRL's name for it); give one of them");
  EXPECT_EQ(error_of("train_files: train.h5\nglobal_batch_size: 8\n", {"max_seq_length=64", "max_length=64"}),
            "max_length: max_seq_length is given too, and both set max_target_length (max_length is TRL's name for "
            "it, max_seq_length is TRL's name for it); give one of them");
  EXPECT_EQ(error_of(kMinimal, {"warmup_ratio=0.1", "lr_scheduler_type=constant"}),
            "lr_scheduler_type: warmup_ratio is given too, and both set warmup_steps_fraction (lr_scheduler_type=constant "
            "means no warmup; constant_with_warmup keeps it, warmup_ratio is TRL's name for it); give one of them");
  EXPECT_EQ(error_of(kMinimal + "warmup_ratio: 0.1\nwarmup_ratio: 0.2\n"),
            "warmup_ratio: given twice in <config> (lines 4 and 5)");
  // The same alias again as an override: the later value wins, as for a key.
  const Config twice = from_yaml_text(kMinimal + "warmup_ratio: 0.1\n", {"warmup_ratio=0.3"});
  EXPECT_EQ(twice.warmup_steps_fraction, 0.3);
  EXPECT_EQ(twice.alias_notes, std::vector<std::string>{"warmup_ratio=0.3 read as warmup_steps_fraction=0.3"});
}

TEST(ConfigAliases, AnInvalidValueSaysWhichNameTheUserWrote) {
  EXPECT_EQ(error_of(kMinimal, {"warmup_ratio=2"}),
            "warmup_steps_fraction: must be in [0, 1], got 2.0 (warmup_steps_fraction was given as warmup_ratio)");
  EXPECT_EQ(error_of("train_files: t.h5\nmax_target_length: 64\nglobal_batch_size: 8\n",
                     {"per_device_train_batch_size=2"}),
            "global_batch_size: give global_batch_size or per_device_batch_size, not both "
            "(per_device_batch_size was given as per_device_train_batch_size)");
}

TEST(ConfigAliases, AnUnknownKeyNearAnAliasSuggestsTheKey) {
  EXPECT_EQ(error_of(kMinimal, {"warmup_ration=0.1"}),
            "warmup_ration: unknown key (did you mean warmup_steps_fraction, or TRL's warmup_ratio?)");
  EXPECT_EQ(error_of(kMinimal, {"per_device_train_batch=4"}),
            "per_device_train_batch: unknown key (did you mean per_device_batch_size, or TRL's "
            "per_device_train_batch_size?)");
  // Nearer a key than any alias: the key alone, as before.
  EXPECT_EQ(error_of(kMinimal, {"learning_rat=0.1"}), "learning_rat: unknown key (did you mean learning_rate?)");
}

TEST(ConfigAliases, EveryAliasNamesARealKeyAndNoneIsAKey) {
  for (const auto& alias : detail::all_aliases()) {
    EXPECT_EQ(detail::find_key(alias.name), nullptr) << alias.name << " is a key of its own";
    if (alias.rule == detail::AliasRule::kNoKey) {
      EXPECT_STRNE(alias.hint, "") << alias.name;
      continue;
    }
    EXPECT_NE(detail::find_key(alias.key), nullptr) << alias.name << " -> " << alias.key;
  }
}

}  // namespace
}  // namespace sftdp::config
