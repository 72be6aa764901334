// src/config/resume_changes.cpp — what a resumed run changed against the config its checkpoint
// stores (SPEC §5 "Resume"): every key whose value differs, for the log, and the keys that cannot
// change, as a UserError: the model (compared as resolved, so a preset written out as explicit
// dimensions is no change of model), LoRA's rank, alpha and target modules (the adapters the
// checkpoint holds), and the data order (the cursor counts steps of that permutation).
#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/keys.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {
namespace {

// The checkpoint's config read leniently: keys this build does not know (or no longer reads) are
// skipped, so are values it cannot parse; `named` is what it could compare.
struct Stored {
  Config cfg;
  std::set<std::string, std::less<>> named;
};

Stored read_stored(const std::string& yaml) {
  Stored s;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception&) {
    return s;
  }
  if (!root.IsMap()) return s;
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) continue;
    const detail::KeySpec* key = detail::find_key(entry.first.Scalar());
    if (!key) continue;
    try {
      detail::set_from_yaml(s.cfg, *key, entry.second);
      s.named.insert(key->name);
    } catch (const UserError&) {
    }
  }
  return s;
}

std::optional<ModelDims> dims_of(const Config& cfg) {
  try {
    return model_dims(cfg);
  } catch (const UserError&) {
    return std::nullopt;  // e.g. a Hugging Face directory the checkpoint's run read is gone
  }
}

// One resolved model property, named by the key that sets it.
struct ModelProperty {
  const char* key;
  std::string (*value)(const ModelDims&);
};

std::string number(double x) { return detail::format_double(x); }

const ModelProperty kModelProperties[] = {
    {"num_decoder_layers", [](const ModelDims& d) { return std::to_string(d.L); }},
    {"num_heads", [](const ModelDims& d) { return std::to_string(d.NH); }},
    {"emb_dim", [](const ModelDims& d) { return std::to_string(d.C); }},
    {"mlp_dim", [](const ModelDims& d) { return std::to_string(d.F); }},
    {"vocab_size", [](const ModelDims& d) { return std::to_string(d.V); }},
    {"max_position_embeddings", [](const ModelDims& d) { return std::to_string(d.maxT); }},
    {"decoder_block", [](const ModelDims& d) { return block_name(d); }},
    {"num_kv_heads", [](const ModelDims& d) { return std::to_string(d.kv_heads()); }},
    {"head_dim", [](const ModelDims& d) { return std::to_string(d.head_size()); }},
    {"rms_norm_eps", [](const ModelDims& d) { return number(d.norm_eps); }},
    {"rope_theta", [](const ModelDims& d) { return number(d.rope_theta); }},
    {"tie_word_embeddings", [](const ModelDims& d) { return std::string(d.tied ? "true" : "false"); }},
    {"model_name", [](const ModelDims& d) {  // only the llama-3.2-1b preset (or a config.json) scales RoPE
       const RopeScaling& r = d.rope_scaling;
       return r.llama3 ? "llama3 rope scaling (factor " + number(r.factor) + ")" : std::string("no rope scaling");
     }},
};

// Keys compared by value that cannot change; why, for the error.
struct FrozenKey {
  const char* key;
  const char* why;
};
const FrozenKey kFrozenKeys[] = {
    {"lora_rank", "the checkpoint holds adapters of that rank (or none)"},
    {"lora_alpha", "the checkpoint's adapters were trained at that scale"},
    {"lora_target_modules", "the checkpoint holds adapters of those modules"},
    {"enable_data_shuffling", "the data cursor counts steps of that order"},
    {"data_shuffle_seed", "the data cursor counts steps of that permutation"},
};

[[noreturn]] void refuse(const std::string& key, const std::string& before, const std::string& after,
                         const std::string& checkpoint, const std::string& why) {
  throw UserError(key + ": cannot change when resuming: " + checkpoint + " was trained with " + before +
                  ", this run has " + after + " (" + why + "); set it back, or start a new run under another "
                  "run_name");
}

}  // namespace

std::vector<KeyChange> resume_changes(const Config& now, const std::string& checkpoint_yaml,
                                      const std::string& checkpoint) {
  const Stored stored = read_stored(checkpoint_yaml);
  const std::optional<ModelDims> before = dims_of(stored.cfg), after = dims_of(now);
  if (before && after) {
    for (const auto& p : kModelProperties)
      if (p.value(*before) != p.value(*after))
        refuse(p.key, p.value(*before), p.value(*after), checkpoint, "its tensors are that model's");
  }
  std::vector<KeyChange> changes;
  for (const auto& key : detail::all_keys()) {
    if (!stored.named.contains(key.name)) continue;  // the checkpoint predates the key
    KeyChange c{key.name, detail::format_value(stored.cfg, key), detail::format_value(now, key)};
    if (c.before == c.after) continue;
    for (const auto& frozen : kFrozenKeys)
      if (c.key == frozen.key) refuse(c.key, c.before, c.after, checkpoint, frozen.why);
    if (!(before && after))  // the model cannot be resolved on both sides: its keys as written
      for (const auto& p : kModelProperties)
        if (c.key == p.key) refuse(c.key, c.before, c.after, checkpoint, "its tensors are that model's");
    changes.push_back(std::move(c));
  }
  return changes;
}

}  // namespace sftdp::config
