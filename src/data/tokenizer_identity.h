// src/data/tokenizer_identity.h — which tokenizer made a data file (SPEC §4 root attributes
// `tokenizer` and `tokenizer_hash`) and the start-up check that the model was made for the same one.
// The hash is FNV-1a 64 over the bytes of the tokenizer's defining files, in this order:
// tokenizer.json if present, else vocab.json then merges.txt, else encoder.json then vocab.bpe;
// the byte tokenizer's is the hash of the string "sft-dp byte tokenizer v1". 16 lowercase hex digits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sftdp::data {

struct TokenizerIdentity {
  std::string name;  // "byte" (sft_prepare) or "hf" (scripts/sft_prepare_hf.py)
  std::string hash;  // 16 lowercase hex digits
};

// FNV-1a 64 of bytes, continuing from `state` (start: kFnvOffset), as 16 lowercase hex digits.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
uint64_t fnv1a64(std::string_view bytes, uint64_t state = kFnvOffset);
std::string hex16(uint64_t value);

// The identity sft_prepare writes: {"byte", hash of "sft-dp byte tokenizer v1"}.
TokenizerIdentity byte_tokenizer_identity();

// One way a directory defines a tokenizer: the files hashed ("tokenizer.json" or
// "vocab.json + merges.txt" ...) and their hash.
struct TokenizerFiles {
  std::string files;
  std::string hash;
};
// Every definition a directory carries (tokenizer.json; vocab.json + merges.txt; encoder.json +
// vocab.bpe), in that order; empty when it has none. A directory saved by transformers may carry
// tokenizer.json beside the BPE files the data were prepared from, so a check accepts any of them.
std::vector<TokenizerFiles> tokenizer_files_of(const std::string& dir);

// The file's root attributes, or nullopt when it has neither (files made before they existed).
// One without the other, or a malformed value, is a UserError naming the file.
std::optional<TokenizerIdentity> read_tokenizer_identity(const std::string& data_path);

// The start-up check (SPEC §4). data_paths: train and eval files (already opened and checked);
// model_dir: load_parameters_path when it is a directory (a Hugging Face model), else "";
// model_vocab: the model's vocab_size. UserError naming both sides when a file's tokenizer_hash is
// none of the hashes of the tokenizer files model_dir carries, or a byte-tokenised file meets a
// model whose vocab_size is not the byte tokenizer's. Returns the lines to log (what was checked,
// or a warning per file without the attributes).
std::vector<std::string> check_tokenizer_identity(const std::vector<std::string>& data_paths,
                                                  const std::string& model_dir, int64_t model_vocab);

}  // namespace sftdp::data
