// src/hf/hf_dir.cpp — see hf_dir.h: the one place that reads config.json's model_type and sends a
// directory to its family (gpt2_hf.cpp or llama_hf.cpp).
#include "hf/hf_dir.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hf/config_json.h"
#include "hf/gpt2_hf.h"
#include "hf/llama_hf.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"

namespace sftdp::hf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// config.json's model_type; without one, the family its architectures[0] names; else gpt2.
std::string model_type(const json& j, const std::string& file) {
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string())
      throw UserError(file + ": model_type must be a string, got " + j["model_type"].dump());
    return j["model_type"].get<std::string>();
  }
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    static const std::pair<const char*, const char*> kArch[] = {
        {"GPT2LMHeadModel", "gpt2"},     {"GPT2Model", "gpt2"},          {"LlamaForCausalLM", "llama"},
        {"LlamaModel", "llama"},         {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"},
        {"Qwen2Model", "qwen2"},         {"Qwen3ForCausalLM", "qwen3"},  {"Qwen3Model", "qwen3"}};
    const std::string arch = j["architectures"][0].get<std::string>();
    for (const auto& [name, type] : kArch)
      if (arch == name) return type;
    throw UserError(file + ": architectures " + j["architectures"].dump() +
                    " is not supported and model_type is missing");
  }
  return "gpt2";
}

}  // namespace

bool is_hf_dir(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec) && !checkpoint::is_sharded(path);
}

namespace {

// <dir>/config.json parsed, and its path for messages.
json read_config_json(const std::string& dir, std::string& file) {
  file = (fs::path(dir) / "config.json").string();
  std::ifstream in(file);
  if (!in) throw UserError(file + ": not found (load_parameters_path is a directory, so it must be a "
                           "Hugging Face model directory with config.json)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw UserError(file + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw UserError(file + ": not a JSON object");
  return j;
}

// model_type (or architectures' family), which must be one sft-dp reads.
std::string supported_type(const json& j, const std::string& file) {
  const std::string type = model_type(j, file);
  if (type != "gpt2" && !is_llama_family(type))
    throw UserError(file + ": model_type \"" + type + "\" is not supported (gpt2, llama, mistral, qwen2, qwen3)");
  return type;
}

}  // namespace

config::ModelDims read_hf_dims(const std::string& dir) {
  std::string file;
  const json j = read_config_json(dir, file);
  const std::string type = supported_type(j, file);
  refuse_unsupported_keys(j, file, type);
  if (is_llama_family(type)) return read_llama_dims(j, file, type);
  return read_gpt2_dims(j, file);
}

std::vector<std::string> read_hf_notes(const std::string& dir) {
  std::string file;
  const json j = read_config_json(dir, file);
  return config_json_notes(j, supported_type(j, file));
}

void load_hf_params(const std::string& dir, const model::ParamLayout& layout, std::vector<float>& params) {
  const config::ModelDims d = read_hf_dims(dir);
  if (d.block == config::Block::kLlama) return load_llama_params(dir, d, layout, params);
  load_gpt2_params(dir, layout, params);
}

}  // namespace sftdp::hf
