// src/data/tokenizer.h — the byte-level tokenizer of sft_prepare: ids 0..255 are the bytes of the
// UTF-8 text, 256..263 are special tokens (table below, also in data/README.md and --help).
// Encoding is lossless and needs no vocabulary file; kVocabSize is written as the file's
// vocab_size.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sftdp::data::tok {

constexpr int32_t kBos = 256;        // <|bos|>: first token of every example
constexpr int32_t kEos = 257;        // <|eos|>: last token of every example
constexpr int32_t kPad = 258;        // <|pad|>: fills a row after its last example (loss weight 0)
constexpr int32_t kSystem = 259;     // <|system|>: starts a system turn
constexpr int32_t kUser = 260;       // <|user|>: starts a user turn
constexpr int32_t kAssistant = 261;  // <|assistant|>: starts an assistant turn
constexpr int32_t kEnd = 262;        // <|end|>: ends a chat turn
constexpr int32_t kReserved = 263;   // <|reserved|>: never produced
constexpr int32_t kVocabSize = 264;

// Appends one id per byte of text (bytes taken as unsigned: 0..255).
void append_bytes(std::string_view text, std::vector<int32_t>& out);

// "<|bos|>" etc. for special ids, "" for byte ids and "<|?N|>" for ids outside the vocabulary.
std::string special_name(int32_t id);

// Human-readable text of ids: bytes as themselves, special ids by name. For logs and tests.
std::string render(const std::vector<int32_t>& ids);

// The table above as text lines "  256  <|bos|>  first token of every example", for --help.
std::string table_text();

}  // namespace sftdp::data::tok
