// src/config/presets.cpp — GPT-2 model presets and the dimensions a config resolves to.
// An explicit num_decoder_layers/num_heads/emb_dim/mlp_dim/vocab_size/max_position_embeddings
// overrides only itself. With model_name empty every dimension comes from the config: mlp_dim
// defaults to 4·emb_dim and max_position_embeddings to max_target_length.
#include <climits>

#include "hf/gpt2_hf.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {
namespace {

struct Preset {
  const char* name;
  ModelDims dims;  // L, NH, C, F, V, maxT
};

// gpt2-tiny's vocabulary is the byte tokenizer's 256 bytes plus 8 special ids.
constexpr Preset kPresets[] = {
    {"gpt2-tiny", {2, 4, 64, 256, 264, 256}},
    {"gpt2-124m", {12, 12, 768, 3072, 50257, 1024}},
    {"gpt2-350m", {24, 16, 1024, 4096, 50257, 1024}},
    {"gpt2-774m", {36, 20, 1280, 5120, 50257, 1024}},
};

std::string joined_preset_names() {
  std::string out;
  for (const auto& p : kPresets) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

// One dimension: the explicit value when set (-1 = unset), else the fallback. Explicit values
// must be whole numbers in [1, INT_MAX]; a missing fallback (0) means the key is required.
int dimension(const char* key, int64_t explicit_value, int fallback) {
  if (explicit_value == -1) {
    if (fallback <= 0)
      throw UserError(std::string(key) + ": required when model_name is empty (or pick a "
                      "preset: " + joined_preset_names() + ")");
    return fallback;
  }
  if (explicit_value < 1)
    throw UserError(std::string(key) + ": must be >= 1, got " + std::to_string(explicit_value));
  if (explicit_value > INT_MAX)
    throw UserError(std::string(key) + ": " + std::to_string(explicit_value) + " is too large");
  return static_cast<int>(explicit_value);
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

// load_parameters_path is a Hugging Face directory: its config.json gives every dimension
// (model_name is not used); an explicit dimension key must agree with it.
ModelDims hf_model_dims(const Config& cfg) {
  const ModelDims hf = hf::read_hf_dims(cfg.load_parameters_path);
  const std::string file = cfg.load_parameters_path + "/config.json";
  auto agree = [&](const char* key, int64_t explicit_value, int value, const char* hf_key) {
    if (explicit_value != -1 && explicit_value != value)
      throw UserError(std::string(key) + ": " + std::to_string(explicit_value) + " disagrees with " + hf_key +
                      " = " + std::to_string(value) + " in " + file + " (leave " + key + " out to use it)");
  };
  agree("num_decoder_layers", cfg.num_decoder_layers, hf.L, "n_layer");
  agree("num_heads", cfg.num_heads, hf.NH, "n_head");
  agree("emb_dim", cfg.emb_dim, hf.C, "n_embd");
  agree("mlp_dim", cfg.mlp_dim, hf.F, "n_inner");
  agree("vocab_size", cfg.vocab_size, hf.V, "vocab_size");
  agree("max_position_embeddings", cfg.max_position_embeddings, hf.maxT, "n_positions");
  return hf;
}

ModelDims model_dims(const Config& cfg) {
  if (hf::is_hf_dir(cfg.load_parameters_path)) return hf_model_dims(cfg);
  ModelDims base{};  // all zero: "no preset", every dimension must be explicit
  if (!cfg.model_name.empty()) {
    const Preset* found = nullptr;
    for (const auto& p : kPresets)
      if (cfg.model_name == p.name) found = &p;
    if (!found)
      throw UserError("model_name: unknown preset '" + cfg.model_name +
                      "' (known: " + joined_preset_names() + ")");
    base = found->dims;
  }
  ModelDims d;
  d.L = dimension("num_decoder_layers", cfg.num_decoder_layers, base.L);
  d.NH = dimension("num_heads", cfg.num_heads, base.NH);
  d.C = dimension("emb_dim", cfg.emb_dim, base.C);
  d.V = dimension("vocab_size", cfg.vocab_size, base.V);
  const int64_t default_mlp = base.F ? base.F : 4 * int64_t{d.C};
  d.F = dimension("mlp_dim", cfg.mlp_dim, default_mlp <= INT_MAX ? int(default_mlp) : 0);
  const int64_t default_max_t = base.maxT ? base.maxT : cfg.max_target_length;
  d.maxT = dimension("max_position_embeddings", cfg.max_position_embeddings,
                     default_max_t >= 1 && default_max_t <= INT_MAX ? int(default_max_t) : 0);
  if (d.C % d.NH != 0)
    throw UserError("num_heads: " + std::to_string(d.NH) + " does not divide emb_dim (" +
                    std::to_string(d.C) + ")");
  return d;
}

}  // namespace sftdp::config
