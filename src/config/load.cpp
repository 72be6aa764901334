// src/config/load.cpp — reading a config: a flat YAML map of known keys (each at most once), then
// MaxText-style key=value overrides applied in order (later wins; values are YAML scalars or
// flow lists), then validation of the result. to_yaml() writes every key back in a form that
// from_yaml_text() reads to the same Config; unset keys are written as null.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "config/keys.h"
#include "sftdp/check.h"

namespace sftdp::config {
namespace {

constexpr const char* kUsage = "usage: sft_train CONFIG.yml [key=value ...]";

std::string at(const std::string& source, const YAML::Mark& mark) {
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// Stores one key's value and records whether the user gave it (null = unset, not given).
void assign(Config& cfg, const detail::KeySpec& key, const YAML::Node& value,
            detail::GivenKeys& given) {
  detail::set_from_yaml(cfg, key, value);
  if (value.IsNull()) given.erase(key.name);
  else given.insert(key.name);
}

YAML::Node parse_document(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw UserError(at(source, e.mark) + ": invalid YAML: " + e.msg);
  }
  if (root.IsNull()) return YAML::Node(YAML::NodeType::Map);  // an empty file: all defaults
  if (!root.IsMap())
    throw UserError(source + ": expected a YAML map of `key: value` lines, got " +
                    (root.IsSequence() ? "a list" : "a single value"));
  return root;
}

void apply_file_keys(Config& cfg, const YAML::Node& root, const std::string& source,
                     detail::GivenKeys& given) {
  std::map<std::string, int> line_of;  // key → 1-based line where it was first given
  for (const auto& entry : root) {
    const YAML::Node& key_node = entry.first;
    if (!key_node.IsScalar())
      throw UserError(at(source, key_node.Mark()) + ": keys must be plain names");
    const std::string& name = key_node.Scalar();
    const detail::KeySpec* key = detail::find_key(name);
    if (!key) detail::throw_unknown_key(name);
    const int line = key_node.Mark().line + 1;
    if (const auto [it, fresh] = line_of.emplace(name, line); !fresh)
      throw UserError(name + ": given twice in " + source + " (lines " +
                      std::to_string(it->second) + " and " + std::to_string(line) + ")");
    assign(cfg, *key, entry.second, given);
  }
}

void apply_override(Config& cfg, const std::string& arg, detail::GivenKeys& given) {
  const size_t eq = arg.find('=');
  if (arg.starts_with("--"))  // a command-line flag given after CONFIG.yml (SPEC §2)
    throw UserError(arg.substr(0, eq) + ": flags go before CONFIG.yml; after it only key=value overrides");
  if (eq == std::string::npos || eq == 0) throw UserError(arg + ": expected key=value");
  const std::string name = arg.substr(0, eq), text = arg.substr(eq + 1);
  const detail::KeySpec* key = detail::find_key(name);
  if (!key) detail::throw_unknown_key(name);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UserError(name + ": cannot read '" + text + "' as a YAML value (" + e.msg + ")");
  }
  assign(cfg, *key, value, given);
}

// "  # resolved: 12" after a model dimension left to the preset; "" when nothing to add.
std::string resolved_comment(const Config& cfg, const detail::KeySpec& key) {
  const auto* member = std::get_if<int64_t Config::*>(&key.field);
  if (!member || cfg.*(*member) != -1) return "";
  const std::string name = key.name;
  ModelDims d;
  try {
    d = model_dims(cfg);
  } catch (const UserError&) {
    return "";  // an invalid model section has nothing to resolve to
  }
  const int value = name == "num_decoder_layers" ? d.L
                    : name == "num_heads"        ? d.NH
                    : name == "emb_dim"          ? d.C
                    : name == "mlp_dim"          ? d.F
                    : name == "vocab_size"       ? d.V
                    : name == "max_position_embeddings" ? d.maxT
                                                        : 0;
  return value ? "  # resolved: " + std::to_string(value) : "";
}

}  // namespace

Config from_yaml_text(const std::string& yaml, const std::vector<std::string>& overrides,
                      const std::string& source_name) {
  Config cfg;
  detail::GivenKeys given;
  apply_file_keys(cfg, parse_document(yaml, source_name), source_name, given);
  for (const auto& arg : overrides) apply_override(cfg, arg, given);
  detail::validate(cfg, given);
  return cfg;
}

Config from_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path + ": cannot read config file (it is a directory)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot read config file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError(path + ": cannot read config file");
  return from_yaml_text(text.str(), overrides, path);
}

Config from_args(int argc, char** argv) {
  if (argc < 2) throw UserError(kUsage);
  const std::string path = argv[1];
  std::error_code ec;
  if (path.find('=') != std::string::npos && !std::filesystem::exists(path, ec))
    throw UserError(std::string(kUsage) + ": the config file comes first, got '" + path + "'");
  return from_file(path, std::vector<std::string>(argv + 2, argv + argc));
}

std::string Config::to_yaml() const {
  std::string out = "# sft-dp config (SPEC §3): every key with the value in effect; null = unset\n";
  std::string section;
  for (const auto& key : detail::all_keys()) {
    if (section != key.section) {
      section = key.section;
      out += "# " + section + "\n";
    }
    out += std::string(key.name) + ": " + detail::format_value(*this, key) +
           resolved_comment(*this, key) + "\n";
  }
  return out;
}

}  // namespace sftdp::config
