// sft_export CHECKPOINT OUT_DIR [--tokenizer DIR_OR_FILE] [--merge]
// sft_export --consolidate CHECKPOINT OUT.h5
// Writes the model of an sft-dp checkpoint (a sharded step_<S>/ directory or a step_<S>.h5 file) as a Hugging Face directory (GPT2LMHeadModel, or
// Llama/Qwen2/Qwen3ForCausalLM for the Llama family: config.json, generation_config.json,
// model.safetensors, tokenizer files copied through) that
// transformers.AutoModelForCausalLM.from_pretrained loads; a LoRA checkpoint's adapters as a PEFT
// adapter directory (peft.PeftModel.from_pretrained), or with --merge the merged model. Missing parent
// directories of OUT_DIR are created, as sft_prepare creates its output's (and removed again when
// the export fails). --consolidate writes the whole checkpoint (params, moments, cursor, config) as
// one single-file checkpoint (SPEC §5), which sft-dp resumes from like any other. Exit 0 ok, 2 bad usage or input (one `error:` line, nothing written), 1 anything else.
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "hf/hf_dir.h"
#include "sftdp/check.h"

namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: sft_export CHECKPOINT OUT_DIR [--tokenizer DIR_OR_FILE] [--merge]\n"
               "       sft_export --consolidate CHECKPOINT OUT.h5\n"
               "  CHECKPOINT     an sft-dp checkpoint: out/<run>/checkpoints/step_<S> (a sharded\n"
               "                 directory) or a single file step_<S>.h5\n"
               "  OUT_DIR        created with its missing parents (must not exist, or be empty): config.json,\n"
               "                 generation_config.json, model.safetensors (fp32; HF names of the\n"
               "                 model's family: gpt2, llama, qwen2 or qwen3)\n"
               "  --tokenizer    copy tokenizer.json / tokenizer_config.json / vocab.json /\n"
               "                 merges.txt / special_tokens_map.json / added_tokens.json /\n"
               "                 chat_template.jinja / chat_template.json from this directory (or file)\n"
               "  LoRA checkpoints (lora_rank > 0): OUT_DIR becomes a PEFT adapter directory\n"
               "                 (adapter_config.json, adapter_model.safetensors);\n"
               "  --merge        instead the whole model with the adapters merged (W + alpha/r B A),\n"
               "                 its base read again from the run's load_parameters_path\n"
               "  --consolidate  write the whole checkpoint (params, moments, data cursor, config) as\n"
               "                 one single-file checkpoint OUT.h5 (must not exist)\n"
               "Exit: 0 ok, 2 bad usage or input (nothing written), 1 other failure.\n");
}

namespace fs = std::filesystem;

// Removes the directories create_parents made (innermost first), each only while it is empty.
void remove_created(const std::vector<fs::path>& created) {
  std::error_code ec;
  for (auto it = created.rbegin(); it != created.rend(); ++it)
    if (fs::is_empty(*it, ec)) fs::remove(*it, ec);
}

// Creates the missing parent directories of out_dir; returns those it created, outermost first.
// One it cannot create is an error that leaves none of them behind.
std::vector<fs::path> create_parents(const std::string& out_dir) {
  std::error_code ec;
  fs::path out = fs::absolute(out_dir, ec).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/"
  std::vector<fs::path> missing;
  fs::path p = out.parent_path();
  for (; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.insert(missing.begin(), p);
    if (p == p.parent_path()) break;
  }
  if (!p.empty() && fs::exists(p, ec) && !fs::is_directory(p, ec))
    throw sftdp::UserError(out_dir + ": " + p.string() + " is not a directory");
  std::vector<fs::path> created;
  for (const auto& p : missing) {
    if (!fs::create_directory(p, ec) && ec) {
      remove_created(created);
      throw sftdp::UserError(out_dir + ": cannot create directory " + p.string() + ": " + ec.message());
    }
    created.push_back(p);
  }
  return created;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> positional;
    std::string tokenizer;
    bool merge = false, consolidate = false;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        usage(stdout);
        return 0;
      }
      if (arg == "--merge") {
        merge = true;
      } else if (arg == "--consolidate") {
        consolidate = true;
      } else if (arg == "--tokenizer") {
        if (i + 1 >= argc) throw sftdp::UserError("--tokenizer: needs a value");
        tokenizer = argv[++i];
      } else if (arg.rfind("--", 0) == 0) {
        throw sftdp::UserError("unknown argument \"" + arg + "\" (see sft_export --help)");
      } else {
        positional.push_back(arg);
      }
    }
    if (consolidate) {
      if (positional.size() != 2 || merge || !tokenizer.empty())
        throw sftdp::UserError("--consolidate: expected CHECKPOINT and OUT.h5, nothing else (see sft_export --help)");
      sftdp::hf::consolidate_checkpoint(positional[0], positional[1]);
      std::printf("sft_export: %s -> %s (single-file checkpoint)\n", positional[0].c_str(), positional[1].c_str());
      return 0;
    }
    if (positional.size() != 2) throw sftdp::UserError("expected CHECKPOINT and OUT_DIR (see sft_export --help)");
    const auto created = create_parents(positional[1]);
    try {
      sftdp::hf::export_checkpoint(positional[0], positional[1], tokenizer, merge);
    } catch (...) {
      remove_created(created);
      throw;
    }
    std::printf("sft_export: %s -> %s\n", positional[0].c_str(), positional[1].c_str());
    return 0;
  } catch (const sftdp::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
