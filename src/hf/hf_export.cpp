// src/hf/hf_export.cpp — see gpt2_hf.h: an HF directory (GPT-2, or a Llama-family model through
// llama_hf.h) from SPEC parameters, and from a checkpoint file. Nothing appears at out_dir unless every file was written (temporary sibling
// directory, renamed at the end).
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "h5/h5.h"
#include "hf/hf_dir.h"
#include "hf/gpt2_names.h"
#include "hf/llama_hf.h"
#include "hf/out_dir.h"
#include "hf/peft.h"
#include "hf/safetensors.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"

namespace sftdp::hf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// transformers >= 4.50 saves a tokenizer's chat template as chat_template.jinja (processors as
// chat_template.json) beside tokenizer_config.json instead of inside it: without it an export
// loaded by the newest transformers has no chat template.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "vocab.json",
                                           "merges.txt", "special_tokens_map.json", "added_tokens.json",
                                           "chat_template.jinja", "chat_template.json"};

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out.flush()) throw UserError(path.string() + ": cannot write");
}

// A JSON object file, or null when absent or unreadable (the sources below are optional).
json json_object_or_null(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return nullptr;
  std::ifstream in(path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json();
}

// bos/eos/pad ids: those of the tokenizers sft-dp knows by vocabulary size (byte tokenizer, GPT-2
// BPE), replaced by the ones in config.json of a Hugging Face directory among sources (the model
// the run started from, the tokenizer source) whose vocab_size is the model's; later sources win.
json special_ids(const config::ModelDims& d, const std::vector<std::string>& sources) {
  json ids = json::object();
  if (d.V == data::tok::kVocabSize) ids = {{"bos_token_id", data::tok::kBos}, {"eos_token_id", data::tok::kEos}};
  if (d.V == 50257) ids = {{"bos_token_id", 50256}, {"eos_token_id", 50256}};
  std::error_code ec;
  for (const auto& dir : sources) {
    if (dir.empty() || !fs::is_directory(dir, ec)) continue;
    const json c = json_object_or_null(fs::path(dir) / "config.json");
    if (c.is_null() || c.value("vocab_size", json()) != d.V) continue;
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (c.contains(key) && !c[key].is_null()) ids[key] = c[key];
  }
  return ids;
}

// generation_config.json: the last source directory's own (sampling defaults, chat eos lists)
// when it has one and the model's vocabulary, else the special ids alone.
json generation_config(const config::ModelDims& d, const std::vector<std::string>& sources, const json& ids) {
  json gen = {{"_from_model_config", true}};
  gen.update(ids);
  std::error_code ec;
  for (const auto& dir : sources) {
    if (dir.empty() || !fs::is_directory(dir, ec)) continue;
    const json c = json_object_or_null(fs::path(dir) / "config.json");
    const json g = json_object_or_null(fs::path(dir) / "generation_config.json");
    if (!c.is_null() && c.value("vocab_size", json()) == d.V && !g.is_null()) gen = g;
  }
  return gen;
}

// The root attribute `config` (resolved YAML) of a checkpoint .h5.
// A root string attribute of an .h5 file; "" when absent and not required.
std::string root_string_attr(const std::string& given, const char* name, bool required) {
  // A sharded checkpoint (issue 36) keeps its root attributes in its index.
  const std::string path = checkpoint::is_sharded(given) ? given + "/index.h5" : given;
  h5::QuietErrors quiet;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw UserError(path + ": not found");
  h5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) h5::bad_file(path, "not a readable HDF5 file");
  const std::string what = std::string("root attribute '") + name + "'";
  if (H5Aexists(file.get(), name) <= 0) {
    if (!required) return "";
    h5::bad_file(path, what + " is missing (needed for the model's dimensions)");
  }
  h5::Handle attr(H5Aopen(file.get(), name, H5P_DEFAULT), H5Aclose);
  h5::Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING) h5::bad_file(path, what + " must be a string");
  h5::Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
  std::string value;
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* data = nullptr;
    if (H5Aread(attr.get(), mem.get(), &data) < 0) h5::bad_file(path, what + " could not be read");
    if (data) value = data;
    H5free_memory(data);
  } else {
    const size_t size = H5Tget_size(type.get());
    H5Tset_size(mem.get(), size);
    std::string buffer(size, '\0');
    if (H5Aread(attr.get(), mem.get(), buffer.data()) < 0) h5::bad_file(path, what + " could not be read");
    value = buffer.substr(0, buffer.find('\0'));
  }
  return value;
}

json gpt2_config_json(const config::ModelDims& d, const json& ids) {
  json cfg = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"n_layer", d.L},
              {"n_head", d.NH}, {"n_embd", d.C}, {"n_inner", d.F}, {"vocab_size", d.V},
              {"n_positions", d.maxT}, {"n_ctx", d.maxT}, {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5}, {"initializer_range", 0.02}, {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"scale_attn_weights", true},
              {"tie_word_embeddings", true}, {"use_cache", true}, {"torch_dtype", "float32"}};
  cfg.update(ids);
  return cfg;
}

// SPEC [out, in] -> Conv1D [in, out] (copies kept in transposed); names with GPT2LMHeadModel's
// "transformer." prefix.
std::vector<NamedTensor> gpt2_export_tensors(const model::ParamLayout& layout, const std::vector<float>& params,
                                             std::vector<std::vector<float>>& transposed) {
  std::vector<NamedTensor> tensors;
  transposed.reserve(layout.tensors.size());
  for (const auto& p : layout.tensors) {
    const HfName hn = hf_name_of(p.name);
    const float* src = params.data() + p.offset;
    if (!hn.transposed) {
      tensors.push_back({"transformer." + hn.name, p.shape, src});
      continue;
    }
    const int64_t rows = p.shape[0], cols = p.shape[1];
    auto& t = transposed.emplace_back(p.numel);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = src[r * cols + c];
    tensors.push_back({"transformer." + hn.name, {cols, rows}, t.data()});
  }
  return tensors;
}

}  // namespace

std::vector<std::string> tokenizer_files(const std::string& source, const std::string& what) {
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(source, ec)) files.push_back(source);
  else if (fs::is_directory(source, ec))
    for (const char* name : kTokenizerFiles)
      if (fs::is_regular_file(fs::path(source) / name, ec)) files.push_back((fs::path(source) / name).string());
  if (files.empty())
    throw UserError(what + ": " + source + " holds no tokenizer file (tokenizer.json, vocab.json, ...)");
  return files;
}

void write_directory(const std::string& out_dir, const std::function<void(const fs::path& temp)>& fill) {
  std::error_code ec;
  fs::path out = fs::absolute(out_dir, ec).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/"
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw UserError(out_dir + ": exists and is not an empty directory (nothing written)");
  const fs::path parent = out.parent_path();
  if (!fs::is_directory(parent, ec)) throw UserError(out_dir + ": parent directory " + parent.string() + " does not exist");
  std::string temp_name = ".";
  temp_name += out.filename().string();
  temp_name += ".tmp." + std::to_string(getpid());
  const fs::path temp = parent / temp_name;
  fs::remove_all(temp, ec);
  if (!fs::create_directory(temp, ec)) throw UserError(out_dir + ": cannot create " + temp.string() + ": " + ec.message());
  try {
    fill(temp);
    if (fs::exists(out, ec)) fs::remove(out, ec);  // the empty directory checked above
    fs::rename(temp, out, ec);
    if (ec) throw UserError(out_dir + ": cannot rename " + temp.string() + " into place: " + ec.message());
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
}

void copy_into(const std::vector<fs::path>& files, const fs::path& dir) {
  std::error_code ec;
  for (const auto& f : files) {
    fs::copy_file(f, dir / f.filename(), ec);
    if (ec) throw UserError(f.string() + ": cannot copy: " + ec.message());
  }
}

void export_hf(const std::string& out_dir, const config::ModelDims& d, const model::ParamLayout& layout,
               const std::vector<float>& params, const std::string& tokenizer_dir, const std::string& source_dir) {
  std::vector<fs::path> tokenizer_paths;
  if (!tokenizer_dir.empty())
    for (const auto& f : tokenizer_files(tokenizer_dir, "--tokenizer")) tokenizer_paths.emplace_back(f);
  write_directory(out_dir, [&](const fs::path& temp) {
    const std::vector<std::string> sources = {source_dir, tokenizer_dir};
    const json ids = special_ids(d, sources);
    json cfg;
    std::vector<std::vector<float>> transposed;
    std::vector<NamedTensor> tensors;
    if (d.block == config::Block::kLlama) {
      cfg = llama_config_json(d, ids);
      tensors = llama_export_tensors(d, layout, params);
    } else {
      cfg = gpt2_config_json(d, ids);
      tensors = gpt2_export_tensors(layout, params, transposed);
    }
    write_json(temp / "config.json", cfg);
    write_json(temp / "generation_config.json", generation_config(d, sources, ids));
    write_safetensors((temp / "model.safetensors").string(), tensors, {{"format", "pt"}});
    copy_into(tokenizer_paths, temp);
  });
}

namespace {
// The base a LoRA checkpoint was trained on, as the run read it, checked against the checkpoint's
// lora_base_hash.
std::vector<float> lora_base_of(const std::string& checkpoint_h5, const config::Config& cfg, const config::ModelDims& d,
                                const model::ParamLayout& layout) {
  std::vector<float> base;
  if (cfg.load_parameters_path.empty())
    model::init_params(base, layout, d, static_cast<uint64_t>(cfg.seed));
  else if (is_hf_dir(cfg.load_parameters_path))
    load_hf_params(cfg.load_parameters_path, layout, base);
  else
    checkpoint::load_params(cfg.load_parameters_path, layout, base);
  const std::string want = root_string_attr(checkpoint_h5, "lora_base_hash", /*required=*/true);
  const std::string got = model::base_hash(layout, base);
  if (got != want)
    throw UserError(checkpoint_h5 + ": its adapters were trained on a base with hash " + want + ", but " +
                    (cfg.load_parameters_path.empty() ? "the seeded base" : cfg.load_parameters_path) +
                    " (the run's load_parameters_path) now hashes to " + got + " (nothing written)");
  return base;
}
}  // namespace

CheckpointModel read_checkpoint_model(const std::string& checkpoint_h5, bool merge_lora) {
  const std::string yaml = root_string_attr(checkpoint_h5, "config", /*required=*/true);
  CheckpointModel m;
  config::Config& cfg = m.cfg;
  config::ModelDims& d = m.d;
  try {
    cfg = config::from_yaml_text(yaml, {}, checkpoint_h5 + " (attribute config)");
    d = config::model_dims(cfg);
  } catch (const UserError& e) {
    throw UserError(checkpoint_h5 + ": cannot resolve the model's dimensions from its stored config: " + e.what());
  }
  const model::ParamLayout layout = model::param_layout(d);
  if (cfg.lora_rank > 0) {  // adapters in /params; the base comes from where the run read it
    m.lora = model::lora_spec(cfg, d);
    const model::ParamLayout adapters_layout = model::lora_layout(d, m.lora);
    checkpoint::load_params(checkpoint_h5, adapters_layout, m.adapters);
    if (!merge_lora) return m;
    m.params = lora_base_of(checkpoint_h5, cfg, d, layout);
    model::merge_lora(m.params, layout, d, m.lora, adapters_layout, m.adapters);
    return m;
  }
  try {
    checkpoint::load_params(checkpoint_h5, layout, m.params);
  } catch (const UserError& e) {
    std::error_code ec;
    if (cfg.load_parameters_path.empty() || fs::exists(cfg.load_parameters_path, ec)) throw;
    // An HF directory gave the run its dimensions (model_dims); without it they fall back.
    throw UserError(std::string(e.what()) + " (the run's load_parameters_path " + cfg.load_parameters_path +
                    " no longer exists: if it was a Hugging Face directory, its config.json gave the "
                    "dimensions; restore it)");
  }
  return m;
}

void export_checkpoint(const std::string& checkpoint_h5, const std::string& out_dir, const std::string& tokenizer_dir,
                       bool merge) {
  const CheckpointModel m = read_checkpoint_model(checkpoint_h5, merge);
  if (m.lora.enabled() && !merge) {
    write_peft_adapter(out_dir, m.d, m.lora, model::lora_layout(m.d, m.lora), m.adapters, m.cfg.load_parameters_path,
                       tokenizer_dir);
    return;
  }
  if (merge && !m.lora.enabled())
    throw UserError("--merge: " + checkpoint_h5 + " is not a LoRA checkpoint (its config has lora_rank 0)");
  export_hf(out_dir, m.d, model::param_layout(m.d), m.params, tokenizer_dir, m.cfg.load_parameters_path);
}

void consolidate_checkpoint(const std::string& checkpoint, const std::string& out_h5) {
  std::error_code ec;
  if (fs::exists(out_h5, ec) || fs::is_symlink(out_h5, ec))
    throw UserError("--consolidate: " + out_h5 + " already exists (choose a new name)");
  const std::string yaml = root_string_attr(checkpoint, "config", /*required=*/true);
  config::Config cfg;
  config::ModelDims d;
  try {
    cfg = config::from_yaml_text(yaml, {}, checkpoint + " (attribute config)");
    d = config::model_dims(cfg);
  } catch (const UserError& e) {
    throw UserError(checkpoint + ": cannot resolve the model's dimensions from its stored config: " + e.what());
  }
  const model::ParamLayout layout =
      cfg.lora_rank > 0 ? model::lora_layout(d, model::lora_spec(cfg, d)) : model::param_layout(d);
  std::vector<float> params, m, v;
  checkpoint::TrainState state;
  checkpoint::load(checkpoint, layout, params, m, v, state);  // a directory: every shard, put together
  checkpoint::save_as(out_h5, layout, params, m, v, state);
}

}  // namespace sftdp::hf
