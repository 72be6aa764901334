// src/hf/peft.cpp — see peft.h.
#include "hf/peft.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "hf/gpt2_names.h"
#include "hf/hf_dir.h"
#include "hf/llama_names.h"
#include "hf/out_dir.h"
#include "hf/safetensors.h"
#include "sftdp/check.h"

namespace sftdp::hf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kTensorFile = "adapter_model.safetensors";

// "h.3.<module>.lora_A" -> (3, "<module>", "lora_A")
struct AdapterName {
  int layer = 0;
  std::string module, kind;
};
AdapterName split(const std::string& name) {
  const size_t dot = name.find('.', 2), last = name.rfind('.');
  SFTDP_ASSERT(name.rfind("h.", 0) == 0 && dot != std::string::npos && last > dot, "not an adapter name: " + name);
  return {std::stoi(name.substr(2, dot - 2)), name.substr(dot + 1, last - dot - 1), name.substr(last + 1)};
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw UserError(path.string() + ": cannot read (a PEFT adapter directory holds " + kConfigFile + ")");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw UserError(path.string() + ": not a JSON object");
  return j;
}

// What the adapters' config must say for sft-dp to compute what PEFT computes.
void check_config(const json& c, const std::string& file, const config::ModelDims& d, const model::LoraSpec& spec) {
  auto fail = [&](const std::string& key, const std::string& why) { throw UserError(file + ": " + key + ": " + why); };
  if (c.value("peft_type", std::string()) != "LORA") fail("peft_type", "must be LORA");
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() != spec.rank)
    fail("r", (c.contains("r") ? c["r"].dump() : std::string("missing")) + ", but lora_rank is " +
                  std::to_string(spec.rank));
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number() || c["lora_alpha"].get<double>() != spec.alpha)
    fail("lora_alpha", (c.contains("lora_alpha") ? c["lora_alpha"].dump() : std::string("missing")) +
                           ", but lora_alpha is " + json(spec.alpha).dump());
  for (const char* key : {"use_rslora", "use_dora"})
    if (c.contains(key) && c[key].is_boolean() && c[key].get<bool>()) fail(key, "is true; sft-dp trains plain LoRA");
  if (c.contains("bias") && c["bias"] != "none") fail("bias", "must be \"none\" (sft-dp trains no biases)");
  for (const char* key :
       {"modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern", "layer_replication"})
    if (c.contains(key) && !c[key].is_null() && !(c[key].is_object() && c[key].empty()) &&
        !(c[key].is_array() && c[key].empty()))
      fail(key, "is set; sft-dp trains the same adapter on every layer and nothing else");
  std::vector<std::string> targets;
  const json t = c.value("target_modules", json());
  if (t.is_string())
    targets = {t.get<std::string>()};
  else if (t.is_array())
    for (const auto& x : t) {
      if (!x.is_string()) fail("target_modules", "must be a list of module names");
      targets.push_back(x.get<std::string>());
    }
  else
    fail("target_modules", "must be a module name or a list of them");
  const auto modules = model::resolve_lora_targets(d, targets, file + ": target_modules");
  if (modules != spec.modules) {
    auto text = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& m : v) s += (s.empty() ? "" : " ") + m;
      return s;
    };
    fail("target_modules", "selects " + text(modules) + ", but lora_target_modules selects " + text(spec.modules));
  }
}

}  // namespace

std::string peft_tensor_name(const config::ModelDims& d, const std::string& name) {
  const AdapterName a = split(name);
  const std::string blocks = d.block == config::Block::kGpt2 ? kGpt2PeftBlocks : kLlamaPeftBlocks;
  return blocks + std::to_string(a.layer) + "." + a.module + "." + a.kind + ".weight";
}

void load_peft_adapter(const std::string& dir, const config::ModelDims& d, const model::LoraSpec& spec,
                       const model::ParamLayout& layout, std::vector<float>& adapters) {
  const fs::path config_path = fs::path(dir) / kConfigFile, tensor_path = fs::path(dir) / kTensorFile;
  check_config(read_json(config_path), config_path.string(), d, spec);
  std::error_code ec;
  if (!fs::is_regular_file(tensor_path, ec))
    throw UserError(tensor_path.string() + ": missing (a PEFT adapter directory holds " + kTensorFile + ")");
  TensorMap file = read_safetensors(tensor_path.string());
  adapters.assign(layout.total, 0.0f);
  std::set<std::string> used;
  for (const auto& t : layout.tensors) {
    const std::string name = peft_tensor_name(d, t.name);
    const auto it = file.find(name);
    if (it == file.end()) throw UserError(tensor_path.string() + ": tensor " + name + " is missing");
    require_shape(it->second, name, t.shape);
    std::copy(it->second.data.begin(), it->second.data.end(), adapters.begin() + static_cast<ptrdiff_t>(t.offset));
    used.insert(name);
  }
  for (const auto& [name, tensor] : file)
    if (!used.count(name))
      throw UserError(tensor_path.string() + ": tensor " + name +
                      " is not an adapter of this model and lora_target_modules (nothing loaded)");
}

void write_peft_adapter(const std::string& out_dir, const config::ModelDims& d, const model::LoraSpec& spec,
                        const model::ParamLayout& layout, const std::vector<float>& adapters,
                        const std::string& base_model_name_or_path, const std::string& tokenizer_dir) {
  SFTDP_ASSERT(adapters.size() == layout.total, "adapter buffer size differs from its layout");
  json cfg = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"base_model_name_or_path", base_model_name_or_path},
              {"r", spec.rank},
              {"lora_alpha", spec.alpha},
              {"lora_dropout", spec.dropout},
              {"target_modules", spec.modules},  // names relative to a block: PEFT matches them as suffixes
              {"bias", "none"},
              {"fan_in_fan_out", d.block == config::Block::kGpt2},  // GPT-2's Conv1D layers
              {"inference_mode", true},
              {"init_lora_weights", true},
              {"use_rslora", false},
              {"use_dora", false},
              {"modules_to_save", nullptr},
              {"layers_to_transform", nullptr}};
  std::vector<NamedTensor> tensors;
  for (const auto& t : layout.tensors)
    tensors.push_back({peft_tensor_name(d, t.name), t.shape, adapters.data() + t.offset});
  std::vector<fs::path> tokenizer_paths;
  if (!tokenizer_dir.empty())
    for (const auto& f : tokenizer_files(tokenizer_dir, "--tokenizer")) tokenizer_paths.emplace_back(f);
  write_directory(out_dir, [&](const fs::path& temp) {
    copy_into(tokenizer_paths, temp);
    std::ofstream out(temp / kConfigFile);
    out << cfg.dump(2) << "\n";
    if (!out.flush()) throw UserError((temp / kConfigFile).string() + ": cannot write");
    write_safetensors((temp / kTensorFile).string(), tensors, {{"format", "pt"}});
  });
}

}  // namespace sftdp::hf
