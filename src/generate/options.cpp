// src/generate/options.cpp — sft_generate's flags (options.h).
#include "generate/options.h"

#include <cstdlib>
#include <sstream>

#include "sftdp/check.h"

namespace sftdp::generate {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: sft_generate --model PATH [--adapter DIR]\n"
               "                    [--prompt TEXT | --chat TEXT | --prompt-ids \"ID ...\"] [options]\n"
               "  --model PATH          an sft-dp checkpoint, step_<S> directory or step_<S>.h5 file (LoRA: merged\n"
               "                        into its base), or a Hugging Face model directory (gpt2, llama, mistral,\n"
               "                        qwen2, qwen3)\n"
               "  --adapter DIR         a PEFT LoRA adapter directory, merged into the model (W + alpha/r B A)\n"
               "  --prompt TEXT         byte-tokenizer models: <|bos|> + TEXT's bytes; prints the completion\n"
               "  --chat TEXT           byte-tokenizer models: <|bos|><|user|>TEXT<|end|><|assistant|>;\n"
               "                        stops at <|end|>\n"
               "  --prompt-ids \"ID ...\" token ids; prints the generated ids (the stop id included)\n"
               "                        (no prompt flag: one prompt of ids per stdin line, one line of ids out each)\n"
               "  --max-new-tokens N    at most N new tokens (default 64)\n"
               "  --max-length N        positions in the key/value cache, prompt included (default: the model's\n"
               "                        max positions, at most 4096)\n"
               "  --temperature T       0 (default) = greedy; else sample from softmax(logits / T)\n"
               "  --top-k K             sample among the K most likely tokens (0 = all)\n"
               "  --top-p P             ... and among the fewest most likely whose probability reaches P (1 = all)\n"
               "  --seed S              the sampler's seed (default 0): the same seed, the same tokens\n"
               "  --stop-id ID          stop after this id (repeatable; default: the model's eos ids)\n"
               "  --hardware cpu|gpu|auto  where to run (default auto: the GPU if one is usable)\n"
               "  --timing              print prefill and decode tokens/s to stderr\n"
               "Exit: 0 ok, 2 bad usage or input, 1 other failure.\n");
}



namespace {

long long to_int(const std::string& flag, const std::string& v) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw UserError(flag + ": expected an integer, got \"" + v + "\"");
  return x;
}

double to_double(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw UserError(flag + ": expected a number, got \"" + v + "\"");
  return x;
}

}  // namespace

std::vector<int32_t> parse_ids(const std::string& what, const std::string& text) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) ids.push_back(static_cast<int32_t>(to_int(what, word)));
  return ids;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      std::exit(0);
    }
    if (arg == "--timing") {
      o.timing = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) throw UserError("unexpected argument \"" + arg + "\" (see sft_generate --help)");
    if (i + 1 >= argc) throw UserError(arg + ": needs a value");
    const std::string v = argv[++i];
    if (arg == "--model") o.model = v;
    else if (arg == "--adapter") o.adapter = v;
    else if (arg == "--prompt") o.prompt = v, o.has_prompt = true;
    else if (arg == "--chat") o.chat = v, o.has_chat = true;
    else if (arg == "--prompt-ids") o.prompt_ids = v, o.has_ids = true;
    else if (arg == "--hardware") o.hardware = v;
    else if (arg == "--max-new-tokens") o.max_new_tokens = static_cast<int>(to_int(arg, v));
    else if (arg == "--max-length") o.max_length = static_cast<int>(to_int(arg, v));
    else if (arg == "--temperature") o.sampling.temperature = to_double(arg, v);
    else if (arg == "--top-k") o.sampling.top_k = static_cast<int>(to_int(arg, v));
    else if (arg == "--top-p") o.sampling.top_p = to_double(arg, v);
    else if (arg == "--seed") o.sampling.seed = static_cast<uint64_t>(to_int(arg, v));
    else if (arg == "--stop-id") o.stop_ids.push_back(static_cast<int32_t>(to_int(arg, v)));
    else throw UserError("unknown argument \"" + arg + "\" (see sft_generate --help)");
  }
  if (o.model.empty()) throw UserError("--model: required (see sft_generate --help)");
  if (o.has_prompt + o.has_chat + o.has_ids > 1)
    throw UserError("--prompt, --chat and --prompt-ids exclude each other");
  if (o.max_new_tokens < 0) throw UserError("--max-new-tokens: must be >= 0, got " + std::to_string(o.max_new_tokens));
  if (o.hardware != "cpu" && o.hardware != "gpu" && o.hardware != "auto")
    throw UserError("--hardware: expected cpu, gpu or auto, got \"" + o.hardware + "\"");
  check_sampling(o.sampling);
  return o;
}

}  // namespace sftdp::generate
