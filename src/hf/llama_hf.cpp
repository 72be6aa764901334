// src/hf/llama_hf.cpp — see llama_hf.h: Llama-family config.json keys <-> ModelDims, and the
// HF <-> SPEC tensor mapping of llama_names.h applied to whole directories.
#include "hf/llama_hf.h"

#include <climits>
#include <cstring>

#include "hf/config_json.h"
#include "hf/llama_names.h"
#include "sftdp/check.h"

namespace sftdp::hf {
namespace {

using json = nlohmann::json;

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// A positive integer key; absent (or null) = fallback, and fallback < 0 means "required".
int int_key(const json& j, const std::string& file, const char* key, int fallback = -1) {
  if (!present(j, key)) {
    if (fallback < 0) throw UserError(file + ": " + key + " is missing");
    return fallback;
  }
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > INT_MAX)
    throw UserError(file + ": " + key + " must be a positive integer, got " + v.dump());
  return v.get<int>();
}

double positive_number(const json& j, const std::string& file, const char* key, double fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j[key];
  if (!v.is_number() || !(v.get<double>() > 0))
    throw UserError(file + ": " + key + " must be a positive number, got " + v.dump());
  return v.get<double>();
}

bool bool_key(const json& j, const std::string& file, const char* key, bool fallback) {
  if (!present(j, key)) return fallback;
  if (!j[key].is_boolean()) throw UserError(file + ": " + key + " must be true or false, got " + j[key].dump());
  return j[key].get<bool>();
}

}  // namespace

bool is_llama_family(const std::string& t) {
  return t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3";
}

config::ModelDims read_llama_dims(const json& j, const std::string& file, const std::string& type) {
  config::ModelDims d;
  d.block = config::Block::kLlama;
  d.qkv_bias = type == "qwen2";
  d.qk_norm = type == "qwen3";
  d.L = int_key(j, file, "num_hidden_layers");
  d.NH = int_key(j, file, "num_attention_heads");
  d.C = int_key(j, file, "hidden_size");
  d.F = int_key(j, file, "intermediate_size");
  d.V = int_key(j, file, "vocab_size");
  // The transformers 4.44 config classes' defaults (Qwen3Config: later releases).
  const int default_max_t = type == "llama" ? 2048 : type == "mistral" ? 131072 : 32768;
  d.maxT = int_key(j, file, "max_position_embeddings", default_max_t);
  d.KVH = int_key(j, file, "num_key_value_heads", d.NH);
  if (type == "qwen3") {
    d.HS = int_key(j, file, "head_dim", 128);
  } else {
    if (!present(j, "head_dim") && d.C % d.NH != 0)
      throw UserError(file + ": num_attention_heads " + std::to_string(d.NH) + " does not divide hidden_size " +
                      std::to_string(d.C) + " (and there is no head_dim)");
    d.HS = int_key(j, file, "head_dim", d.C / std::max(d.NH, 1));
    if (type == "qwen2" && d.HS * d.NH != d.C)
      throw UserError(file + ": head_dim " + std::to_string(d.HS) +
                      " must be hidden_size / num_attention_heads for qwen2 (transformers ignores it)");
  }
  if (d.HS % 2 != 0) throw UserError(file + ": head_dim " + std::to_string(d.HS) + " must be even (RoPE)");
  if (d.NH % d.KVH != 0)
    throw UserError(file + ": num_key_value_heads " + std::to_string(d.KVH) + " does not divide num_attention_heads " +
                    std::to_string(d.NH));
  d.norm_eps = positive_number(j, file, "rms_norm_eps", 1e-6);
  const Rope rope = read_rope(j, file, d.maxT);  // either spelling (config_json.h)
  d.rope_theta = rope.theta;
  d.rope_scaling = rope.scaling;
  d.tied = bool_key(j, file, "tie_word_embeddings", false);  // every one of these classes defaults to untied
  const json act = present(j, "hidden_act") ? j["hidden_act"] : json("silu");
  if (act != "silu")
    throw UserError(file + ": hidden_act " + act.dump() + " is not supported (the model's MLP is SwiGLU: silu)");
  // attention_bias, mlp_bias, use_sliding_window, layer_types, ...: refuse_unsupported_keys (hf_dir.cpp).
  if (type == "mistral" && !(j.contains("sliding_window") && j["sliding_window"].is_null()))
    throw UserError(file + ": sliding_window " +
                    (j.contains("sliding_window") ? j["sliding_window"].dump() : "(absent: 4096)") +
                    " is not supported: a mistral model loads only with sliding_window null");
  return d;
}

void load_llama_params(const std::string& dir, const config::ModelDims& d, const model::ParamLayout& layout,
                       std::vector<float>& params) {
  TensorMap tensors = read_safetensors_dir(dir);
  const std::string prefix = tensors.count("model.embed_tokens.weight") ? "model." : "";
  const std::string source = safetensors_dir_source(dir);
  const std::string family = config::block_name(d);
  params.assign(layout.total, 0.0f);
  for (const auto& p : layout.tensors) {
    const int64_t rows = p.shape.at(0), cols = rows ? int64_t(p.numel) / rows : 0;
    int64_t row = 0;
    for (const HfPart& part : llama_hf_parts(p.name, d, rows)) {
      const std::string name = (part.prefixed ? prefix : "") + part.name;
      auto it = tensors.find(name);
      if (it == tensors.end()) {
        std::string hint;
        if (p.name == "lm_head.weight") hint = "; config.json has tie_word_embeddings false";
        throw UserError(source + ": tensor " + name + " is missing (needed for " + p.name + " of a " + family +
                        " model" + hint + ")");
      }
      std::vector<int64_t> want = p.shape;
      want[0] = part.rows;
      const Tensor& t = it->second;
      require_shape(t, name, want);
      if (row + part.rows > rows)
        die_internal("sftdp", "load_llama_params", p.name + ": parts overflow", __FILE__, __LINE__);
      std::memcpy(params.data() + p.offset + row * cols, t.data.data(), t.data.size() * sizeof(float));
      row += part.rows;
      tensors.erase(it);  // frees it now; what is left at the end is not part of the model
    }
    if (row != rows) die_internal("sftdp", "load_llama_params", p.name + ": parts do not cover it", __FILE__, __LINE__);
  }
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    if (name.ends_with(".rotary_emb.inv_freq")) continue;  // buffers older transformers saved
    if (name == "lm_head.weight" && d.tied) {
      const auto& wte = layout.find("wte");
      const bool same = t.shape == wte.shape &&
                        std::memcmp(t.data.data(), params.data() + wte.offset, wte.numel * sizeof(float)) == 0;
      if (!same)
        throw UserError(t.file + ": tensor lm_head.weight differs from " + prefix +
                        "embed_tokens.weight, but config.json has tie_word_embeddings true");
      continue;
    }
    throw UserError(t.file + ": tensor " + name + " is not part of a " + family + " model as config.json describes it");
  }
}

json llama_config_json(const config::ModelDims& d, const json& special) {
  const std::string type = config::block_name(d);
  const std::string arch =
      type == "qwen2" ? "Qwen2ForCausalLM" : type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
  // RoPE in both spellings, which say the same (config_json.h read_rope): transformers < 5 reads rope_theta and
  // rope_scaling, >= 5 rope_parameters (and a non-null rope_scaling before it, taking rope_theta beside it).
  json rope = nullptr;
  json rope_parameters = {{"rope_type", "default"}, {"rope_theta", d.rope_theta}};
  if (d.rope_scaling.llama3) {
    rope = {{"rope_type", "llama3"}, {"factor", d.rope_scaling.factor},
            {"low_freq_factor", d.rope_scaling.low_freq_factor}, {"high_freq_factor", d.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", d.rope_scaling.original_max_positions}};
    rope_parameters = rope;
    rope_parameters["rope_theta"] = d.rope_theta;
  }
  json cfg = {{"architectures", {arch}}, {"model_type", type}, {"hidden_size", d.C},
              {"intermediate_size", d.F}, {"num_hidden_layers", d.L}, {"num_attention_heads", d.NH},
              {"num_key_value_heads", d.kv_heads()}, {"head_dim", d.head_size()}, {"vocab_size", d.V},
              {"max_position_embeddings", d.maxT}, {"rms_norm_eps", d.norm_eps}, {"rope_theta", d.rope_theta},
              {"rope_scaling", rope}, {"rope_parameters", rope_parameters}, {"tie_word_embeddings", d.tied}, {"hidden_act", "silu"},
              {"initializer_range", 0.02}, {"attention_dropout", 0.0}, {"use_cache", true},
              {"torch_dtype", "float32"}};
  if (type == "qwen2" || type == "qwen3") cfg.update({{"use_sliding_window", false}, {"sliding_window", nullptr}});
  if (type != "qwen2") cfg["attention_bias"] = false;
  if (type == "llama") cfg["mlp_bias"] = false;
  cfg.update(special);
  return cfg;
}

std::vector<NamedTensor> llama_export_tensors(const config::ModelDims& d, const model::ParamLayout& layout,
                                              const std::vector<float>& params) {
  std::vector<NamedTensor> out;
  for (const auto& p : layout.tensors) {
    const int64_t rows = p.shape.at(0), cols = rows ? int64_t(p.numel) / rows : 0;
    int64_t row = 0;
    for (const HfPart& part : llama_hf_parts(p.name, d, rows)) {
      std::vector<int64_t> shape = p.shape;
      shape[0] = part.rows;
      out.push_back({(part.prefixed ? "model." : "") + part.name, shape, params.data() + p.offset + row * cols});
      row += part.rows;
    }
  }
  return out;
}

}  // namespace sftdp::hf
