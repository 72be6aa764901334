// src/hf/config_json.h — every config.json key of the supported model types (gpt2, llama, mistral,
// qwen2, qwen3), as transformers 4.4x and >= 5 write them, accounted for (SPEC §5 "config.json, key by
// key"): read (with its meaning), irrelevant to training (named), refused unless at its default (one
// error naming key and value), or noted (accepted, and one start-up line says what sft-dp does instead).
// A key the table does not know is named in one warning line. Also RoPE as both spellings give it: the
// top-level rope_theta/rope_scaling of transformers < 5 and the rope_parameters dict of >= 5.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sftdp/config.h"

namespace sftdp::hf {

enum class KeyUse {
  kRead,         // sft-dp reads it (the family reader checks its value)
  kIrrelevant,   // has no bearing on training (generation defaults, bookkeeping, output flags)
  kDefaultOnly,  // a feature sft-dp lacks: accepted only at `accepted`, else an error naming key and value
  kNoted,        // accepted; a value other than `accepted` is named in one `config.json:` line at start
};

struct ConfigJsonKey {
  const char* name;
  KeyUse use;
  const char* meaning;   // what it is, or why it does not matter / what sft-dp does instead
  const char* accepted;  // kDefaultOnly, kNoted: a JSON array of the values taken as they are ("" otherwise)
};

// The table for config.json's model_type (the keys every config class shares, then the family's).
// type must be one of gpt2, llama, mistral, qwen2, qwen3.
std::vector<ConfigJsonKey> config_json_keys(const std::string& model_type);

// Every kDefaultOnly key of j at a value outside its `accepted` list, and (Qwen2/Qwen3) a layer_types
// entry other than "full_attention": UserError("<file>: <key> <value> is not supported (<meaning>)"),
// one line per key when there are several.
void refuse_unsupported_keys(const nlohmann::json& j, const std::string& file, const std::string& model_type);

// RoPE as transformers reads it. >= 5: the rope_scaling dict if non-empty, else rope_parameters; its
// rope_theta, else the top-level rope_theta, else 10000; rope_type (or type), else "default"; llama3's
// original_max_position_embeddings, else the top-level one, else max_position_embeddings (maxT).
// < 5: the top-level rope_theta and rope_scaling. A file holding both spellings must mean the same to
// both readers (else UserError naming both). rope_type other than default/llama3, a nested
// (per-layer-type) rope_parameters and partial_rotary_factor != 1 are refused.
struct Rope {
  double theta = 10000;
  config::RopeScaling scaling{};
};
Rope read_rope(const nlohmann::json& j, const std::string& file, int maxT);

// The start-up lines about j (each begins "config.json: "): the kNoted keys away from their accepted
// value, and one line naming every key (and rope dict field) the table does not know. Empty when there
// is nothing to say.
std::vector<std::string> config_json_notes(const nlohmann::json& j, const std::string& model_type);

}  // namespace sftdp::hf
