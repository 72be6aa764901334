// sft_prepare --input X.jsonl --output Y.h5 --max-length T [--overflow drop|truncate] [--pack]
// Turns JSONL prompt/completion pairs or chat messages into a SPEC §4 data file (byte tokenizer).
// Exit 0 success, 2 bad usage or input (one `error:` line, no output file), 1 anything else.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/data_writer.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "sftdp/check.h"

namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: sft_prepare --input X.jsonl --output Y.h5 --max-length T\n"
               "                   [--overflow drop|truncate] [--pack]\n"
               "  Each JSONL line is {\"prompt\": P, \"completion\": C} or\n"
               "  {\"messages\": [{\"role\": \"system|user|assistant\", \"content\": X}, ...]}.\n"
               "  Tokens: <|bos|> P C <|eos|> (loss on C and <|eos|>), or <|bos|> then per turn\n"
               "  <|role|> X <|end|>, then <|eos|> (loss on assistant X, its <|end|>, and <|eos|>\n"
               "  when the assistant speaks last). A row of length T holds inputs tokens[0..L-2]\n"
               "  and targets tokens[1..L-1], padded with <|pad|> (loss weight 0).\n"
               "  --max-length T      row length; must equal max_target_length in the config\n"
               "  --overflow drop     examples longer than T+1 tokens are left out (default)\n"
               "  --overflow truncate they are cut to their first T+1 tokens\n"
               "  --pack              several examples per row (/segment_ids, /positions)\n"
               "Byte-level tokenizer (for a Hugging Face tokenizer.json / GPT-2 BPE and chat\n"
               "templates use scripts/sft_prepare_hf.py --tokenizer DIR, same flags):\n%s"
               "Exit: 0 ok, 2 bad usage or input (no output file written), 1 other failure.\n",
               sftdp::data::tok::table_text().c_str());
}

int parse_length(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > (1 << 24))
    throw sftdp::UserError("--max-length: expected a positive integer, got \"" + text + "\"");
  return static_cast<int>(v);
}

// Writing the output replaces the file at that path, so an output that is the input (the same
// spelling, another spelling, or a link to it) would destroy the input: refuse it up front.
void refuse_output_over_input(const std::string& input, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool same = input == output || (fs::exists(output, ec) && fs::exists(input, ec) &&
                                        fs::equivalent(input, output, ec));
  if (same) throw sftdp::UserError("--output: is the same file as --input");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sftdp::data;
  try {
    std::string input, output;
    PrepareOptions options;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        usage(stdout);
        return 0;
      }
      if (arg == "--tokenizer")
        throw sftdp::UserError(
            "--tokenizer: sft_prepare has only the byte tokenizer; for a Hugging Face tokenizer "
            "(and its chat template) run scripts/sft_prepare_hf.py --tokenizer DIR with the same "
            "flags (data/README.md)");
      if (arg == "--pack") {
        options.pack = true;
        continue;
      }
      if (arg != "--input" && arg != "--output" && arg != "--max-length" && arg != "--overflow")
        throw sftdp::UserError("unknown argument \"" + arg + "\" (see sft_prepare --help)");
      if (i + 1 >= argc) throw sftdp::UserError(arg + ": needs a value");
      const std::string value = argv[++i];
      if (arg == "--input")
        input = value;
      else if (arg == "--output")
        output = value;
      else if (arg == "--max-length")
        options.T = parse_length(value);
      else if (value == "drop" || value == "truncate")
        options.overflow = value == "drop" ? Overflow::kDrop : Overflow::kTruncate;
      else
        throw sftdp::UserError("--overflow: expected drop or truncate, got \"" + value + "\"");
    }
    if (input.empty() || output.empty() || options.T == 0)
      throw sftdp::UserError("--input, --output and --max-length are required");
    refuse_output_over_input(input, output);

    const Prepared prepared = prepare_jsonl(input, options);
    write_data_file(output, prepared.rows, tok::kVocabSize, byte_tokenizer_identity());
    const PrepareStats& s = prepared.stats;
    std::printf("sft_prepare: %s -> %s: %lld examples, %lld rows of T=%d%s\n", input.c_str(),
                output.c_str(), static_cast<long long>(s.examples),
                static_cast<long long>(prepared.rows.rows), options.T,
                options.pack ? " (packed)" : "");
    std::printf(
        "  dropped (longer than %d tokens): %lld, truncated: %lld, completion tokens: %lld\n",
        options.T + 1, static_cast<long long>(s.dropped), static_cast<long long>(s.truncated),
        static_cast<long long>(s.completion_tokens));
    return 0;
  } catch (const sftdp::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
