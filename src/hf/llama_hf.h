// src/hf/llama_hf.h — Hugging Face Llama-family directories (LlamaForCausalLM, Mistral without a
// sliding window, Qwen2ForCausalLM, Qwen3ForCausalLM) in and out of sft-dp's Llama block. Used by
// gpt2_hf.cpp / hf_export.cpp, which dispatch on config.json's model_type and ModelDims::block.
// Problems throw UserError naming the file and the key or tensor.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf/safetensors.h"
#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp::hf {

// True for the config.json model_type values this file reads (llama, mistral, qwen2, qwen3).
bool is_llama_family(const std::string& model_type);

// Dimensions from a parsed config.json (file: its path, for messages) of model_type (one that
// is_llama_family accepts). Keys the transformers config class defaults (rms_norm_eps, rope_theta,
// num_key_value_heads, head_dim, tie_word_embeddings, max_position_embeddings, ...) take that
// default when absent; hidden_size, intermediate_size, num_hidden_layers, num_attention_heads and
// vocab_size must be present. Features the model lacks (sliding windows, o_proj/MLP biases,
// activations other than SiLU, RoPE scaling other than llama3) are refused.
config::ModelDims read_llama_dims(const nlohmann::json& j, const std::string& file, const std::string& model_type);

// The SPEC parameters of layout (a llama_layout(d)) from the directory's safetensors: q/k/v and
// gate/up concatenated, names with or without the "model." prefix; a tied model may carry an
// lm_head.weight only if it equals embed_tokens.
void load_llama_params(const std::string& dir, const config::ModelDims& d, const model::ParamLayout& layout,
                       std::vector<float>& params);

// config.json contents for d (architectures/model_type from config::block_name, torch_dtype
// float32); special holds bos/eos ids to add.
nlohmann::json llama_config_json(const config::ModelDims& d, const nlohmann::json& special);

// The tensors of params under HF *ForCausalLM names (q/k/v and gate/up split back); they point
// into params, which must outlive them.
std::vector<NamedTensor> llama_export_tensors(const config::ModelDims& d, const model::ParamLayout& layout,
                                              const std::vector<float>& params);

}  // namespace sftdp::hf
