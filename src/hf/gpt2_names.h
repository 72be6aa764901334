// src/hf/gpt2_names.h — SPEC §5 parameter name -> Hugging Face GPT-2 name (without the
// "transformer." prefix) and whether the tensor is a Conv1D weight stored transposed ([in, out]).
#pragma once
#include <cstring>
#include <string>
#include <utility>

namespace sftdp::hf {

struct HfName {
  std::string name;
  bool transposed = false;
};

// PEFT (issue 17): adapter "h.<l>.<module>.lora_A" is <kGpt2PeftBlocks><l>.<module>.lora_A.weight,
// <module> the block-relative HF name (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj).
inline constexpr const char* kGpt2PeftBlocks = "base_model.model.transformer.h.";

inline HfName hf_name_of(const std::string& spec) {
  if (spec == "wte" || spec == "wpe") return {spec + ".weight", false};
  static const std::pair<const char*, const char*> kRenames[] = {
      {"attn.qkv.", "attn.c_attn."}, {"attn.proj.", "attn.c_proj."},
      {"mlp.fc.", "mlp.c_fc."},      {"mlp.proj.", "mlp.c_proj."}};
  for (const auto& [from, to] : kRenames) {
    const size_t at = spec.find(from);
    if (at != std::string::npos) {
      std::string name = spec;
      name.replace(at, std::strlen(from), to);
      const bool weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
      return {name, weight};
    }
  }
  return {spec, false};  // ln_1, ln_2, ln_f keep their names
}

}  // namespace sftdp::hf
