// src/hf/llama_names.h — SPEC §5 Llama-family parameter name -> the Hugging Face tensors it is
// made of (names without the "model." prefix of *ForCausalLM), in row order. Two SPEC tensors
// fuse several HF ones along their first axis: attn.qkv.{weight,bias} = [q_proj ; k_proj ;
// v_proj] and mlp.fc.weight = [gate_proj ; up_proj]; every other tensor maps one to one, same
// shape (HF's nn.Linear weights are [out, in] like the SPEC's, and q/k load unpermuted: the model's
// RoPE uses HF's rotate_half layout).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sftdp/config.h"

namespace sftdp::hf {

// PEFT (issue 17): adapter "h.<l>.<module>.lora_A" is <kLlamaPeftBlocks><l>.<module>.lora_A.weight,
// <module> the block-relative HF name (self_attn.q_proj ... mlp.down_proj).
inline constexpr const char* kLlamaPeftBlocks = "base_model.model.model.layers.";

struct HfPart {
  std::string name;      // without the "model." prefix; lm_head.weight never has one
  int64_t rows = 0;      // first-axis extent of this part inside the SPEC tensor
  bool prefixed = true;  // false: lm_head.weight (outside model.)
};

// The HF parts of SPEC tensor spec (first_rows = the SPEC tensor's first dimension, used for the
// one-part case). Unknown names come back as one part with the same name.
inline std::vector<HfPart> llama_hf_parts(const std::string& spec, const config::ModelDims& d, int64_t first_rows) {
  if (spec == "wte") return {{"embed_tokens.weight", first_rows}};
  if (spec == "ln_f.weight") return {{"norm.weight", first_rows}};
  if (spec == "lm_head.weight") return {{"lm_head.weight", first_rows, false}};
  const size_t dot = spec.find('.', 2);  // "h.<l>.<rest>"
  if (spec.rfind("h.", 0) != 0 || dot == std::string::npos) return {{spec, first_rows}};
  const std::string layer = "layers." + spec.substr(2, dot - 2) + ".";
  const std::string rest = spec.substr(dot + 1);
  const int64_t q = int64_t(d.NH) * d.head_size(), kv = int64_t(d.kv_heads()) * d.head_size();
  if (rest == "attn.qkv.weight" || rest == "attn.qkv.bias") {
    const std::string kind = rest == "attn.qkv.weight" ? "weight" : "bias";
    return {{layer + "self_attn.q_proj." + kind, q},
            {layer + "self_attn.k_proj." + kind, kv},
            {layer + "self_attn.v_proj." + kind, kv}};
  }
  if (rest == "mlp.fc.weight") return {{layer + "mlp.gate_proj.weight", d.F}, {layer + "mlp.up_proj.weight", d.F}};
  static const std::pair<const char*, const char*> kSame[] = {
      {"ln_1.weight", "input_layernorm.weight"},       {"ln_2.weight", "post_attention_layernorm.weight"},
      {"attn.proj.weight", "self_attn.o_proj.weight"}, {"attn.q_norm.weight", "self_attn.q_norm.weight"},
      {"attn.k_norm.weight", "self_attn.k_norm.weight"}, {"mlp.proj.weight", "mlp.down_proj.weight"}};
  for (const auto& [from, to] : kSame)
    if (rest == from) return {{layer + to, first_rows}};
  return {{spec, first_rows}};
}

}  // namespace sftdp::hf
