// src/hf/gpt2_hf.cpp — see gpt2_hf.h: a GPT-2 config.json's dimensions and loading an HF GPT-2
// directory into a SPEC parameter buffer (names: gpt2_names.h).
#include "hf/gpt2_hf.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hf/gpt2_names.h"
#include "hf/safetensors.h"
#include "sftdp/check.h"

namespace sftdp::hf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

int positive_int(const json& j, const std::string& file, const char* key) {
  if (!j.contains(key)) throw UserError(file + ": " + key + " is missing");
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > INT_MAX)
    throw UserError(file + ": " + key + " must be a positive integer, got " + v.dump());
  return v.get<int>();
}

}  // namespace

config::ModelDims read_gpt2_dims(const json& j, const std::string& file) {
  config::ModelDims d;
  d.L = positive_int(j, file, "n_layer");
  d.NH = positive_int(j, file, "n_head");
  d.C = positive_int(j, file, "n_embd");
  d.V = positive_int(j, file, "vocab_size");
  d.maxT = positive_int(j, file, "n_positions");
  d.F = (!j.contains("n_inner") || j["n_inner"].is_null()) ? 4 * d.C : positive_int(j, file, "n_inner");
  if (d.C % d.NH != 0)
    throw UserError(file + ": n_head " + std::to_string(d.NH) + " does not divide n_embd " + std::to_string(d.C));
  if (j.contains("layer_norm_epsilon") &&
      (!j["layer_norm_epsilon"].is_number() || std::fabs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
    throw UserError(file + ": layer_norm_epsilon " + j["layer_norm_epsilon"].dump() +
                    " is not supported (the model's LayerNorm uses 1e-5)");
  const json act = j.contains("activation_function") ? j["activation_function"] : json("gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw UserError(file + ": activation_function " + act.dump() +
                    " is not supported (the model's GELU is the tanh form: gelu_new)");
  // scale_attn_weights, scale_attn_by_inverse_layer_idx, ...: refuse_unsupported_keys (hf_dir.cpp).
  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"] != true)
    throw UserError(file + ": tie_word_embeddings " + j["tie_word_embeddings"].dump() +
                    " is not supported (sft-dp's GPT-2 head is the token embedding, as GPT2LMHeadModel's)");
  return d;
}

void load_gpt2_params(const std::string& dir, const model::ParamLayout& layout, std::vector<float>& params) {
  TensorMap tensors = read_safetensors_dir(dir);
  const std::string prefix = tensors.count("transformer.wte.weight") ? "transformer." : "";
  const std::string source = safetensors_dir_source(dir);
  params.assign(layout.total, 0.0f);
  std::vector<std::string> used;
  for (const auto& p : layout.tensors) {
    const HfName hn = hf_name_of(p.name);
    const std::string name = prefix + hn.name;
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw UserError(source + ": tensor " + name + " is missing (needed for " + p.name + ")");
    const Tensor& t = it->second;
    const std::vector<int64_t> want = hn.transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
    require_shape(t, name, want);
    float* dst = params.data() + p.offset;
    if (hn.transposed) {  // HF [in, out] -> SPEC [out, in]
      const int64_t in = want[0], out = want[1];
      for (int64_t i0 = 0; i0 < in; i0 += 32)  // 32x32 tiles: both sides stay in cache
        for (int64_t o0 = 0; o0 < out; o0 += 32)
          for (int64_t i = i0; i < std::min(in, i0 + 32); ++i)
            for (int64_t o = o0; o < std::min(out, o0 + 32); ++o) dst[o * in + i] = t.data[i * out + o];
    } else {
      std::memcpy(dst, t.data.data(), p.numel * sizeof(float));
    }
    used.push_back(name);
  }
  for (const auto& name : used) tensors.erase(name);
  const auto& wte_info = layout.find("wte");
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;  // (not a structured binding: clang 14 cannot capture one)
    const Tensor& t = entry.second;
    const auto ends = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(".attn.bias") || ends(".attn.masked_bias")) continue;  // causal-mask buffers
    if (name == "lm_head.weight") {
      const bool same = t.shape == wte_info.shape &&
                        std::memcmp(t.data.data(), params.data() + wte_info.offset, wte_info.numel * 4) == 0;
      if (!same)
        throw UserError(t.file + ": tensor lm_head.weight differs from " + prefix +
                        "wte.weight (sft-dp ties the output layer to the token embedding)");
      continue;
    }
    throw UserError(t.file + ": tensor " + name + " is not part of a GPT-2 model");
  }
}

}  // namespace sftdp::hf
