// src/config/keys.cpp — the key table and strict scalar parsing/formatting for config keys.
// Integers and floats must be whole YAML scalars ("10", "3e-4"); booleans are true/false only;
// string lists accept one scalar or a flow/block list of scalars. Nothing here checks ranges.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "config/aliases.h"
#include "config/keys.h"
#include "sftdp/check.h"

namespace sftdp::config::detail {
namespace {

// What a non-scalar node is, for "expected an integer, got a map".
std::string describe(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsNull()) return "nothing";
  return "'" + node.Scalar() + "'";
}

[[noreturn]] void type_error(const KeySpec& key, const char* expected, const YAML::Node& node) {
  throw UserError(std::string(key.name) + ": expected " + expected + ", got " + describe(node));
}

int64_t parse_int(const KeySpec& key, const YAML::Node& node) {
  if (node.IsNull() && key.unset_allowed) return -1;
  if (!node.IsScalar()) type_error(key, "an integer", node);
  std::string_view text = node.Scalar();
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    type_error(key, "an integer", node);
  return value;
}

double parse_double(const KeySpec& key, const YAML::Node& node) {
  if (node.IsNull() && key.unset_allowed) return -1;
  if (!node.IsScalar()) type_error(key, "a number", node);
  std::string_view text = node.Scalar();
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value))
    type_error(key, "a number", node);
  return value;
}

bool parse_bool(const KeySpec& key, const YAML::Node& node) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  type_error(key, "true or false", node);
}

std::string parse_string(const KeySpec& key, const YAML::Node& node) {
  if (node.IsNull()) return "";
  if (!node.IsScalar()) type_error(key, "a string", node);
  return node.Scalar();
}

std::vector<std::string> parse_string_list(const KeySpec& key, const YAML::Node& node) {
  if (node.IsNull()) return {};
  if (node.IsScalar()) return {node.Scalar()};
  if (!node.IsSequence()) type_error(key, "a path or a list of paths", node);
  std::vector<std::string> out;
  for (const auto& item : node) {
    if (!item.IsScalar())
      throw UserError(std::string(key.name) + ": expected a list of paths, but one item is " +
                      describe(item));
    out.push_back(item.Scalar());
  }
  return out;
}

// A string as a YAML scalar that reads back as the same string (quoted when needed).
std::string format_string(const std::string& s) {
  YAML::Emitter out;
  out << s;
  return out.c_str();
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<KeySpec>& all_keys() {
  static const std::vector<KeySpec> keys = {
      {"run_name", "Run", &Config::run_name},
      {"base_output_directory", "Run", &Config::base_output_directory},
      {"steps", "Run", &Config::steps, true},
      {"num_epochs", "Run", &Config::num_epochs, true},
      {"hardware", "Run", &Config::hardware},
      {"cuda_graphs", "Run", &Config::cuda_graphs},
      {"seed", "Run", &Config::seed},
      {"collective_timeout_s", "Run", &Config::collective_timeout_s},
      {"global_batch_size", "Batch", &Config::global_batch_size, true},
      {"per_device_batch_size", "Batch", &Config::per_device_batch_size, true},
      {"gradient_accumulation_steps", "Batch", &Config::gradient_accumulation_steps},
      {"context_parallelism", "Batch", &Config::context_parallelism},
      {"max_target_length", "Batch", &Config::max_target_length},
      {"train_files", "Data", &Config::train_files},
      {"eval_files", "Data", &Config::eval_files},
      {"enable_data_shuffling", "Data", &Config::enable_data_shuffling},
      {"data_shuffle_seed", "Data", &Config::data_shuffle_seed},
      {"eval_interval", "Data", &Config::eval_interval},
      {"eval_steps", "Data", &Config::eval_steps, true},
      {"model_name", "Model", &Config::model_name},
      {"num_decoder_layers", "Model", &Config::num_decoder_layers, true},
      {"num_heads", "Model", &Config::num_heads, true},
      {"emb_dim", "Model", &Config::emb_dim, true},
      {"mlp_dim", "Model", &Config::mlp_dim, true},
      {"vocab_size", "Model", &Config::vocab_size, true},
      {"max_position_embeddings", "Model", &Config::max_position_embeddings, true},
      {"decoder_block", "Model", &Config::decoder_block},
      {"num_kv_heads", "Model", &Config::num_kv_heads, true},
      {"head_dim", "Model", &Config::head_dim, true},
      {"rms_norm_eps", "Model", &Config::rms_norm_eps, true},
      {"rope_theta", "Model", &Config::rope_theta, true},
      {"tie_word_embeddings", "Model", &Config::tie_word_embeddings},
      {"load_parameters_path", "Model", &Config::load_parameters_path},
      {"weight_dtype", "Model", &Config::weight_dtype},
      {"dtype", "Model", &Config::dtype},
      {"remat", "Model", &Config::remat},
      {"lora_rank", "LoRA", &Config::lora_rank},
      {"lora_alpha", "LoRA", &Config::lora_alpha},
      {"lora_dropout", "LoRA", &Config::lora_dropout},
      {"lora_target_modules", "LoRA", &Config::lora_target_modules},
      {"load_adapter_path", "LoRA", &Config::load_adapter_path},
      {"learning_rate", "Optimiser", &Config::learning_rate},
      {"warmup_steps_fraction", "Optimiser", &Config::warmup_steps_fraction},
      {"warmup_steps", "Optimiser", &Config::warmup_steps, true},
      {"learning_rate_final_fraction", "Optimiser", &Config::learning_rate_final_fraction},
      {"lr_schedule", "Optimiser", &Config::lr_schedule},
      {"lr_schedule_convention", "Optimiser", &Config::lr_schedule_convention},
      {"adam_b1", "Optimiser", &Config::adam_b1},
      {"adam_b2", "Optimiser", &Config::adam_b2},
      {"adam_eps", "Optimiser", &Config::adam_eps},
      {"adam_weight_decay", "Optimiser", &Config::adam_weight_decay},
      {"gradient_clipping_threshold", "Optimiser", &Config::gradient_clipping_threshold},
      {"zero_stage", "Optimiser", &Config::zero_stage},
      {"allreduce_overlap", "Optimiser", &Config::allreduce_overlap},
      {"checkpoint_period", "Checkpoints", &Config::checkpoint_period},
      {"keep_checkpoints", "Checkpoints", &Config::keep_checkpoints},
      {"async_checkpointing", "Checkpoints", &Config::async_checkpointing},
      {"resume", "Checkpoints", &Config::resume},
      {"hf_export", "Checkpoints", &Config::hf_export},
      {"hf_export_tokenizer", "Checkpoints", &Config::hf_export_tokenizer},
      {"log_period", "Logging", &Config::log_period},
      {"param_check_period", "Logging", &Config::param_check_period},
  };
  return keys;
}

const KeySpec* find_key(std::string_view name) {
  for (const auto& key : all_keys())
    if (name == key.name) return &key;
  return nullptr;
}

std::string closest_key(std::string_view name) {
  const KeySpec* best = nullptr;
  size_t best_distance = SIZE_MAX;
  for (const auto& key : all_keys()) {
    const size_t d = edit_distance(name, key.name);
    if (d < best_distance) best = &key, best_distance = d;
  }
  return best->name;
}

void throw_unknown_key(std::string_view name) {
  // The nearest name among the keys and other trainers' names (config/aliases.h); an alias
  // nearer than every key suggests the key it is read as.
  const std::string key = closest_key(name);
  const Alias* nearest_alias = nullptr;
  size_t alias_distance = SIZE_MAX;
  for (const auto& alias : all_aliases()) {
    if (alias.rule == AliasRule::kNoKey) continue;
    const size_t d = edit_distance(name, alias.name);
    if (d < alias_distance) nearest_alias = &alias, alias_distance = d;
  }
  std::string suggestion = key;
  if (nearest_alias && alias_distance < edit_distance(name, key))
    suggestion = std::string(nearest_alias->key) + ", or " + nearest_alias->origin + "'s " + nearest_alias->name;
  throw UserError(std::string(name) + ": unknown key (did you mean " + suggestion + "?)");
}

void set_from_yaml(Config& cfg, const KeySpec& key, const YAML::Node& value) {
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(cfg.*member)>;
        if constexpr (std::is_same_v<T, int64_t>) cfg.*member = parse_int(key, value);
        else if constexpr (std::is_same_v<T, double>) cfg.*member = parse_double(key, value);
        else if constexpr (std::is_same_v<T, bool>) cfg.*member = parse_bool(key, value);
        else if constexpr (std::is_same_v<T, std::string>) cfg.*member = parse_string(key, value);
        else cfg.*member = parse_string_list(key, value);
      },
      key.field);
}

std::string format_double(double x) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  SFTDP_ASSERT(ec == std::errc(), "to_chars(double) failed");
  std::string s(buf, end);
  // Keep it a float for any YAML reader (YAML 1.1 wants a '.' in "1.0e-08"), not an integer.
  if (s.find_first_of(".ein") == std::string::npos) return s + ".0";
  const size_t e = s.find('e');
  if (e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
  return s;
}

std::string format_value(const Config& cfg, const KeySpec& key) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& v = cfg.*member;
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return (key.unset_allowed && v == -1) ? "null" : std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return (key.unset_allowed && v == -1) ? "null" : format_double(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return format_string(v);
        } else {
          YAML::Emitter out;  // flow context: quotes items that hold ',' '[' ']' etc.
          out << YAML::Flow << v;
          return out.c_str();
        }
      },
      key.field);
}

}  // namespace sftdp::config::detail
