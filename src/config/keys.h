// src/config/keys.h — internal to src/config: the table of every SPEC §3 key (name, section,
// the Config field it sets), strict YAML-scalar parsing into those fields, formatting back to
// YAML, and the whole-config validation. Every failure is UserError("<key>: <reason>").
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sftdp/config.h"

namespace sftdp::config::detail {

using Field = std::variant<int64_t Config::*, double Config::*, bool Config::*,
                           std::string Config::*, std::vector<std::string> Config::*>;

struct KeySpec {
  const char* name;
  const char* section;  // heading in to_yaml(): Run, Batch, Data, Model, Optimiser, ...
  Field field;
  // Integer and number keys: null means "unset" and is stored as -1; an explicit integer must
  // be >= 1 and an explicit number > 0 (validate() rejects an explicit -1). String and list keys
  // always accept null as "" / [].
  bool unset_allowed = false;
};

// Every key, in the order to_yaml() writes them.
const std::vector<KeySpec>& all_keys();
// nullptr when the name is not a key.
const KeySpec* find_key(std::string_view name);
// The known key nearest to `name` by edit distance (for "did you mean ...?").
std::string closest_key(std::string_view name);
// UserError("<name>: unknown key (did you mean <closest>?)").
[[noreturn]] void throw_unknown_key(std::string_view name);

// Names of the keys whose value in effect was written by the user (not null, not a default).
using GivenKeys = std::set<std::string, std::less<>>;

// Parses `value` as the key's type and stores it in cfg. Throws UserError on a wrong type
// ("<key>: expected an integer, got 'abc'"); ranges are checked later by validate().
void set_from_yaml(Config& cfg, const KeySpec& key, const YAML::Node& value);
// The key's current value as YAML text that set_from_yaml() reads back to the same value.
std::string format_value(const Config& cfg, const KeySpec& key);
// Shortest text that parses back to exactly x, always with a '.' or exponent ("0.1", "1.0e-08").
std::string format_double(double x);

// Checks every value and every relation between keys (not the world-size-dependent batch
// divisibility: resolve_batch() does that). Throws UserError naming the key at fault. A key in
// `given` whose stored value is -1 was written as -1, not null, and is an error.
void validate(const Config& cfg, const GivenKeys& given);

}  // namespace sftdp::config::detail
