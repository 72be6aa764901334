// src/config/presets.cpp — model presets (GPT-2 and Llama-family sizes) and the dimensions a
// config resolves to. An explicit num_decoder_layers/num_heads/emb_dim/mlp_dim/vocab_size/
// max_position_embeddings/decoder_block/num_kv_heads/head_dim/rms_norm_eps/rope_theta/
// tie_word_embeddings overrides only itself. With model_name empty every dimension comes from the
// config: mlp_dim defaults to 4·emb_dim, max_position_embeddings to max_target_length, the block
// to gpt2. A Hugging Face directory in load_parameters_path gives everything (its config.json).
#include <climits>
#include <string>

#include "hf/hf_dir.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {

std::string block_name(const ModelDims& d) {
  if (d.block == Block::kGpt2) return "gpt2";
  if (d.qk_norm) return "qwen3";
  if (d.qkv_bias) return "qwen2";
  return "llama";
}

namespace {

struct Preset {
  const char* name;
  ModelDims dims;
};

ModelDims gpt2(int L, int NH, int C, int F, int V, int maxT) { return {L, NH, C, F, V, maxT}; }
ModelDims llama(int L, int NH, int KVH, int HS, int C, int F, int V, int maxT, double eps, double theta) {
  ModelDims d{L, NH, C, F, V, maxT};
  d.block = Block::kLlama, d.KVH = KVH, d.HS = HS, d.norm_eps = eps, d.rope_theta = theta;
  return d;
}
ModelDims qwen2(ModelDims d) { return d.qkv_bias = true, d; }
ModelDims qwen3(ModelDims d) { return d.qk_norm = true, d; }
ModelDims untied(ModelDims d) { return d.tied = false, d; }
ModelDims llama3_rope(ModelDims d, double factor, double low, double high, int original) {
  d.rope_scaling = {true, factor, low, high, original};
  return d;
}

// The -tiny presets' vocabulary is the byte tokenizer's 256 bytes plus 8 special ids. The
// Llama-family presets are the Hugging Face models' config.json values; up to qwen3-4b they tie
// their head to the embedding, llama-3.1-8b and qwen3-8b do not.
const Preset kPresets[] = {
    {"gpt2-tiny", gpt2(2, 4, 64, 256, 264, 256)},
    {"gpt2-124m", gpt2(12, 12, 768, 3072, 50257, 1024)},
    {"gpt2-350m", gpt2(24, 16, 1024, 4096, 50257, 1024)},
    {"gpt2-774m", gpt2(36, 20, 1280, 5120, 50257, 1024)},
    {"llama-tiny", llama(2, 4, 2, 16, 64, 176, 264, 256, 1e-5, 10000)},
    {"smollm2-135m", llama(30, 9, 3, 64, 576, 1536, 49152, 8192, 1e-5, 100000)},
    {"smollm2-360m", llama(32, 15, 5, 64, 960, 2560, 49152, 8192, 1e-5, 100000)},
    {"qwen2.5-0.5b", qwen2(llama(24, 14, 2, 64, 896, 4864, 151936, 32768, 1e-6, 1000000))},
    {"qwen3-0.6b", qwen3(llama(28, 16, 8, 128, 1024, 3072, 151936, 40960, 1e-6, 1000000))},
    {"llama-3.2-1b", llama3_rope(llama(16, 32, 8, 64, 2048, 8192, 128256, 131072, 1e-5, 500000), 32, 1, 4, 8192)},
    {"qwen3-1.7b", qwen3(llama(28, 16, 8, 128, 2048, 6144, 151936, 40960, 1e-6, 1000000))},
    {"qwen3-4b", qwen3(llama(36, 32, 8, 128, 2560, 9728, 151936, 40960, 1e-6, 1000000))},
    {"llama-3.1-8b",
     untied(llama3_rope(llama(32, 32, 8, 128, 4096, 14336, 128256, 131072, 1e-5, 500000), 8, 1, 4, 8192))},
    {"qwen3-8b", untied(qwen3(llama(36, 32, 8, 128, 4096, 12288, 151936, 40960, 1e-6, 1000000)))},
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

// decoder_block sets the family and its two switches; "" keeps the base's.
void apply_block(ModelDims& d, const std::string& block) {
  if (block.empty()) return;
  if (block == "gpt2") d.block = Block::kGpt2, d.qkv_bias = d.qk_norm = false;
  else if (block == "llama") d.block = Block::kLlama, d.qkv_bias = d.qk_norm = false;
  else if (block == "qwen2") d.block = Block::kLlama, d.qkv_bias = true, d.qk_norm = false;
  else if (block == "qwen3") d.block = Block::kLlama, d.qkv_bias = false, d.qk_norm = true;
  else throw UserError("decoder_block: expected gpt2, llama, qwen2 or qwen3, got '" + block + "'");
}

// Relations every resolved model must satisfy, named by the key to change.
void check_dims(const ModelDims& d) {
  if (d.block == Block::kGpt2) {
    if (d.C % d.NH != 0)
      throw UserError("num_heads: " + std::to_string(d.NH) + " does not divide emb_dim (" +
                      std::to_string(d.C) + ")");
    if (d.KVH != 0 && d.KVH != d.NH)
      throw UserError("num_kv_heads: GPT-2 blocks have one k/v head per query head (leave it out "
                      "or set decoder_block: llama)");
    if (d.HS != 0 && d.HS * d.NH != d.C)
      throw UserError("head_dim: GPT-2 blocks use emb_dim / num_heads (leave it out)");
    if (!d.tied)
      throw UserError("tie_word_embeddings: GPT-2 blocks always tie the LM head to wte");
    return;
  }
  if (d.HS == 0 && d.C % d.NH != 0)
    throw UserError("num_heads: " + std::to_string(d.NH) + " does not divide emb_dim (" +
                    std::to_string(d.C) + "); set head_dim");
  if (d.head_size() % 2 != 0)
    throw UserError("head_dim: RoPE needs an even head size, got " + std::to_string(d.head_size()));
  if (d.NH % d.kv_heads() != 0)
    throw UserError("num_kv_heads: " + std::to_string(d.kv_heads()) + " does not divide num_heads (" +
                    std::to_string(d.NH) + ")");
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

namespace {

// load_parameters_path is a Hugging Face directory: its config.json gives every dimension
// (model_name is not used); an explicit model key must agree with it.
ModelDims hf_model_dims(const Config& cfg) {
  ModelDims hf = hf::read_hf_dims(cfg.load_parameters_path);
  const std::string file = cfg.load_parameters_path + "/config.json";
  auto disagree = [&](const char* key, const std::string& given, const std::string& value) {
    throw UserError(std::string(key) + ": " + given + " disagrees with " + value + " in " + file +
                    " (leave " + key + " out to use it)");
  };
  // The config.json key of each dimension, by family, for "disagrees with n_embd = 32".
  const bool gpt2 = hf.block == Block::kGpt2;
  auto hf_key = [&](const char* gpt2_key, const char* llama_key) { return gpt2 ? gpt2_key : llama_key; };
  auto agree = [&](const char* key, int64_t explicit_value, int value, const char* json_key) {
    if (explicit_value != -1 && explicit_value != value)
      disagree(key, std::to_string(explicit_value), std::string(json_key) + " = " + std::to_string(value));
  };
  agree("num_decoder_layers", cfg.num_decoder_layers, hf.L, hf_key("n_layer", "num_hidden_layers"));
  agree("num_heads", cfg.num_heads, hf.NH, hf_key("n_head", "num_attention_heads"));
  agree("emb_dim", cfg.emb_dim, hf.C, hf_key("n_embd", "hidden_size"));
  agree("mlp_dim", cfg.mlp_dim, hf.F, hf_key("n_inner", "intermediate_size"));
  agree("vocab_size", cfg.vocab_size, hf.V, "vocab_size");
  agree("max_position_embeddings", cfg.max_position_embeddings, hf.maxT,
        hf_key("n_positions", "max_position_embeddings"));
  agree("num_kv_heads", cfg.num_kv_heads, hf.kv_heads(), hf_key("n_head", "num_key_value_heads"));
  agree("head_dim", cfg.head_dim, hf.head_size(), hf_key("n_embd / n_head", "head_dim"));
  if (!cfg.decoder_block.empty() && cfg.decoder_block != block_name(hf))
    disagree("decoder_block", cfg.decoder_block, "model_type = " + block_name(hf));
  if (!cfg.tie_word_embeddings.empty() && (cfg.tie_word_embeddings == "true") != hf.tied)
    disagree("tie_word_embeddings", cfg.tie_word_embeddings,
             std::string("tie_word_embeddings = ") + (hf.tied ? "true" : "false"));
  if (cfg.rms_norm_eps != -1 && cfg.rms_norm_eps != hf.norm_eps)
    disagree("rms_norm_eps", std::to_string(cfg.rms_norm_eps), "rms_norm_eps = " + std::to_string(hf.norm_eps));
  if (cfg.rope_theta != -1 && cfg.rope_theta != hf.rope_theta)
    disagree("rope_theta", std::to_string(cfg.rope_theta), "rope_theta = " + std::to_string(hf.rope_theta));
  check_dims(hf);
  return hf;
}

// The preset model_name names; nullptr for "". An unknown name is an error even where a Hugging Face
// directory gives the model, so that a Hub id there is not silently passed over.
const Preset* find_preset(const Config& cfg, bool hf_dir) {
  if (cfg.model_name.empty()) return nullptr;
  for (const auto& p : kPresets)
    if (cfg.model_name == p.name) return &p;
  std::string hint;
  if (hf_dir)
    hint = "; load_parameters_path " + cfg.load_parameters_path + " gives the model (its config.json): leave "
           "model_name out or set it to \"\"";
  else if (cfg.model_name.find('/') != std::string::npos)
    hint = "; a Hugging Face model id is not downloaded: download the model and set load_parameters_path to its "
           "directory";
  throw UserError("model_name: unknown preset '" + cfg.model_name + "' (known: " + joined_preset_names() + ")" + hint);
}

// "num_decoder_layers 24 vs 28, emb_dim 896 vs 1024": where a preset's shape differs from d's.
std::string shape_differences(const ModelDims& d, const ModelDims& preset) {
  std::string out;
  auto differ = [&](const char* key, const std::string& mine, const std::string& theirs) {
    if (mine != theirs) out += (out.empty() ? "" : ", ") + std::string(key) + " " + mine + " vs " + theirs;
  };
  auto i = [](int x) { return std::to_string(x); };
  differ("decoder_block", block_name(d), block_name(preset));
  differ("num_decoder_layers", i(d.L), i(preset.L));
  differ("num_heads", i(d.NH), i(preset.NH));
  differ("num_kv_heads", i(d.kv_heads()), i(preset.kv_heads()));
  differ("head_dim", i(d.head_size()), i(preset.head_size()));
  differ("emb_dim", i(d.C), i(preset.C));
  differ("mlp_dim", i(d.F), i(preset.F));
  differ("vocab_size", i(d.V), i(preset.V));
  differ("max_position_embeddings", i(d.maxT), i(preset.maxT));
  differ("tie_word_embeddings", d.tied ? "true" : "false", preset.tied ? "true" : "false");
  return out;
}

}  // namespace

std::string hf_model_note(const Config& cfg) {
  if (!hf::is_hf_dir(cfg.load_parameters_path)) return "";
  const ModelDims d = model_dims(cfg);
  std::string note = "model: " + block_name(d) + " from " + cfg.load_parameters_path + "/config.json (" +
                     std::to_string(d.L) + " layers, emb_dim " + std::to_string(d.C) + ", vocab_size " +
                     std::to_string(d.V) + "): the directory's config wins";
  const Preset* preset = find_preset(cfg, true);
  if (!preset) return note;
  const std::string differences = shape_differences(d, preset->dims);
  if (differences.empty()) return note + "; model_name " + cfg.model_name + " is that shape";
  return note + "; model_name " + cfg.model_name + " is not used (its preset differs: " + differences + ")";
}

ModelDims model_dims(const Config& cfg) {
  const bool hf_dir = hf::is_hf_dir(cfg.load_parameters_path);
  const Preset* preset = find_preset(cfg, hf_dir);
  if (hf_dir) return hf_model_dims(cfg);
  ModelDims base{};  // all zero: "no preset", every dimension must be explicit
  if (preset) base = preset->dims;
  ModelDims d = base;
  d.L = dimension("num_decoder_layers", cfg.num_decoder_layers, base.L);
  d.NH = dimension("num_heads", cfg.num_heads, base.NH);
  d.C = dimension("emb_dim", cfg.emb_dim, base.C);
  d.V = dimension("vocab_size", cfg.vocab_size, base.V);
  const int64_t default_mlp = base.F ? base.F : 4 * int64_t{d.C};
  d.F = dimension("mlp_dim", cfg.mlp_dim, default_mlp <= INT_MAX ? int(default_mlp) : 0);
  const int64_t default_max_t = base.maxT ? base.maxT : cfg.max_target_length;
  d.maxT = dimension("max_position_embeddings", cfg.max_position_embeddings,
                     default_max_t >= 1 && default_max_t <= INT_MAX ? int(default_max_t) : 0);
  apply_block(d, cfg.decoder_block);
  if (cfg.num_kv_heads != -1) d.KVH = dimension("num_kv_heads", cfg.num_kv_heads, 0);
  if (cfg.head_dim != -1) d.HS = dimension("head_dim", cfg.head_dim, 0);
  if (cfg.rms_norm_eps != -1) d.norm_eps = cfg.rms_norm_eps;
  if (cfg.rope_theta != -1) d.rope_theta = cfg.rope_theta;
  if (!cfg.tie_word_embeddings.empty()) d.tied = cfg.tie_word_embeddings == "true";
  check_dims(d);
  return d;
}

}  // namespace sftdp::config
