// tests/config/test_config_aliases.cpp — other trainers' names (SPEC §3 "Other trainers' names"):
// TRL / transformers / axolotl / torchtune keys are read as the sft-dp keys they mean, each with one
// note for the log; a value with no equivalent, a name no key means, and an alias given beside the
// key it sets are errors that name the alias and say what to set instead.
#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(cfg.lr_schedule, "cosine");
  EXPECT_EQ(cfg.lr_schedule_convention, "transformers");
  EXPECT_EQ(cfg.adam_weight_decay, 0.0);
  EXPECT_EQ(cfg.gradient_clipping_threshold, 0.5);
  EXPECT_EQ(cfg.alias_notes, (std::vector<std::string>{
                                 "per_device_train_batch_size=4 read as per_device_batch_size=4",
                                 "max_seq_length=128 read as max_target_length=128",
                                 "warmup_ratio=0.05 read as warmup_steps_fraction=0.05",
                                 "num_train_epochs=3.0 read as num_epochs=3",
                                 "lr_scheduler_type=cosine read as learning_rate_final_fraction=0.0, "
                                 "lr_schedule=cosine, lr_schedule_convention=transformers",
                                 "weight_decay=0.0 read as adam_weight_decay=0.0",
                                 "max_grad_norm=0.5 read as gradient_clipping_threshold=0.5",
                                 "where this config is silent, sft-dp's defaults apply, not TRL's: learning_rate "
                                 "2e-05 (SFTConfig) -> 3.0e-04; adam_beta2 0.999 -> adam_b2 0.95; seed 42 -> seed 0"}));
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
  EXPECT_EQ(constant.lr_schedule, "constant");
  EXPECT_EQ(constant.lr_schedule_convention, "transformers");
  EXPECT_EQ(constant.warmup_steps_fraction, 0.0);
  EXPECT_EQ(constant.alias_notes.at(0), "lr_scheduler_type=constant read as warmup_steps_fraction=0.0, "
                                        "lr_schedule=constant, lr_schedule_convention=transformers");
  const Config with_warmup = from_yaml_text(kMinimal, {"lr_scheduler_type=constant_with_warmup", "warmup_ratio=0.2"});
  EXPECT_EQ(with_warmup.lr_schedule, "constant");
  EXPECT_EQ(with_warmup.warmup_steps_fraction, 0.2);
  const Config linear = from_yaml_text(kMinimal, {"lr_scheduler_type=linear"});  // TRL's default
  EXPECT_EQ(linear.lr_schedule, "linear");
  EXPECT_EQ(linear.lr_schedule_convention, "transformers");
  EXPECT_EQ(linear.learning_rate_final_fraction, 0.0);
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
  EXPECT_EQ(error_of(kMinimal, {"lr_scheduler_type=polynomial"}),
            "lr_scheduler_type: 'polynomial' has no sft-dp equivalent: linear, cosine, constant_with_warmup and "
            "constant are read as transformers defines them (lr_schedule with lr_schedule_convention: transformers); "
            "other schedules are not implemented");
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
  EXPECT_EQ(twice.alias_notes.at(0), "warmup_ratio=0.3 read as warmup_steps_fraction=0.3");
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
    if (alias.rule == detail::AliasRule::kStrategy || alias.rule == detail::AliasRule::kReportTo) {
      EXPECT_STREQ(alias.key, "") << alias.name << ": resolved with other names (config/load.cpp)";
      continue;
    }
    EXPECT_NE(detail::find_key(alias.key), nullptr) << alias.name << " -> " << alias.key;
  }
}


// ---- Keys whose meaning differs (issue 42; SPEC §3 "Keys whose meaning differs") ----

std::vector<std::string> errors_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    from_yaml_text(yaml, overrides);
  } catch (const UserError& e) {
    return e.messages();
  }
  return {};
}

TEST(ConfigMeanings, EveryBadKeyOfAConfigIsAnErrorLineOfItsOwn) {
  const auto errors = errors_of("train_files: train.h5\nglobal_batch_size: 8\nmax_target_length: 64\nmax_seq_len: 64\n"
                                "learning_rate: fast\n"
                                "packing: true\nreport_to: wandb\nadam_b1: 2\n", {"zero_stage=7"});
  EXPECT_EQ(errors, (std::vector<std::string>{
                        "max_seq_len: unknown key (did you mean max_target_length, or TRL's max_seq_length?)",
                        "learning_rate: expected a number, got 'fast'",
                        "packing: is TRL's name; sft-dp has no such key: packing happens when the data is prepared: "
                        "sft_prepare --pack or scripts/sft_prepare_hf.py --pack write packed rows (/segment_ids), "
                        "which sft_train reads as they are; remove it here",
                        "report_to: 'wandb': sft-dp writes TensorBoard events (<run>/tensorboard/) and "
                        "<run>/metrics.jsonl, and reports nowhere else; leave report_to out",
                        "adam_b1: must be in [0, 1), got 2.0",
                        "zero_stage: must be 0, 1, 2 or 3, got 7"}));
  // Printed by every main as "error: %s": one error line each.
  EXPECT_NE(error_of(kMinimal + "a_typo: 1\nanother_typo: 2\n").find("\nerror: another_typo: unknown key"),
            std::string::npos);
}

TEST(ConfigMeanings, TrlsEvalStepsIsAnIntervalInATrlConfigAndNamedInAnSftDpOne) {
  const std::string trl = "train_files: train.h5\nper_device_train_batch_size: 4\nmax_seq_length: 64\n";
  const Config theirs = from_yaml_text(trl + "eval_steps: 25\n", {});
  EXPECT_EQ(theirs.eval_interval, 25);
  EXPECT_EQ(theirs.eval_steps, -1);  // the whole eval set
  EXPECT_NE(std::find(theirs.alias_notes.begin(), theirs.alias_notes.end(),
                      "eval_steps=25 read as eval_interval=25 (TRL's meaning, as this config uses TRL's names such as "
                      "per_device_train_batch_size: evaluate every 25 steps; sft-dp's eval_steps, a number of eval "
                      "batches, is left at the whole set)"),
            theirs.alias_notes.end());
  EXPECT_EQ(from_yaml_text(trl + "eval_strategy: steps\n", {"logging_steps=5"}).eval_interval, 5);
  const Config no = from_yaml_text(trl + "eval_strategy: \"no\"\neval_steps: 25\n", {});
  EXPECT_EQ(no.eval_interval, 0);
  EXPECT_EQ(no.eval_steps, -1);
  EXPECT_EQ(errors_of(trl + "eval_steps: 25\neval_interval: 10\n"),
            std::vector<std::string>{"eval_steps: eval_interval is given too, and both set eval_interval (eval_steps is "
                                     "TRL's name for it); give one of them"});
  EXPECT_EQ(errors_of(trl + "eval_strategy: epoch\n"),
            std::vector<std::string>{"eval_strategy: epoch: sft-dp counts optimizer steps; set eval_interval to the "
                                     "steps per epoch (the start-up log prints them)"});
  // sft-dp's own config: its meaning, and a line saying so.
  const Config ours = from_yaml_text(kMinimal + "eval_steps: 25\n", {});
  EXPECT_EQ(ours.eval_steps, 25);
  EXPECT_EQ(ours.eval_interval, 0);
  EXPECT_EQ(ours.alias_notes, std::vector<std::string>{
                                  "eval_steps=25: sft-dp evaluates only the first 25 batches of the eval set; to "
                                  "evaluate every 25 steps (TRL's eval_steps) write eval_interval: 25"});
}

TEST(ConfigMeanings, SeedSaveStrategyAndMaxStepsAreReadAsTrlMeansThem) {
  const std::string trl = "train_files: train.h5\nper_device_train_batch_size: 4\nmax_seq_length: 64\n";
  const Config seeded = from_yaml_text(trl + "seed: 42\n", {});
  EXPECT_EQ(seeded.seed, 42);
  EXPECT_EQ(seeded.data_shuffle_seed, 42);  // TRL's seed orders the data too
  EXPECT_EQ(from_yaml_text(trl + "seed: 42\ndata_seed: 7\n", {}).data_shuffle_seed, 7);
  const Config ours = from_yaml_text(kMinimal + "seed: 42\n", {});
  EXPECT_EQ(ours.data_shuffle_seed, 0);
  EXPECT_EQ(ours.alias_notes, std::vector<std::string>{
                                  "seed=42: seeds the random initial weights (none with load_parameters_path) and "
                                  "LoRA's A and dropout masks; the data order is data_shuffle_seed's (0)"});
  EXPECT_EQ(from_yaml_text(trl + "save_strategy: steps\n", {}).checkpoint_period, 500);
  EXPECT_EQ(from_yaml_text(trl + "save_strategy: steps\nsave_steps: 20\n", {}).checkpoint_period, 20);
  EXPECT_EQ(from_yaml_text(trl + "save_strategy: \"no\"\nsave_steps: 20\n", {}).checkpoint_period, 0);
  const Config both = from_yaml_text(trl + "max_steps: 100\nnum_train_epochs: 3\n", {});
  EXPECT_EQ(both.steps, 100);
  EXPECT_EQ(both.num_epochs, -1);
  EXPECT_NE(std::find(both.alias_notes.begin(), both.alias_notes.end(),
                      "num_train_epochs=3 not used: max_steps=100 is given, and max_steps wins (as in transformers)"),
            both.alias_notes.end());
  EXPECT_EQ(from_yaml_text(trl + "max_steps: -1\nnum_train_epochs: 3\n", {}).num_epochs, 3);
}

TEST(ConfigMeanings, WarmupStepsIsACountOrBelowOneAFraction) {
  EXPECT_EQ(from_yaml_text(kMinimal + "warmup_steps: 10\n", {}).warmup_steps, 10);
  EXPECT_EQ(from_yaml_text(kMinimal + "warmup_steps: 0\n", {}).warmup_steps, 0);
  const Config fraction = from_yaml_text(kMinimal + "warmup_steps: 0.05\n", {});
  EXPECT_EQ(fraction.warmup_steps, -1);
  EXPECT_EQ(fraction.warmup_steps_fraction, 0.05);
  const Config both = from_yaml_text(kMinimal + "warmup_steps: 10\n", {"warmup_ratio=0.2"});
  EXPECT_EQ(both.warmup_steps, 10);
  EXPECT_NE(std::find(both.alias_notes.begin(), both.alias_notes.end(),
                      "warmup_steps=10 is given: warmup_ratio=0.2 not used (a number of warmup steps wins over a "
                      "fraction, as in transformers)"),
            both.alias_notes.end());
  EXPECT_EQ(errors_of(kMinimal + "warmup_steps: -3\n"), std::vector<std::string>{"warmup_steps: must be >= 0, got -3"});
}

}  // namespace
}  // namespace sftdp::config
