// src/hf/hf_dir.h — Hugging Face model directories (config.json + model.safetensors or a sharded
// index) in and out of sft-dp; hf_dir.cpp dispatches on config.json's model_type to the families'
// files (gpt2_hf.cpp, llama_hf.cpp), each with its name table (gpt2_names.h, llama_names.h). GPT-2: HF's GPT2Model / GPT2LMHeadModel names (with or without the
// "transformer." prefix) map onto SPEC §5 names; Conv1D weights ([in, out]) are transposed to the
// SPEC's [out, in]; lm_head is tied to wte. Llama, Mistral (no sliding window), Qwen2 and Qwen3
// directories (config.json model_type) go through llama_hf.h onto the SPEC Llama block. Problems
// throw UserError naming the file and tensor/key.
#pragma once
#include <string>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp::hf {

// True when path is a directory (then it must be an HF model directory with config.json), but not
// a sharded sft-dp checkpoint (a step_<S>/ directory holding index.h5, SPEC §5).
bool is_hf_dir(const std::string& path);

// Dimensions from <dir>/config.json. model_type (else architectures[0]; neither: gpt2) picks the
// family. GPT-2: n_layer, n_head, n_embd, n_inner (null = 4·n_embd), vocab_size, n_positions;
// layer_norm_epsilon must be 1e-5 and activation_function the tanh GELU (gelu_new or
// gelu_pytorch_tanh): the SPEC model has no other. llama/mistral/qwen2/qwen3: read_llama_dims.
// Every config.json key is accounted for (hf/config_json.h): a feature sft-dp lacks at a value other
// than its default is a UserError naming key and value (all of them, one line each).
config::ModelDims read_hf_dims(const std::string& dir);

// The start-up lines about <dir>/config.json (hf/config_json.h config_json_notes): keys whose value
// sft-dp does not apply (GPT-2's dropouts), and one line naming every key it does not know. Logged by
// sft_train (and printed by --plan) after the model line.
std::vector<std::string> read_hf_notes(const std::string& dir);

// All SPEC parameters of layout (param_layout of read_hf_dims(dir)) from the directory's
// safetensors (F32, F16 or BF16), into a host buffer of layout.total floats.
void load_hf_params(const std::string& dir, const model::ParamLayout& layout, std::vector<float>& params);

// Writes config.json, generation_config.json and model.safetensors for params (GPT-2: HF names,
// Conv1D layout, no lm_head: tied; Llama family: *ForCausalLM names, q/k/v and gate/up split), plus tokenizer files copied from tokenizer_dir when it is not empty.
// Everything goes to a temporary sibling directory first, renamed to out_dir at the end; out_dir
// must not exist or be empty. bos/eos/pad ids (config.json) and generation_config.json come from
// the HF directories source_dir (the run's load_parameters_path, if one) and tokenizer_dir when
// their config.json has the model's vocab_size; else the ids of sft-dp's own tokenizers, if any.
void export_hf(const std::string& out_dir, const config::ModelDims& d, const model::ParamLayout& layout,
               const std::vector<float>& params, const std::string& tokenizer_dir,
               const std::string& source_dir = "");

// The tokenizer files export_hf copies from source: the file itself, or the known tokenizer files
// (tokenizer.json, vocab.json, merges.txt, ...) in the directory. None: UserError("<what>: ...").
std::vector<std::string> tokenizer_files(const std::string& source, const std::string& what);

// The model of a checkpoint (a step_<S>.h5 file, a sharded step_<S>/ directory, or a params-only
// .h5), as sft_export and sft_generate read it: the stored
// config (its root attribute `config`) and the dimensions it resolves to; the parameters (params, the
// SPEC layout); for a LoRA checkpoint (issue 17) its adapters and their spec, and with merge_lora the
// parameters are its base (from the run's load_parameters_path or seed, checked against the
// checkpoint's lora_base_hash) with W + s·B·A merged in, as PEFT's merge_and_unload (without: empty).
struct CheckpointModel {
  config::Config cfg;
  config::ModelDims d;
  std::vector<float> params;
  model::LoraSpec lora;         // rank 0: a full model
  std::vector<float> adapters;  // model::lora_layout(d, lora)
};
CheckpointModel read_checkpoint_model(const std::string& checkpoint_h5, bool merge_lora);

// sft_export: the model of a checkpoint (or params-only) .h5 to an HF directory. The dimensions
// come from the checkpoint's stored config (its root attribute `config`). A LoRA checkpoint
// (issue 17) gives a PEFT adapter directory (hf/peft.h), or with merge the whole model with
// W + s·B·A, its base read from the run's load_parameters_path (or seed) and checked against the
// checkpoint's lora_base_hash.
void export_checkpoint(const std::string& checkpoint_h5, const std::string& out_dir, const std::string& tokenizer_dir,
                       bool merge = false);

// sft_export --consolidate: a checkpoint (either format, SPEC §5) written as one single-file
// checkpoint out_h5 (params, moments and every root attribute; format_version 1), which every build
// resumes from. The layout comes from the stored config (the adapters' for a LoRA checkpoint).
// out_h5 must not exist (UserError).
void consolidate_checkpoint(const std::string& checkpoint, const std::string& out_h5);

}  // namespace sftdp::hf
