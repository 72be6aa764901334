// src/config/load.cpp — reading a config: a flat YAML map of known keys (each at most once), then
// MaxText-style key=value overrides applied in order (later wins; values are YAML scalars or
// flow lists), then validation of the result. Other trainers' names (config/aliases.h) are read as
// the keys they mean, with a note each; an alias and the key it sets both given is an error.
// to_yaml() writes every key back in a form that from_yaml_text() reads to the same Config; unset
// keys are written as null.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "config/aliases.h"
#include "config/keys.h"
#include "sftdp/check.h"

namespace sftdp::config {
namespace {

constexpr const char* kUsage = "usage: sft_train CONFIG.yml [key=value ...]";

std::string at(const std::string& source, const YAML::Mark& mark) {
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// A config being read: the values, which keys the user gave, and which name set each key.
struct Reading {
  Config cfg;
  detail::GivenKeys given;
  std::map<std::string, std::string, std::less<>> set_by;  // key -> the name that set it: itself or an alias
  std::vector<std::pair<std::string, std::string>> aliases_used;  // (alias, its value as written), first use first
};

std::string text_of(const YAML::Node& value) {
  if (value.IsNull()) return "null";
  return value.IsScalar() ? value.Scalar() : YAML::Dump(value);
}

// Stores one key's value and records whether the user gave it (null = unset, not given).
void assign(Reading& r, const detail::KeySpec& key, const YAML::Node& value) {
  detail::set_from_yaml(r.cfg, key, value);
  if (value.IsNull()) r.given.erase(key.name);
  else r.given.insert(key.name);
}

// "warmup_ratio is TRL's name for it", for the error when two names set one key.
std::string whose(const std::string& name, const std::string& key) {
  const detail::Alias* alias = detail::find_alias(name);
  if (!alias) return "";
  if (key == alias->key) return name + " is " + alias->origin + "'s name for it";
  return name + "=constant means no warmup; constant_with_warmup keeps it";  // the one alias of two keys
}

// `name` is about to set `key`: an error if another name (the key itself or an alias) already did.
void claim(Reading& r, const std::string& key, const std::string& name) {
  const auto [it, fresh] = r.set_by.emplace(key, name);
  if (fresh || it->second == name) return;
  const std::string& earlier = it->second;
  std::string why = whose(name, key);
  const std::string earlier_why = whose(earlier, key);
  if (!earlier_why.empty()) why += (why.empty() ? "" : ", ") + earlier_why;
  throw UserError(name + ": " + earlier + " is given too, and both set " + key + " (" + why + "); give one of them");
}

// One `name: value` of the file or `name=value` override: a key, or an alias of one or two keys.
void set_name(Reading& r, const std::string& name, const YAML::Node& value) {
  if (const detail::KeySpec* key = detail::find_key(name)) {
    claim(r, key->name, name);
    assign(r, *key, value);
    return;
  }
  const detail::Alias* alias = detail::find_alias(name);
  if (!alias) detail::throw_unknown_key(name);
  for (const auto& [key_name, key_value] : detail::translate(*alias, value)) {
    claim(r, key_name, name);
    try {
      assign(r, *detail::find_key(key_name), key_value);
    } catch (const UserError& e) {  // "warmup_steps_fraction: expected a number, ..." names the key written
      const std::string what = e.what();
      const std::string prefix = key_name + ": ";
      throw UserError(name + " (read as " + key_name + "): " +
                      (what.starts_with(prefix) ? what.substr(prefix.size()) : what));
    }
  }
  const auto used = std::find_if(r.aliases_used.begin(), r.aliases_used.end(),
                                 [&](const auto& u) { return u.first == name; });
  if (used == r.aliases_used.end()) r.aliases_used.emplace_back(name, text_of(value));
  else used->second = text_of(value);  // a later override of the same alias
}

// "warmup_ratio=0.1 read as warmup_steps_fraction=0.1", with the values in effect.
std::vector<std::string> alias_notes(const Reading& r) {
  std::vector<std::string> notes;
  for (const auto& [alias, text] : r.aliases_used) {
    std::string note = alias + "=" + text + " read as";
    std::string sep = " ";
    for (const auto& key : detail::all_keys()) {
      const auto it = r.set_by.find(key.name);
      if (it == r.set_by.end() || it->second != alias) continue;
      note += sep + key.name + "=" + detail::format_value(r.cfg, key);
      sep = ", ";
    }
    notes.push_back(note);
  }
  return notes;
}

// A validation error about a key the user wrote under another name says which.
[[noreturn]] void rethrow_naming_aliases(const UserError& e, const Reading& r) {
  std::string what = e.what();
  std::string given_as;
  const auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (const auto& [key, name] : r.set_by) {
    if (key == name) continue;
    for (size_t at = what.find(key); at != std::string::npos; at = what.find(key, at + 1)) {
      const size_t end = at + key.size();
      if ((at == 0 || !is_name_char(what[at - 1])) && (end == what.size() || !is_name_char(what[end]))) {
        given_as += (given_as.empty() ? " (" : ", ") + key + " was given as " + name;
        break;
      }
    }
  }
  throw UserError(given_as.empty() ? what : what + given_as + ")");
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

void apply_file_keys(Reading& r, const YAML::Node& root, const std::string& source) {
  std::map<std::string, int> line_of;  // key → 1-based line where it was first given
  for (const auto& entry : root) {
    const YAML::Node& key_node = entry.first;
    if (!key_node.IsScalar())
      throw UserError(at(source, key_node.Mark()) + ": keys must be plain names");
    const std::string& name = key_node.Scalar();
    if (!detail::find_key(name) && !detail::find_alias(name)) detail::throw_unknown_key(name);
    const int line = key_node.Mark().line + 1;
    if (const auto [it, fresh] = line_of.emplace(name, line); !fresh)
      throw UserError(name + ": given twice in " + source + " (lines " +
                      std::to_string(it->second) + " and " + std::to_string(line) + ")");
    set_name(r, name, entry.second);
  }
}

void apply_override(Reading& r, const std::string& arg) {
  const size_t eq = arg.find('=');
  if (arg.starts_with("--"))  // a command-line flag given after CONFIG.yml (SPEC §2)
    throw UserError(arg.substr(0, eq) + ": flags go before CONFIG.yml; after it only key=value overrides");
  if (eq == std::string::npos || eq == 0) throw UserError(arg + ": expected key=value");
  const std::string name = arg.substr(0, eq), text = arg.substr(eq + 1);
  if (!detail::find_key(name) && !detail::find_alias(name)) detail::throw_unknown_key(name);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UserError(name + ": cannot read '" + text + "' as a YAML value (" + e.msg + ")");
  }
  set_name(r, name, value);
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
  Reading r;
  apply_file_keys(r, parse_document(yaml, source_name), source_name);
  for (const auto& arg : overrides) apply_override(r, arg);
  try {
    detail::validate(r.cfg, r.given);
  } catch (const UserError& e) {
    rethrow_naming_aliases(e, r);
  }
  r.cfg.alias_notes = alias_notes(r);
  return r.cfg;
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
