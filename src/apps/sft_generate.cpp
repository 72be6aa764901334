// sft_generate --model PATH [--adapter DIR] [--prompt TEXT | --chat TEXT | --prompt-ids "ID ..."] [options]
// Text from a trained model (SPEC §2): an sft-dp checkpoint (a LoRA checkpoint's adapters merged into
// its base) or a Hugging Face directory, optionally with a PEFT adapter merged in; every family (GPT-2,
// Llama, Qwen2, Qwen3). Greedy by default, or sampled (--temperature, --top-k, --top-p, --seed).
// --prompt / --chat encode with sft_prepare's byte tokenizer (byte-vocabulary models); --prompt-ids
// takes token ids, and without a prompt flag each stdin line of ids is one prompt (scripts/generate.py
// tokenises Hugging Face text and chat templates and calls this). Exit 0 ok, 2 bad usage or input
// (one `error:` line), 1 anything else.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/generate.h"

namespace {
namespace gen = sftdp::generate;
using sftdp::UserError;

void usage(FILE* f) {
  std::fprintf(f,
               "usage: sft_generate --model PATH [--adapter DIR] [--prompt TEXT | --chat TEXT | --prompt-ids \"ID ...\"]\n"
               "  --model PATH          an sft-dp checkpoint .h5 (LoRA: merged into its base) or a Hugging Face\n"
               "                        model directory (gpt2, llama, mistral, qwen2, qwen3)\n"
               "  --adapter DIR         a PEFT LoRA adapter directory, merged into the model (W + alpha/r B A)\n"
               "  --prompt TEXT         byte-tokenizer models: <|bos|> + TEXT's bytes; prints the completion\n"
               "  --chat TEXT           byte-tokenizer models: <|bos|><|user|>TEXT<|end|><|assistant|>, stops at <|end|>\n"
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

struct Options {
  std::string model, adapter, prompt, chat, prompt_ids, hardware = "auto";
  bool has_prompt = false, has_chat = false, has_ids = false, timing = false;
  int max_new_tokens = 64, max_length = 0;
  gen::Sampling sampling;
  std::vector<int32_t> stop_ids;
};

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

std::vector<int32_t> parse_ids(const std::string& what, const std::string& text) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) ids.push_back(static_cast<int32_t>(to_int(what, word)));
  return ids;
}

Options parse(int argc, char** argv) {
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
  if (o.has_prompt + o.has_chat + o.has_ids > 1) throw UserError("--prompt, --chat and --prompt-ids exclude each other");
  if (o.max_new_tokens < 0) throw UserError("--max-new-tokens: must be >= 0, got " + std::to_string(o.max_new_tokens));
  if (o.hardware != "cpu" && o.hardware != "gpu" && o.hardware != "auto")
    throw UserError("--hardware: expected cpu, gpu or auto, got \"" + o.hardware + "\"");
  gen::check_sampling(o.sampling);
  return o;
}

const sftdp::Ops& pick_ops(const std::string& hardware) {
  if (hardware != "cpu") {
#ifdef SFTDP_WITH_CUDA
    if (sftdp::cuda_device_available()) {
      sftdp::cuda_select_device(0);  // CUDA_VISIBLE_DEVICES picks which
      return *sftdp::cuda_ops(sftdp::GemmInputs::kFp32);
    }
#endif
    if (hardware == "gpu") throw UserError("--hardware gpu: no usable CUDA device (or a build without CUDA)");
  }
  return sftdp::cpu_ops();
}

std::string byte_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t t : ids)
    if (t >= 0 && t < 256) s += static_cast<char>(t);
  return s;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

int run(const Options& o) {
  const gen::LoadedModel m = gen::load_model(o.model, o.adapter);
  std::vector<int32_t> stops = o.stop_ids.empty() ? m.eos_ids : o.stop_ids;
  namespace tok = sftdp::data::tok;
  std::vector<std::vector<int32_t>> prompts;
  if (o.has_prompt || o.has_chat) {
    if (!m.byte_tokenizer)
      throw UserError(std::string(o.has_chat ? "--chat" : "--prompt") + ": " + o.model + " has a vocabulary of " +
                      std::to_string(m.d.V) + " tokens, not the byte tokenizer's " + std::to_string(tok::kVocabSize) +
                      ": tokenise with scripts/generate.py (Hugging Face tokenizers and chat templates)");
    std::vector<int32_t> ids = {tok::kBos};
    if (o.has_chat) ids.push_back(tok::kUser);
    tok::append_bytes(o.has_chat ? o.chat : o.prompt, ids);
    if (o.has_chat) ids.push_back(tok::kEnd), ids.push_back(tok::kAssistant);
    prompts.push_back(ids);
  } else if (o.has_ids) {
    prompts.push_back(parse_ids("--prompt-ids", o.prompt_ids));
  }
  const sftdp::Ops& ops = pick_ops(o.hardware);
  const int positions = m.d.maxT > 0 ? std::min(m.d.maxT, 4096) : 4096;
  gen::Generator g(m, ops, o.max_length > 0 ? o.max_length : positions);
  std::fprintf(stderr, "sft_generate: %s on %s, cache of %d positions\n", m.source.c_str(), ops.name, g.max_T());
  auto one = [&](const std::vector<int32_t>& prompt) {
    if (prompt.empty()) throw UserError("an empty prompt (no token ids)");
    gen::Sampler sampler(o.sampling);
    gen::Timing t;
    std::vector<int32_t> out = gen::generate(g, sampler, prompt, o.max_new_tokens, stops, &t);
    if (o.timing)
      std::fprintf(stderr, "timing: prefill %d tokens %.4f s (%.1f tokens/s), decode %d tokens %.4f s (%.1f tokens/s)\n",
                   t.prefill_tokens, t.prefill_s, t.prefill_tokens / t.prefill_s, t.decode_steps, t.decode_s,
                   t.decode_steps ? t.decode_steps / t.decode_s : 0.0);
    return out;
  };
  if (prompts.empty()) {  // stdin: one prompt of ids per line
    std::string line;
    int n = 0;
    while (std::getline(std::cin, line)) {
      ++n;
      std::vector<int32_t> prompt;
      try {
        prompt = parse_ids("stdin", line);
        std::printf("%s\n", ids_text(one(prompt)).c_str());
      } catch (const UserError& e) {
        throw UserError("stdin line " + std::to_string(n) + ": " + e.what());
      }
      std::fflush(stdout);
    }
    return 0;
  }
  const std::vector<int32_t> out = one(prompts[0]);
  if (o.has_ids) {
    std::printf("%s\n", ids_text(out).c_str());
  } else {
    std::vector<int32_t> text = out;
    if (!text.empty() && std::find(stops.begin(), stops.end(), text.back()) != stops.end()) text.pop_back();
    std::printf("%s\n", byte_text(text).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
