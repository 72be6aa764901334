// src/config/aliases.h — internal to src/config: the names TRL, transformers' TrainingArguments,
// axolotl and torchtune give some keys (SPEC §3 "Other trainers' names"). Each is read as the
// sft-dp key it means, with one log note; a name whose meaning no single sft-dp key carries is an
// error that says what to set instead. The config stored in checkpoints holds only sft-dp's keys.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

namespace sftdp::config::detail {

// How an alias's value becomes the key's.
enum class AliasRule {
  kSame,            // the value as it is
  kWholeNumber,     // num_train_epochs: a float that must be whole (3.0 -> 3)
  kMinusOneIsNull,  // max_steps: transformers' -1 ("not set") is null
  kNullIsZero,      // save_total_limit: transformers' None ("keep all") is 0
  kScheduler,       // lr_scheduler_type: linear, cosine, constant, constant_with_warmup (transformers' curves)
  kStrategy,        // eval_strategy / save_strategy: no or steps, resolved with eval_steps / save_steps (load.cpp)
  kReportTo,        // report_to: none or tensorboard (always written); anything else is an error
  kBf16,            // bf16: true -> dtype bfloat16, false -> float32
  kNoKey,           // no single key means it: an error with `hint`
};

struct Alias {
  const char* name;    // the other trainer's key
  const char* origin;  // whose name it is, for the notes: "TRL", "transformers", "axolotl", ...
  const char* key;     // the sft-dp key it sets (kScheduler: the first of them; kNoKey: "")
  AliasRule rule = AliasRule::kSame;
  const char* hint = "";  // kNoKey: what to set instead
};

const std::vector<Alias>& all_aliases();
// nullptr when `name` is no alias.
const Alias* find_alias(std::string_view name);

// One key=value an alias stands for.
struct AliasedValue {
  std::string key;
  YAML::Node value;
};
// What `alias: value` sets: one key, or two (lr_scheduler_type: constant). UserError naming the
// alias when its value has no equivalent (num_train_epochs 1.5, lr_scheduler_type linear) or no
// key means it (output_dir).
std::vector<AliasedValue> translate(const Alias& alias, const YAML::Node& value);

}  // namespace sftdp::config::detail
