// src/generate/options.h — sft_generate's command line (SPEC §2): its flags, parsed and checked (a bad
// flag or value is a UserError naming it), and its --help text.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sftdp/generate.h"

namespace sftdp::generate {

struct Options {
  std::string model, adapter, prompt, chat, prompt_ids, hardware = "auto";
  bool has_prompt = false, has_chat = false, has_ids = false, timing = false;
  int max_new_tokens = 64, max_length = 0;
  Sampling sampling;
  std::vector<int32_t> stop_ids;
};

void usage(FILE* f);
// The options of argv; --help prints usage and exits 0.
Options parse_options(int argc, char** argv);
// Token ids separated by white space (what: the flag or line, for the UserError).
std::vector<int32_t> parse_ids(const std::string& what, const std::string& text);

}  // namespace sftdp::generate
