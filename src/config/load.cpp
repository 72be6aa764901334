// src/config/load.cpp — reading a config: a flat YAML map of known keys (each at most once), then
// MaxText-style key=value overrides applied in order (later wins; values are YAML scalars or
// flow lists), then validation of the result. Other trainers' names (config/aliases.h) are read as
// the keys they mean, with a note each; an alias and the key it sets both given is an error.
// to_yaml() writes every key back in a form that from_yaml_text() reads to the same Config; unset
// keys are written as null.
#include <algorithm>
#include <cctype>
#include <cstdlib>
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
  std::vector<std::string> meaning_notes;  // what a name that means something else elsewhere is read as (below)
  std::vector<std::string> errors;         // every problem found while reading, reported together
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
  if (name == "eval_steps" && key == "eval_interval") return "eval_steps is TRL's name for it";
  const detail::Alias* alias = detail::find_alias(name);
  if (!alias) return "";
  if (key == alias->key) return name + " is " + alias->origin + "'s name for it";
  if (alias->rule == detail::AliasRule::kScheduler) {  // the aliases of several keys
    if (key == "warmup_steps_fraction") return name + "=constant means no warmup; constant_with_warmup keeps it";
    if (key == "learning_rate_final_fraction") return name + "'s linear and cosine decay to 0, as transformers' do";
    return name + " reads transformers' schedule";
  }
  return name + " sets it too";
}

// `name` is about to set `key`: an error if another name (the key itself or an alias) already did.
void claim(Reading& r, const std::string& key, const std::string& name) {
  const auto [it, fresh] = r.set_by.emplace(key, name);
  if (fresh || it->second == name) return;
  const std::string& earlier = it->second;
  std::string why = whose(name, key);
  const std::string earlier_why = whose(earlier, key);
  if (!earlier_why.empty()) why += (why.empty() ? "" : ", ") + earlier_why;
  throw UserError(name + ": " + earlier + " is given too, and both set " + key + (why.empty() ? "" : " (" + why + ")") +
                  "; give one of them");
}

// One `name: value` of the file or `name=value` override: a key, or an alias of one or two keys.
// transformers >= 5's warmup_steps below 1 is a fraction of the steps (TrainingArguments.get_warmup_steps).
bool is_warmup_fraction(const std::string& name, const YAML::Node& value) {
  if (name != "warmup_steps" || !value.IsScalar()) return false;
  const std::string& text = value.Scalar();
  if (text.find_first_of(".eE") == std::string::npos) return false;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  return end && *end == '\0' && x > 0 && x < 1;
}

void set_name(Reading& r, const std::string& name, const YAML::Node& value) {
  if (is_warmup_fraction(name, value)) {
    claim(r, "warmup_steps_fraction", name);
    assign(r, *detail::find_key("warmup_steps_fraction"), value);
    r.meaning_notes.push_back(name + "=" + value.Scalar() + " read as warmup_steps_fraction=" + value.Scalar() +
                              " (transformers >= 5: a warmup_steps below 1 is a fraction of the steps)");
    return;
  }
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
    if (sep == ", ") notes.push_back(note);  // names that set no key (eval_strategy, report_to): resolve_meanings
  }
  return notes;
}

// A validation error about a key the user wrote under another name says which.
std::string naming_aliases(std::string what, const Reading& r) {
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
  return given_as.empty() ? what : what + given_as + ")";
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
    const int line = key_node.Mark().line + 1;
    try {
      if (!detail::find_key(name) && !detail::find_alias(name)) detail::throw_unknown_key(name);
      if (const auto [it, fresh] = line_of.emplace(name, line); !fresh)
        throw UserError(name + ": given twice in " + source + " (lines " + std::to_string(it->second) + " and " +
                        std::to_string(line) + ")");
      set_name(r, name, entry.second);
    } catch (const UserError& e) {  // the next key is read too: every problem is reported at once
      r.errors.insert(r.errors.end(), e.messages().begin(), e.messages().end());
    }
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

// ---- Names that mean something else in other trainers (SPEC §3 "Keys whose meaning differs") ----
// sft-dp's eval_steps and seed are also TRL's (and axolotl's) names, with other meanings; TRL's
// eval_strategy/save_strategy and max_steps beside num_train_epochs only mean something together. In a
// config that uses another trainer's names (any alias), these are read in that trainer's meaning; in
// sft-dp's own, the name keeps sft-dp's meaning. Either way one `config:` line says what was read.

// The value the user wrote for `name` (an alias), or "" if it was not given.
std::string alias_value(const Reading& r, const std::string& name) {
  for (const auto& [alias, text] : r.aliases_used)
    if (alias == name) return text;
  return "";
}

bool given_as_itself(const Reading& r, const std::string& key) {
  const auto it = r.set_by.find(key);
  return it != r.set_by.end() && it->second == key && r.given.contains(key);
}
bool set_by_anyone(const Reading& r, const std::string& key) { return r.set_by.contains(key); }

void set_int(Reading& r, const char* key, int64_t value, const std::string& by) {
  claim(r, key, by);
  assign(r, *detail::find_key(key), YAML::Node(std::to_string(value)));
}

// eval_steps read as TRL's: every N steps (with eval_strategy: steps, or none), or not at all (no).
void resolve_eval(Reading& r, const std::string& theirs) {
  const std::string strategy = alias_value(r, "eval_strategy").empty() ? alias_value(r, "evaluation_strategy")
                                                                       : alias_value(r, "eval_strategy");
  const bool steps_given = given_as_itself(r, "eval_steps");
  const int64_t n = r.cfg.eval_steps;
  if (steps_given) {  // TRL's eval_steps: not a count of eval batches; the whole eval set is read
    assign(r, *detail::find_key("eval_steps"), YAML::Node(YAML::NodeType::Null));
    r.set_by.erase("eval_steps");
  }
  if (strategy == "no") {
    r.meaning_notes.push_back("eval_strategy=no: no evaluation between steps" +
                              std::string(steps_given ? " (eval_steps=" + std::to_string(n) + " not used)" : "") +
                              "; with eval_files sft-dp still evaluates before the first step and at the end");
    return;
  }
  if (steps_given) {
    set_int(r, "eval_interval", n, "eval_steps");
    r.meaning_notes.push_back("eval_steps=" + std::to_string(n) + " read as eval_interval=" + std::to_string(n) +
                              " (" + theirs + ": evaluate every " + std::to_string(n) +
                              " steps; sft-dp's eval_steps, a number of eval batches, is left at the whole set)");
  } else if (strategy == "steps" && !set_by_anyone(r, "eval_interval")) {  // transformers: eval_steps = logging_steps
    set_int(r, "eval_interval", r.cfg.log_period, "eval_strategy");
    r.meaning_notes.push_back("eval_strategy=steps without eval_steps read as eval_interval=" +
                              std::to_string(r.cfg.log_period) + " (transformers evaluates every logging_steps then)");
  }
}

void resolve_save(Reading& r) {
  const std::string strategy = alias_value(r, "save_strategy");
  if (strategy == "no") {
    const bool steps_given = r.set_by.contains("checkpoint_period") && r.set_by["checkpoint_period"] == "save_steps";
    if (steps_given) r.set_by.erase("checkpoint_period");
    set_int(r, "checkpoint_period", 0, "save_strategy");
    r.meaning_notes.push_back(std::string("save_strategy=no read as checkpoint_period=0") +
                              (steps_given ? " (save_steps not used)" : "") +
                              ": no checkpoints between steps; sft-dp still writes one at the end and on a stop");
  } else if (strategy == "steps" && !set_by_anyone(r, "checkpoint_period")) {
    set_int(r, "checkpoint_period", 500, "save_strategy");
    r.meaning_notes.push_back("save_strategy=steps without save_steps read as checkpoint_period=500 (transformers' "
                              "default save_steps)");
  }
}

// TRL's defaults that differ from sft-dp's, for the keys a TRL-style config leaves out: one line.
void note_silent_defaults(Reading& r, const std::string& dialect) {
  std::string differ;
  const auto add = [&](const std::string& item) { differ += (differ.empty() ? "" : "; ") + item; };
  if (!set_by_anyone(r, "lr_schedule"))
    add("lr_scheduler_type linear -> lr_schedule cosine to learning_rate_final_fraction " +
        detail::format_double(r.cfg.learning_rate_final_fraction));
  if (!set_by_anyone(r, "steps") && !set_by_anyone(r, "num_epochs")) add("num_train_epochs 3 -> 1 epoch");
  if (!set_by_anyone(r, "warmup_steps_fraction") && !set_by_anyone(r, "warmup_steps"))
    add("no warmup -> warmup_steps_fraction " + detail::format_double(r.cfg.warmup_steps_fraction));
  if (!set_by_anyone(r, "learning_rate")) add("learning_rate 2e-05 (SFTConfig) -> " + detail::format_double(r.cfg.learning_rate));
  if (!set_by_anyone(r, "adam_weight_decay"))
    add("weight_decay 0.0 -> adam_weight_decay " + detail::format_double(r.cfg.adam_weight_decay));
  if (!set_by_anyone(r, "adam_b2")) add("adam_beta2 0.999 -> adam_b2 " + detail::format_double(r.cfg.adam_b2));
  if (!set_by_anyone(r, "seed")) add("seed 42 -> seed 0");
  if (!differ.empty())
    r.meaning_notes.push_back("where this config is silent, sft-dp's defaults apply, not " + dialect + "'s: " + differ);
}

void resolve_meanings(Reading& r) {
  // warmup_steps beside a fraction: the count wins, as transformers' warmup_steps wins over warmup_ratio.
  if (r.cfg.warmup_steps >= 0 && r.given.contains("warmup_steps_fraction") && r.given.contains("warmup_steps"))
    r.meaning_notes.push_back("warmup_steps=" + std::to_string(r.cfg.warmup_steps) + " is given: " +
                              r.set_by["warmup_steps_fraction"] + "=" +
                              detail::format_double(r.cfg.warmup_steps_fraction) +
                              " not used (a number of warmup steps wins over a fraction, as in transformers)");
  // The first other trainer's name makes the config theirs (aliases.h: every alias has one origin).
  std::string dialect, example;
  for (const auto& [alias, text] : r.aliases_used)
    if (const detail::Alias* a = detail::find_alias(alias)) {
      dialect = a->origin, example = alias;
      break;
    }
  const std::string theirs = dialect + "'s meaning, as this config uses " + dialect + "'s names such as " + example;
  // max_steps beside num_train_epochs: transformers trains max_steps and ignores the epochs.
  if (r.set_by.contains("steps") && r.set_by["steps"] == "max_steps" && r.cfg.steps != -1 &&
      r.set_by.contains("num_epochs") && r.set_by["num_epochs"] == "num_train_epochs") {
    const std::string epochs = alias_value(r, "num_train_epochs");
    assign(r, *detail::find_key("num_epochs"), YAML::Node(YAML::NodeType::Null));
    r.set_by.erase("num_epochs");
    r.meaning_notes.push_back("num_train_epochs=" + epochs + " not used: max_steps=" + std::to_string(r.cfg.steps) +
                              " is given, and max_steps wins (as in transformers)");
  }
  if (!dialect.empty()) {
    // A transformers schedule without a warmup key warms up as transformers does by default: not at all.
    const auto schedule = r.set_by.find("lr_schedule_convention");
    if (schedule != r.set_by.end() && schedule->second != "lr_schedule_convention" &&
        !set_by_anyone(r, "warmup_steps_fraction") && !set_by_anyone(r, "warmup_steps")) {
      set_int(r, "warmup_steps", 0, schedule->second);
      r.meaning_notes.push_back(schedule->second + " without warmup_steps or warmup_ratio: warmup_steps=0 "
                                "(transformers' default)");
    }
    resolve_eval(r, theirs);
    resolve_save(r);
    if (given_as_itself(r, "seed")) {
      std::string note = "seed=" + std::to_string(r.cfg.seed) + " read as seed=" + std::to_string(r.cfg.seed);
      if (!set_by_anyone(r, "data_shuffle_seed")) {
        set_int(r, "data_shuffle_seed", r.cfg.seed, "seed");
        note += ", data_shuffle_seed=" + std::to_string(r.cfg.seed);
      }
      r.meaning_notes.push_back(note + " (" + theirs + ": the seed of everything, the data order included)");
    }
    if (const std::string to = alias_value(r, "report_to"); !to.empty())
      r.meaning_notes.push_back("report_to=" + to + ": sft-dp always writes TensorBoard events (<run>/tensorboard/) "
                                "and <run>/metrics.jsonl, and reports nowhere else");
    if (dialect == "TRL") note_silent_defaults(r, dialect);
    return;
  }
  if (given_as_itself(r, "eval_steps"))
    r.meaning_notes.push_back("eval_steps=" + std::to_string(r.cfg.eval_steps) + ": sft-dp evaluates only the first " +
                              std::to_string(r.cfg.eval_steps) + " batches of the eval set; to evaluate every " +
                              std::to_string(r.cfg.eval_steps) + " steps (TRL's eval_steps) write eval_interval: " +
                              std::to_string(r.cfg.eval_steps));
  if (given_as_itself(r, "seed") && r.cfg.seed != Config{}.seed)  // at its default it changes nothing
    r.meaning_notes.push_back("seed=" + std::to_string(r.cfg.seed) + ": seeds the random initial weights (none with "
                              "load_parameters_path) and LoRA's A and dropout masks; the data order is "
                              "data_shuffle_seed's (" + std::to_string(r.cfg.data_shuffle_seed) + ")");
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
  for (const auto& arg : overrides) {
    try {
      apply_override(r, arg);
    } catch (const UserError& e) {
      r.errors.insert(r.errors.end(), e.messages().begin(), e.messages().end());
    }
  }
  try {
    resolve_meanings(r);
  } catch (const UserError& e) {
    r.errors.insert(r.errors.end(), e.messages().begin(), e.messages().end());
  }
  try {
    detail::validate(r.cfg, r.given);
  } catch (const UserError& e) {
    for (const auto& m : e.messages()) r.errors.push_back(naming_aliases(m, r));
  }
  if (!r.errors.empty()) throw UserError(r.errors);
  r.cfg.alias_notes = alias_notes(r);
  r.cfg.alias_notes.insert(r.cfg.alias_notes.end(), r.meaning_notes.begin(), r.meaning_notes.end());
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
