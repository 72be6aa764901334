// src/config/aliases.cpp — the table of other trainers' names (see aliases.h) and how each value
// becomes sft-dp's. Ranges are not checked here: validate() checks the key the value lands in.
#include "config/aliases.h"

#include <charconv>
#include <cmath>

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

// lr_scheduler_type (transformers' SchedulerType): sft-dp's schedule is linear warmup, then cosine
// decay from learning_rate to learning_rate × learning_rate_final_fraction at the last step.
std::vector<AliasedValue> scheduler(const Alias& alias, const YAML::Node& value) {
  const std::string name = scalar_text(value);
  if (name == "cosine") return {{"learning_rate_final_fraction", YAML::Node("0.0")}};
  if (name == "constant_with_warmup") return {{"learning_rate_final_fraction", YAML::Node("1.0")}};
  if (name == "constant")
    return {{"learning_rate_final_fraction", YAML::Node("1.0")}, {"warmup_steps_fraction", YAML::Node("0.0")}};
  fail(alias, "'" + name + "' has no sft-dp equivalent: the schedule is linear warmup (warmup_steps_fraction) then "
              "cosine decay to learning_rate x learning_rate_final_fraction; cosine (0.0), constant_with_warmup "
              "(1.0) and constant (1.0, no warmup) map onto it");
}

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
      {"lr_scheduler_type", "TRL", "learning_rate_final_fraction", R::kScheduler},
      {"lr_scheduler", "axolotl", "learning_rate_final_fraction", R::kScheduler},
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
      {"output_dir", "TRL", "", R::kNoKey,
       "set base_output_directory and run_name: outputs go to <base_output_directory>/<run_name>/"},
      {"eval_strategy", "TRL", "", R::kNoKey,
       "set eval_interval (evaluate every N optimizer steps; 0 = only at the end) with eval_files"},
      {"evaluation_strategy", "TRL", "", R::kNoKey,
       "set eval_interval (evaluate every N optimizer steps; 0 = only at the end) with eval_files"},
      {"save_strategy", "TRL", "", R::kNoKey, "set checkpoint_period (a checkpoint every N optimizer steps)"},
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
    case R::kNoKey:
      fail(alias, std::string("is ") + alias.origin + "'s name; sft-dp has no such key: " + alias.hint);
  }
  fail(alias, "unknown alias rule");
}

}  // namespace sftdp::config::detail
