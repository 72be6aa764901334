// sft_generate --model PATH [--adapter DIR] [--prompt TEXT | --chat TEXT | --prompt-ids "ID ..."] [options]
// Text from a trained model (SPEC §2): an sft-dp checkpoint, either format (a LoRA checkpoint's adapters merged into
// its base) or a Hugging Face directory, optionally with a PEFT adapter merged in; every family (GPT-2,
// Llama, Qwen2, Qwen3). Greedy by default, or sampled (--temperature, --top-k, --top-p, --seed).
// --prompt / --chat encode with sft_prepare's byte tokenizer (byte-vocabulary models); --prompt-ids
// takes token ids, and without a prompt flag each stdin line of ids is one prompt (scripts/generate.py
// tokenises Hugging Face text and chat templates and calls this). Exit 0 ok, 2 bad usage or input
// (one `error:` line), 1 anything else.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "generate/options.h"
#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/generate.h"

namespace {
namespace gen = sftdp::generate;
using sftdp::UserError;
using gen::Options;

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
  for (const auto& note : m.notes) std::fprintf(stderr, "sft_generate: %s\n", note.c_str());
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
    prompts.push_back(gen::parse_ids("--prompt-ids", o.prompt_ids));
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
      std::fprintf(stderr,
                   "timing: prefill %d tokens %.4f s (%.1f tokens/s), decode %d tokens %.4f s (%.1f tokens/s)\n",
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
        prompt = gen::parse_ids("stdin", line);
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
    return run(gen::parse_options(argc, argv));
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
