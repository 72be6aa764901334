// src/hf/peft.h — PEFT LoRA adapter directories (issue 17) in and out of sft-dp: adapter_config.json
// (peft_type LORA, r, lora_alpha, target_modules, ...) and adapter_model.safetensors with PEFT's
// tensor names, e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight (Llama family)
// or base_model.model.transformer.h.0.attn.c_attn.lora_A.weight (GPT-2), A [r, in], B [out, r] —
// what peft.PeftModel.from_pretrained(base, dir) loads and PeftModel.save_pretrained writes.
// Problems throw UserError naming the file and the key or tensor.
#pragma once
#include <string>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp::hf {

// PEFT's name of the adapter tensor `name` of a model::lora_layout ("h.3.self_attn.q_proj.lora_A").
std::string peft_tensor_name(const config::ModelDims& d, const std::string& name);

// The adapters of layout (a model::lora_layout(d, spec)) from a PEFT directory, into a host buffer
// of layout.total floats. adapter_config.json must be a LoRA adapter with spec's r, lora_alpha and
// target modules (resolved as PEFT resolves them), without DoRA, rsLoRA or bias training;
// adapter_model.safetensors must hold exactly the layout's tensors with its shapes.
void load_peft_adapter(const std::string& dir, const config::ModelDims& d, const model::LoraSpec& spec,
                       const model::ParamLayout& layout, std::vector<float>& adapters);

// Writes adapter_config.json and adapter_model.safetensors (fp32) for adapters into out_dir (a
// temporary sibling directory renamed at the end; out_dir must not exist or be empty).
// base_model_name_or_path goes into adapter_config.json as PEFT records it; tokenizer files are
// copied from tokenizer_dir when it is not empty (as TRL saves them beside an adapter).
void write_peft_adapter(const std::string& out_dir, const config::ModelDims& d, const model::LoraSpec& spec,
                        const model::ParamLayout& layout, const std::vector<float>& adapters,
                        const std::string& base_model_name_or_path, const std::string& tokenizer_dir = "");

}  // namespace sftdp::hf
