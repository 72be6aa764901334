// src/generate/load_model.cpp — the model sft_generate runs (sftdp/generate.h): an sft-dp checkpoint
// through hf::read_checkpoint_model (a LoRA checkpoint merged into its base, as sft_export --merge), a
// Hugging Face directory through hf::load_hf_params, and a PEFT adapter directory on top through
// hf::load_peft_adapter, merged with model::merge_lora: the loaders the trainer and sft_export use.
// The ids that end a reply come from the Hugging Face directory's generation_config.json (else its
// config.json) eos_token_id, a number or a list; a checkpoint takes those of the directory its run
// loaded, else the byte tokenizer's <|eos|> and <|end|> when the vocabulary is the byte tokenizer's.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "hf/hf_dir.h"
#include "hf/peft.h"
#include "sftdp/check.h"
#include "sftdp/generate.h"

namespace sftdp::generate {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& path, bool required) {
  std::ifstream in(path);
  if (!in) {
    if (required) throw UserError(path.string() + ": not found");
    return json::object();
  }
  try {
    json j = json::parse(in);
    if (!j.is_object()) throw UserError(path.string() + ": not a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw UserError(path.string() + ": invalid JSON: " + e.what());
  }
}

// eos_token_id of a config.json / generation_config.json: a number, a list of numbers, or absent.
std::vector<int32_t> eos_of(const json& j) {
  std::vector<int32_t> ids;
  const auto it = j.find("eos_token_id");
  if (it == j.end()) return ids;
  if (it->is_number_integer()) ids.push_back(it->get<int32_t>());
  if (it->is_array())
    for (const auto& v : *it)
      if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  return ids;
}

std::vector<int32_t> hf_eos_ids(const std::string& dir) {
  std::vector<int32_t> ids = eos_of(read_json(fs::path(dir) / "generation_config.json", false));
  return ids.empty() ? eos_of(read_json(fs::path(dir) / "config.json", false)) : ids;
}

// A PEFT LoRA adapter's spec from its adapter_config.json (r, lora_alpha, target_modules);
// load_peft_adapter checks the rest of the file against it.
model::LoraSpec peft_spec(const std::string& dir, const config::ModelDims& d) {
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  const json j = read_json(file, true);
  model::LoraSpec spec;
  try {
    spec.rank = j.at("r").get<int>();
    spec.alpha = j.value("lora_alpha", 8.0);
    std::vector<std::string> targets;
    const json& t = j.at("target_modules");
    if (t.is_string())
      targets.push_back(t.get<std::string>());
    else
      targets = t.get<std::vector<std::string>>();
    spec.modules = model::resolve_lora_targets(d, targets, file + ": target_modules");
  } catch (const json::exception& e) {
    throw UserError(file + ": not a LoRA adapter config (r, lora_alpha, target_modules): " + e.what());
  }
  if (spec.rank < 1) throw UserError(file + ": r must be >= 1, got " + std::to_string(spec.rank));
  return spec;
}

}  // namespace

LoadedModel load_model(const std::string& path, const std::string& adapter_dir) {
  LoadedModel m;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UserError("--model: " + path + ": not found");
  if (hf::is_hf_dir(path)) {
    m.d = hf::read_hf_dims(path);
    m.notes = hf::read_hf_notes(path);
    hf::load_hf_params(path, model::param_layout(m.d), m.params);
    m.eos_ids = hf_eos_ids(path);
    m.source = path + " (Hugging Face directory)";
  } else {
    hf::CheckpointModel c = hf::read_checkpoint_model(path, /*merge_lora=*/true);
    m.d = c.d;
    m.params = std::move(c.params);
    const std::string& base = c.cfg.load_parameters_path;
    if (!base.empty() && hf::is_hf_dir(base)) m.eos_ids = hf_eos_ids(base);
    m.source = path + (c.lora.enabled() ? " (LoRA checkpoint, merged into its base)" : " (checkpoint)");
  }
  m.byte_tokenizer = m.d.V == data::tok::kVocabSize;
  if (m.eos_ids.empty() && m.byte_tokenizer) m.eos_ids = {data::tok::kEos, data::tok::kEnd};
  if (!adapter_dir.empty()) {
    if (!fs::is_directory(adapter_dir, ec)) throw UserError("--adapter: " + adapter_dir + ": not a directory");
    const model::LoraSpec spec = peft_spec(adapter_dir, m.d);
    const model::ParamLayout layout = model::lora_layout(m.d, spec);
    std::vector<float> adapters;
    hf::load_peft_adapter(adapter_dir, m.d, spec, layout, adapters);
    model::merge_lora(m.params, model::param_layout(m.d), m.d, spec, layout, adapters);
    m.source += " + PEFT adapter " + adapter_dir + " (merged)";
  }
  return m;
}

}  // namespace sftdp::generate
