// src/hf/gpt2_hf.h — the GPT-2 family's half of hf_dir.h (gpt2_hf.cpp): its config.json keys and its
// tensors, under the names of gpt2_names.h. Problems throw UserError naming the file and key or tensor.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp::hf {

// Dimensions from a parsed GPT-2 config.json (file: its path, for messages): n_layer, n_head, n_embd,
// n_inner (null = 4·n_embd), vocab_size, n_positions; layer_norm_epsilon must be 1e-5 and
// activation_function the tanh GELU.
config::ModelDims read_gpt2_dims(const nlohmann::json& j, const std::string& file);

// The SPEC parameters of layout (a gpt2_layout) from the directory's safetensors (names with or
// without "transformer."; Conv1D weights transposed; an lm_head.weight only if it equals wte).
void load_gpt2_params(const std::string& dir, const model::ParamLayout& layout, std::vector<float>& params);

}  // namespace sftdp::hf
