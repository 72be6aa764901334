// src/config/validate.cpp — range and consistency checks on a fully parsed config. Runs once,
// after the file and every key=value override are applied, so a later override may fix an
// earlier value. Each failure is "<key>: <reason>" naming the key to change; every check runs, and
// all failures come out together as one UserError (one `error:` line each).
#include <cmath>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/keys.h"
#include "sftdp/check.h"

namespace sftdp::config::detail {
namespace {

// The failures of the validate() call in progress (checks are independent: each one that fails adds
// its line and the next check runs).
thread_local std::vector<std::string>* problems = nullptr;

// One line per key: a later check of a key that already failed (global_batch_size -1 is also "not set")
// would only repeat the first line's point.
// Lines that name a file (a Hugging Face config.json's several keys) are all kept.
void add(const std::string& line) {
  const size_t colon = line.find(": ");
  const bool names_a_key = colon != std::string::npos && find_key(std::string_view(line).substr(0, colon));
  for (const auto& p : *problems)
    if (p == line || (names_a_key && p.starts_with(line.substr(0, colon + 2)))) return;
  problems->push_back(line);
}

void fail(const char* key, const std::string& reason) { add(std::string(key) + ": " + reason); }

void require_at_least(const char* key, int64_t value, int64_t lowest) {
  if (value < lowest)
    fail(key, "must be >= " + std::to_string(lowest) + ", got " + std::to_string(value));
}

// Keys that may be unset (steps, batch sizes, model dimensions, ...): null leaves them unset
// (stored as -1); a value the user wrote, -1 included, must be >= 1 (a number: > 0).
void validate_unsettable_keys(const Config& cfg, const GivenKeys& given) {
  for (const auto& key : all_keys()) {
    if (!key.unset_allowed) continue;
    if (const auto* number = std::get_if<double Config::*>(&key.field)) {
      const double value = cfg.**number;
      if ((given.contains(key.name) || value != -1) && !(value > 0))
        fail(key.name, "must be > 0 (or null for the preset's value), got " + format_double(value));
      continue;
    }
    const int64_t value = cfg.*std::get<int64_t Config::*>(key.field);
    const int64_t lowest = std::string_view(key.name) == "warmup_steps" ? 0 : 1;  // 0: no warmup
    if (given.contains(key.name) || value != -1) require_at_least(key.name, value, lowest);
  }
}

// value in [0, 1], or in [0, 1) when one_allowed is false.
void require_fraction(const char* key, double value, bool one_allowed) {
  if (value < 0 || value > 1 || (!one_allowed && value == 1))
    fail(key, std::string("must be in [0, 1") + (one_allowed ? "]" : ")") + ", got " +
                  format_double(value));
}

void require_one_of(const char* key, const std::string& value, const char* first,
                    const char* second, const char* third = nullptr) {
  if (value == first || value == second || (third && value == third)) return;
  std::string choices = third ? std::string(first) + ", " + second + " or " + third
                              : std::string(first) + " or " + second;
  fail(key, "expected " + choices + ", got '" + value + "'");
}

void validate_run(const Config& cfg) {
  if (cfg.run_name.empty()) fail("run_name", "must not be empty");
  if (cfg.run_name.find('/') != std::string::npos || cfg.run_name == "." || cfg.run_name == "..")
    fail("run_name", "must be a plain directory name, got '" + cfg.run_name + "'");
  if (cfg.base_output_directory.empty()) fail("base_output_directory", "must not be empty");
  if (cfg.steps != -1 && cfg.num_epochs != -1)
    fail("steps", "give steps or num_epochs, not both (set the other to null)");
  require_one_of("hardware", cfg.hardware, "cpu", "gpu", "auto");
  require_at_least("seed", cfg.seed, 0);
  if (cfg.collective_timeout_s < 0)
    fail("collective_timeout_s",
         "must be >= 0 (seconds; 0 = no deadline), got " + format_double(cfg.collective_timeout_s));
}

void validate_batch(const Config& cfg) {
  const bool has_global = cfg.global_batch_size != -1;
  const bool has_per_device = cfg.per_device_batch_size != -1;
  if (has_global && has_per_device)
    fail("global_batch_size", "give global_batch_size or per_device_batch_size, not both");
  if (!has_global && !has_per_device)
    fail("global_batch_size", "not set (give global_batch_size or per_device_batch_size)");
  require_at_least("gradient_accumulation_steps", cfg.gradient_accumulation_steps, 1);
  // the world is not known here: resolve_batch checks that cp divides it
  if (const std::string problem = context_parallelism_problem(cfg.context_parallelism, cfg.max_target_length, 0);
      !problem.empty())
    fail("context_parallelism", problem);
  require_at_least("max_target_length", cfg.max_target_length, 1);
}

void validate_data(const Config& cfg) {
  if (cfg.train_files.empty())
    fail("train_files", "not set (give a data file, e.g. train_files=data/train.h5, or a list)");
  for (const auto& path : cfg.train_files)
    if (path.empty()) fail("train_files", "contains an empty path");
  for (const auto& path : cfg.eval_files)
    if (path.empty()) fail("eval_files", "contains an empty path");
  require_at_least("data_shuffle_seed", cfg.data_shuffle_seed, 0);
  require_at_least("eval_interval", cfg.eval_interval, 0);
}

void validate_model(const Config& cfg) {
  require_one_of("weight_dtype", cfg.weight_dtype, "float32", "bfloat16");
  require_one_of("dtype", cfg.dtype, "float32", "bfloat16");
  if (!cfg.tie_word_embeddings.empty())
    require_one_of("tie_word_embeddings", cfg.tie_word_embeddings, "true", "false");
  // model_dims checks: the preset exists, explicit dims >= 1, num_heads divides emb_dim, a Hugging Face
  // directory's config.json (all its problems at once).
  ModelDims dims;
  try {
    dims = model_dims(cfg);
  } catch (const UserError& e) {
    for (const auto& m : e.messages()) add(m);
    return;
  }
  if (cfg.max_target_length > dims.maxT)
    fail("max_target_length", std::to_string(cfg.max_target_length) +
                                  " exceeds the model's position table (max_position_embeddings=" +
                                  std::to_string(dims.maxT) + ")");
}

void validate_optimiser(const Config& cfg) {
  if (cfg.learning_rate < 0)
    fail("learning_rate", "must be >= 0, got " + format_double(cfg.learning_rate));
  require_fraction("warmup_steps_fraction", cfg.warmup_steps_fraction, true);
  require_one_of("lr_schedule", cfg.lr_schedule, "cosine", "linear", "constant");
  require_one_of("lr_schedule_convention", cfg.lr_schedule_convention, "sft-dp", "transformers");
  require_fraction("learning_rate_final_fraction", cfg.learning_rate_final_fraction, true);
  require_fraction("adam_b1", cfg.adam_b1, false);
  require_fraction("adam_b2", cfg.adam_b2, false);
  if (!(cfg.adam_eps > 0)) fail("adam_eps", "must be > 0, got " + format_double(cfg.adam_eps));
  if (cfg.adam_weight_decay < 0)
    fail("adam_weight_decay", "must be >= 0, got " + format_double(cfg.adam_weight_decay));
  if (cfg.gradient_clipping_threshold < 0)
    fail("gradient_clipping_threshold",
         "must be >= 0 (0 = off), got " + format_double(cfg.gradient_clipping_threshold));
  if (cfg.zero_stage < 0 || cfg.zero_stage > 3)
    fail("zero_stage", "must be 0, 1, 2 or 3, got " + std::to_string(cfg.zero_stage));
  if (cfg.allreduce_overlap && cfg.zero_stage != 0)
    fail("allreduce_overlap", "overlaps the zero_stage 0 allreduce only; it cannot be combined with zero_stage: " +
         std::to_string(cfg.zero_stage) + " (stages 2 and 3 always overlap their reduce-scatters with backward; "
         "set one of them to its default)");
}

// Which modules exist is the model's to say (model::lora_spec, at start-up); the ranges are here.
void validate_lora(const Config& cfg) {
  if (cfg.lora_rank < 0) {  // the checks below would only repeat it ("lora_rank is 0")
    fail("lora_rank", "must be >= 0 (0 = full fine-tuning), got " + std::to_string(cfg.lora_rank));
    return;
  }
  if (!(cfg.lora_alpha > 0)) fail("lora_alpha", "must be > 0, got " + format_double(cfg.lora_alpha));
  if (!(cfg.lora_dropout >= 0 && cfg.lora_dropout < 1))
    fail("lora_dropout", "must be in [0, 1), got " + format_double(cfg.lora_dropout));
  if (cfg.lora_rank > 0) return;
  if (!cfg.lora_target_modules.empty()) fail("lora_target_modules", "is set but lora_rank is 0 (no LoRA)");
  if (!cfg.load_adapter_path.empty()) fail("load_adapter_path", "is set but lora_rank is 0 (no LoRA)");
  if (cfg.lora_dropout > 0) fail("lora_dropout", "is set but lora_rank is 0 (no LoRA)");
}

void validate_checkpoints_and_logging(const Config& cfg) {
  require_at_least("checkpoint_period", cfg.checkpoint_period, 0);
  require_at_least("keep_checkpoints", cfg.keep_checkpoints, 0);
  if (!cfg.async_checkpointing.empty())
    require_one_of("async_checkpointing", cfg.async_checkpointing, "true", "false");
  if (!cfg.hf_export_tokenizer.empty() && !cfg.hf_export)
    fail("hf_export_tokenizer", "is set but hf_export is false (set hf_export: true)");
  require_at_least("log_period", cfg.log_period, 1);
  require_at_least("param_check_period", cfg.param_check_period, 0);
}

}  // namespace

void validate(const Config& cfg, const GivenKeys& given) {
  std::vector<std::string> found;
  problems = &found;
  validate_unsettable_keys(cfg, given);
  validate_run(cfg);
  validate_batch(cfg);
  validate_data(cfg);
  validate_model(cfg);
  validate_lora(cfg);
  validate_optimiser(cfg);
  validate_checkpoints_and_logging(cfg);
  problems = nullptr;
  if (!found.empty()) throw UserError(found);
}

}  // namespace sftdp::config::detail
