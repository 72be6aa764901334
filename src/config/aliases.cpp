// src/config/aliases.cpp — the table of other trainers' names (see aliases.h) and how each value
// becomes sft-dp's. Ranges are not checked here: validate() checks the key the value lands in.
#include "config/aliases.h"

#include <charconv>
#include <cmath>
#include <string_view>

#include "sftdp/check.h"

namespace sftdp::config::detail {
namespace {

using R = AliasRule;

[[noreturn]] void fail(const Alias& alias, const std::string& reason) {
  throw UserError(std::string(alias.name) + ": " + reason);
}

std::string scalar_text(const YAML::Node& value) { return value.IsScalar() ? value.Scalar() : ""; }

// num_train_epochs: transformers' float epochs; sft-dp trains whole ones or a number of steps.
YAML::Node whole_number(const Alias& alias, const YAML::Node& value) {
  if (value.IsNull()) return value;
  const std::string text = scalar_text(value);
  double x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail(alias, std::string("expected a number of epochs, got '") + text + "'");
  if (x != std::floor(x) || x < 1 || x > 1e9)
    fail(alias, text + " is not a whole number of epochs >= 1: sft-dp trains whole epochs (num_epochs) or a "
                       "number of optimizer steps; set steps instead (the start-up log says the steps per epoch)");
  return YAML::Node(std::to_string(static_cast<int64_t>(x)));
}

// lr_scheduler_type (transformers' SchedulerType): transformers' curve, read as lr_schedule with the
// transformers convention for its ends (optim/schedule.cpp), so every step's rate is get_scheduler's.
std::vector<AliasedValue> scheduler(const Alias& alias, const YAML::Node& value) {
  const std::string name = scalar_text(value);
  const AliasedValue theirs{"lr_schedule_convention", YAML::Node("transformers")};
  if (name == "linear" || name == "cosine")
    return {{"lr_schedule", YAML::Node(name)}, theirs, {"learning_rate_final_fraction", YAML::Node("0.0")}};
  if (name == "constant_with_warmup") return {{"lr_schedule", YAML::Node("constant")}, theirs};
  if (name == "constant")
    return {{"lr_schedule", YAML::Node("constant")}, theirs, {"warmup_steps_fraction", YAML::Node("0.0")}};
  fail(alias, "'" + name + "' has no sft-dp equivalent: linear, cosine, constant_with_warmup and constant are read "
              "as transformers defines them (lr_schedule with lr_schedule_convention: transformers); other "
              "schedules are not implemented");
}

// eval_strategy / save_strategy: "no" and "steps" are resolved with eval_steps / save_steps once the whole
// config is read (load.cpp); "epoch" (and "best") need a count of steps per epoch the config does not know.
std::vector<AliasedValue> strategy(const Alias& alias, const YAML::Node& value) {
  const std::string name = scalar_text(value);
  if (name == "no" || name == "steps") return {};
  const bool eval = std::string_view(alias.name) != "save_strategy";
  if (name == "epoch")
    fail(alias, std::string("epoch: sft-dp counts optimizer steps; set ") + (eval ? "eval_interval" : "checkpoint_period") +
                    " to the steps per epoch (the start-up log prints them)");
  fail(alias, "expected no or steps (or epoch, which sft-dp does not have), got '" + name + "'");
}

// report_to: sft-dp always writes <run>/metrics.jsonl and TensorBoard events; there is no W&B yet.
std::vector<AliasedValue> report_to(const Alias& alias, const YAML::Node& value) {
  std::vector<std::string> names;
  if (value.IsSequence())
    for (const auto& item : value) names.push_back(scalar_text(item));
  else
    names.push_back(scalar_text(value));
  for (const auto& n : names)
    if (n != "none" && n != "tensorboard" && n != "all" && !n.empty())
      fail(alias, "'" + n + "': sft-dp writes TensorBoard events (<run>/tensorboard/) and <run>/metrics.jsonl, and "
                  "reports nowhere else; leave report_to out");
  return {};
}

const char* const kPackingHint =
    "packing happens when the data is prepared: sft_prepare --pack or scripts/sft_prepare_hf.py --pack write packed "
    "rows (/segment_ids), which sft_train reads as they are; remove it here";

}  // namespace

const std::vector<Alias>& all_aliases() {
  static const std::vector<Alias> aliases = {
      {"warmup_ratio", "TRL", "warmup_steps_fraction"},
      {"num_train_epochs", "TRL", "num_epochs", R::kWholeNumber},
      {"epochs", "torchtune", "num_epochs"},
      {"max_steps", "TRL", "steps", R::kMinusOneIsNull},
      {"per_device_train_batch_size", "TRL", "per_device_batch_size"},
      {"micro_batch_size", "axolotl", "per_device_batch_size"},
      {"max_seq_length", "TRL", "max_target_length"},
      {"max_length", "TRL", "max_target_length"},
      {"sequence_len", "axolotl", "max_target_length"},
      {"lr_scheduler_type", "TRL", "lr_schedule", R::kScheduler},
      {"lr_scheduler", "axolotl", "lr_schedule", R::kScheduler},
      {"weight_decay", "TRL", "adam_weight_decay"},
      {"adam_beta1", "TRL", "adam_b1"},
      {"adam_beta2", "TRL", "adam_b2"},
      {"adam_epsilon", "TRL", "adam_eps"},
      {"max_grad_norm", "TRL", "gradient_clipping_threshold"},
      {"gradient_checkpointing", "TRL", "remat"},
      {"ici_context_parallelism", "MaxText", "context_parallelism"},
      {"logging_steps", "TRL", "log_period"},
      {"save_steps", "TRL", "checkpoint_period"},
      {"save_total_limit", "TRL", "keep_checkpoints", R::kNullIsZero},
      {"bf16", "TRL", "dtype", R::kBf16},
      {"lora_r", "axolotl", "lora_rank"},
      {"model_name_or_path", "TRL", "load_parameters_path"},
      {"base_model", "axolotl", "load_parameters_path"},
      {"data_seed", "TRL", "data_shuffle_seed"},
      {"eval_strategy", "TRL", "", R::kStrategy},
      {"evaluation_strategy", "TRL", "", R::kStrategy},
      {"save_strategy", "TRL", "", R::kStrategy},
      {"report_to", "TRL", "", R::kReportTo},
      {"packing", "TRL", "", R::kNoKey, kPackingHint},
      {"sample_packing", "axolotl", "", R::kNoKey, kPackingHint},
      {"optim", "TRL", "", R::kNoKey, "sft-dp's optimiser is AdamW (adam_b1, adam_b2, adam_eps, adam_weight_decay); "
                                     "remove it"},
      {"optimizer", "axolotl", "", R::kNoKey, "sft-dp's optimiser is AdamW (adam_b1, adam_b2, adam_eps, "
                                              "adam_weight_decay); remove it"},
      {"fp16", "TRL", "", R::kNoKey, "sft-dp computes in float32 or bfloat16 (dtype); there is no float16"},
      {"tf32", "TRL", "", R::kNoKey, "the GPU's GEMMs follow dtype (float32 or bfloat16); remove it"},
      {"deepspeed", "TRL", "", R::kNoKey, "set zero_stage (0-3): sft-dp shards optimiser state, gradients and "
                                          "parameters itself"},
      {"fsdp", "TRL", "", R::kNoKey, "set zero_stage: 3 (parameters, gradients and optimiser state sharded)"},
      {"lr_scheduler_kwargs", "TRL", "", R::kNoKey, "the schedule's final value is learning_rate_final_fraction"},
      {"dataset_text_field", "TRL", "", R::kNoKey, "the data is prepared before training: scripts/sft_prepare_hf.py "
                                                   "reads text, prompt/completion and chat columns"},
      {"completion_only_loss", "TRL", "", R::kNoKey, "the prepared data's /loss_weights decide which tokens count "
                                                     "(sft_prepare weights completions only)"},
      {"assistant_only_loss", "TRL", "", R::kNoKey, "the prepared data's /loss_weights decide which tokens count "
                                                    "(sft_prepare weights the assistant's turns only)"},
      {"train_on_inputs", "axolotl", "", R::kNoKey, "the prepared data's /loss_weights decide which tokens count "
                                                    "(sft_prepare weights completions only)"},
      {"adapter", "axolotl", "", R::kNoKey, "set lora_rank (> 0) for LoRA; there is no 4-bit base yet"},
      {"push_to_hub", "TRL", "", R::kNoKey, "nothing is uploaded: hf_export: true writes a Hugging Face directory "
                                            "you can push"},
      {"lora_target_linear", "axolotl", "", R::kNoKey, "set lora_target_modules: all-linear"},
      {"evals_per_epoch", "axolotl", "", R::kNoKey, "set eval_interval (optimizer steps between evaluations; the "
                                                    "start-up log prints the steps per epoch)"},
      {"saves_per_epoch", "axolotl", "", R::kNoKey, "set checkpoint_period (optimizer steps between checkpoints; "
                                                    "the start-up log prints the steps per epoch)"},
      {"val_set_size", "axolotl", "", R::kNoKey, "prepare an eval split (scripts/sft_prepare_hf.py --split) and set "
                                                 "eval_files"},
      {"datasets", "axolotl", "", R::kNoKey, "the data is prepared before training (scripts/sft_prepare_hf.py); set "
                                             "train_files to the prepared .h5 files"},
      {"wandb_project", "axolotl", "", R::kNoKey, "sft-dp writes TensorBoard events (<run>/tensorboard/) and "
                                                  "<run>/metrics.jsonl; there is no W&B yet"},
      {"load_in_4bit", "TRL", "", R::kNoKey, "there is no quantised base yet; weight_dtype: bfloat16 halves the "
                                             "weights' memory"},
      {"load_in_8bit", "TRL", "", R::kNoKey, "there is no quantised base yet; weight_dtype: bfloat16 halves the "
                                             "weights' memory"},
      {"max_steps_per_epoch", "torchtune", "", R::kNoKey, "set steps (optimizer steps in all)"},
      {"output_dir", "TRL", "", R::kNoKey,
       "set base_output_directory and run_name: outputs go to <base_output_directory>/<run_name>/"},
      {"per_device_eval_batch_size", "TRL", "", R::kNoKey,
       "evaluation reads per_device_batch_size rows per rank, the training micro-batch; leave it out"},
      {"batch_size", "torchtune", "", R::kNoKey,
       "set global_batch_size (rows per optimizer step) or per_device_batch_size (rows per rank per micro-step)"},
  };
  return aliases;
}

const Alias* find_alias(std::string_view name) {
  for (const auto& alias : all_aliases())
    if (name == alias.name) return &alias;
  return nullptr;
}

std::vector<AliasedValue> translate(const Alias& alias, const YAML::Node& value) {
  switch (alias.rule) {
    case R::kSame:
      return {{alias.key, value}};
    case R::kWholeNumber:
      return {{alias.key, whole_number(alias, value)}};
    case R::kMinusOneIsNull:
      return {{alias.key, scalar_text(value) == "-1" ? YAML::Node(YAML::NodeType::Null) : value}};
    case R::kNullIsZero:
      return {{alias.key, value.IsNull() ? YAML::Node("0") : value}};
    case R::kScheduler:
      return scheduler(alias, value);
    case R::kBf16: {
      const std::string text = scalar_text(value);
      if (text == "true" || text == "True") return {{alias.key, YAML::Node("bfloat16")}};
      if (text == "false" || text == "False") return {{alias.key, YAML::Node("float32")}};
      fail(alias, "expected true or false, got '" + text + "'");
    }
    case R::kStrategy:
      return strategy(alias, value);
    case R::kReportTo:
      return report_to(alias, value);
    case R::kNoKey:
      fail(alias, std::string("is ") + alias.origin + "'s name; sft-dp has no such key: " + alias.hint);
  }
  fail(alias, "unknown alias rule");
}

}  // namespace sftdp::config::detail
