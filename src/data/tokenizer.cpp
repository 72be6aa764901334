// src/data/tokenizer.cpp — byte-level tokenizer: bytes are ids 0..255, special tokens 256..263.
#include "data/tokenizer.h"

#include <array>

namespace sftdp::data::tok {
namespace {

struct Special {
  int32_t id;
  const char* name;
  const char* meaning;
};

constexpr std::array<Special, 8> kSpecials{{
    {kBos, "<|bos|>", "first token of every example"},
    {kEos, "<|eos|>", "last token of every example"},
    {kPad, "<|pad|>", "padding after the last example of a row (loss weight 0)"},
    {kSystem, "<|system|>", "starts a system turn"},
    {kUser, "<|user|>", "starts a user turn"},
    {kAssistant, "<|assistant|>", "starts an assistant turn"},
    {kEnd, "<|end|>", "ends a chat turn"},
    {kReserved, "<|reserved|>", "reserved, never produced"},
}};

}  // namespace

void append_bytes(std::string_view text, std::vector<int32_t>& out) {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
}

std::string special_name(int32_t id) {
  if (id >= 0 && id < 256) return "";
  for (const auto& s : kSpecials)
    if (s.id == id) return s.name;
  return "<|?" + std::to_string(id) + "|>";
}

std::string render(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256)
      out.push_back(static_cast<char>(id));
    else
      out += special_name(id);
  }
  return out;
}

std::string table_text() {
  std::string out = "  0..255  the bytes of the UTF-8 text\n";
  for (const auto& s : kSpecials) {
    std::string name = s.name;
    name.resize(15, ' ');
    out += "  " + std::to_string(s.id) + "     " + name + s.meaning + "\n";
  }
  out += "  vocab_size = " + std::to_string(kVocabSize) + "\n";
  return out;
}

}  // namespace sftdp::data::tok
