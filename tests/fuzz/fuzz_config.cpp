// tests/fuzz/fuzz_config.cpp — fuzzes the config parser (src/config): the input is YAML text, then
// after the first NUL byte key=value overrides separated by NUL or newline. The parser must
// answer with a Config or a UserError, nothing else. A Config it accepts must round-trip:
// to_yaml() read back gives the same YAML, and model_dims / resolve_batch answer without crashing.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_config: %s\n", what.c_str());
  std::abort();
}

void split(const std::string& input, std::string& yaml, std::vector<std::string>& overrides) {
  const size_t nul = input.find('\0');
  yaml = input.substr(0, nul);
  if (nul == std::string::npos) return;
  std::string current;
  for (size_t i = nul + 1; i <= input.size(); ++i) {
    if (i == input.size() || input[i] == '\0' || input[i] == '\n') {
      if (!current.empty()) overrides.push_back(current);
      current.clear();
    } else {
      current += input[i];
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sftdp;
  if (size > 8192) return -1;  // larger inputs add nothing but time; not kept in the corpus
  sftdp::fuzz::internal_errors_abort();
  std::string yaml;
  std::vector<std::string> overrides;
  split(std::string(reinterpret_cast<const char*>(data), size), yaml, overrides);

  config::Config cfg;
  try {
    cfg = config::from_yaml_text(yaml, overrides, "fuzz.yml");
  } catch (const UserError& e) {
    if (std::string(e.what()).empty()) finding("UserError with an empty message");
    return 0;
  }

  // Accepted: the resolved YAML must read back to the same config.
  const std::string resolved = cfg.to_yaml();
  std::string again;
  try {
    again = config::from_yaml_text(resolved, {}, "resolved.yml").to_yaml();
  } catch (const UserError& e) {
    finding("to_yaml() of an accepted config is rejected: " + std::string(e.what()) + "\n" +
            resolved);
  }
  if (again != resolved) finding("to_yaml() does not round-trip:\n" + resolved + "---\n" + again);

  try {
    const config::ModelDims d = config::model_dims(cfg);
    if (d.L < 1 || d.NH < 1 || d.C < 1 || d.F < 1 || d.V < 1 || d.maxT < 1)
      finding("model_dims of an accepted config has a dimension < 1");
  } catch (const UserError&) {
  }
  for (int world : {1, 2, 3, 8}) {
    try {
      const config::BatchPlan plan = config::resolve_batch(cfg, world);
      if (plan.micro_batch < 1 || plan.ga_steps < 1 ||
          plan.micro_batch * plan.ga_steps * world != plan.global_batch)
        finding("resolve_batch gave an inconsistent plan");
    } catch (const UserError&) {
    }
  }
  return 0;
}
