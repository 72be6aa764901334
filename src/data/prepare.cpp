// src/data/prepare.cpp — JSONL lines → Examples (byte tokenizer) → fixed-length rows, with the
// drop/truncate policy for long examples and optional packing. Errors name file and line.
#include "data/prepare.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "sftdp/check.h"

namespace sftdp::data {
namespace {

using nlohmann::json;

void push(Example& ex, int32_t id, float weight) {
  ex.tokens.push_back(id);
  ex.weights.push_back(weight);
}

void push_text(Example& ex, const std::string& text, float weight) {
  tok::append_bytes(text, ex.tokens);
  ex.weights.resize(ex.tokens.size(), weight);
}

const std::string& string_field(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw UserError(where + "missing \"" + key + "\"");
  if (!it->is_string())
    throw UserError(where + "\"" + key + "\" must be a string, found " + it->type_name());
  return it->get_ref<const std::string&>();
}

Example parse_pair(const json& j) {
  const std::string top_level;  // named, not a temporary "": GCC 13's -Wdangling-reference flags one
  const std::string& prompt = string_field(j, "prompt", top_level);
  const std::string& completion = string_field(j, "completion", top_level);
  Example ex;
  push(ex, tok::kBos, 0.f);
  push_text(ex, prompt, 0.f);
  push_text(ex, completion, 1.f);
  push(ex, tok::kEos, 1.f);
  return ex;
}

Example parse_chat(const json& messages) {
  if (!messages.is_array() || messages.empty())
    throw UserError("\"messages\" must be a non-empty array of {\"role\", \"content\"}");
  Example ex;
  push(ex, tok::kBos, 0.f);
  bool any_assistant = false, last_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]: ";
    const json& turn = messages[i];
    if (!turn.is_object())
      throw UserError(where + "must be an object {\"role\", \"content\"}, found " +
                      turn.type_name());
    const std::string& role = string_field(turn, "role", where);
    const std::string& content = string_field(turn, "content", where);
    int32_t role_token;
    if (role == "system")
      role_token = tok::kSystem;
    else if (role == "user")
      role_token = tok::kUser;
    else if (role == "assistant")
      role_token = tok::kAssistant;
    else
      throw UserError(where + "role must be system, user or assistant, found \"" + role + "\"");
    last_assistant = role_token == tok::kAssistant;
    any_assistant |= last_assistant;
    const float w = last_assistant ? 1.f : 0.f;
    push(ex, role_token, 0.f);
    push_text(ex, content, w);
    push(ex, tok::kEnd, w);
  }
  if (!any_assistant) throw UserError("\"messages\" has no assistant turn: nothing to train on");
  push(ex, tok::kEos, last_assistant ? 1.f : 0.f);
  return ex;
}

// nlohmann's what() starts with "[json.exception.parse_error.101] "; the rest is the reason.
std::string json_reason(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  return s;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

Example parse_example(const std::string& json_line) {
  json j;
  try {
    j = json::parse(json_line);
  } catch (const json::parse_error& e) {
    throw UserError("invalid JSON: " + json_reason(e.what()));
  }
  if (!j.is_object())
    throw UserError(std::string("expected a JSON object, found ") + j.type_name());
  const bool pair = j.contains("prompt") || j.contains("completion");
  const bool chat = j.contains("messages");
  if (pair && chat)
    throw UserError("has both \"messages\" and \"prompt\"/\"completion\"; use one form per line");
  if (chat) return parse_chat(j["messages"]);
  if (pair) return parse_pair(j);
  throw UserError("missing fields: expected {\"prompt\", \"completion\"} or {\"messages\": [...]}");
}

RowBuilder::RowBuilder(const PrepareOptions& options) : options_(options) {
  if (options_.T < 1)
    throw UserError("--max-length: must be >= 1, got " + std::to_string(options_.T));
  rows_.T = options_.T;
  rows_.packed = options_.pack;
}

void RowBuilder::start_row() {
  const size_t size = static_cast<size_t>(rows_.rows + 1) * options_.T;
  rows_.inputs.resize(size, tok::kPad);
  rows_.targets.resize(size, tok::kPad);
  rows_.loss_weights.resize(size, 0.f);
  if (options_.pack) {
    rows_.segment_ids.resize(size, 0);
    rows_.positions.resize(size, 0);
  }
  ++rows_.rows;
  fill_ = 0;
  segment_ = 0;
  row_open_ = true;
}

void RowBuilder::add(const Example& example) {
  SFTDP_ASSERT(example.tokens.size() == example.weights.size() && example.tokens.size() >= 2,
               "an example has >= 2 tokens and one weight per token");
  ++stats_.examples;
  const int T = options_.T;
  int64_t length = static_cast<int64_t>(example.tokens.size());
  if (length > T + 1) {
    if (options_.overflow == Overflow::kDrop) {
      ++stats_.dropped;
      return;
    }
    ++stats_.truncated;
    length = T + 1;
  }
  const int span = static_cast<int>(length - 1);  // positions this example takes in a row
  if (!options_.pack || !row_open_ || fill_ + span > T) start_row();
  ++segment_;
  const size_t base = static_cast<size_t>(rows_.rows - 1) * T + fill_;
  for (int i = 0; i < span; ++i) {
    rows_.inputs[base + i] = example.tokens[i];
    rows_.targets[base + i] = example.tokens[i + 1];
    rows_.loss_weights[base + i] = example.weights[i + 1];
    if (example.weights[i + 1] != 0.f) ++stats_.completion_tokens;
    if (options_.pack) {
      rows_.segment_ids[base + i] = segment_;
      rows_.positions[base + i] = i;
    }
  }
  fill_ += span;
}

RowSet RowBuilder::finish() {
  RowSet out = std::move(rows_);
  rows_ = RowSet{};
  rows_.T = options_.T;
  rows_.packed = options_.pack;
  row_open_ = false;
  fill_ = segment_ = 0;
  return out;
}

namespace {

// Parquet files, Arrow IPC files and datasets.save_to_disk directories are what Hugging Face
// datasets ship; sft_prepare reads JSONL only, so name the preparer that reads them rather than
// failing on their first byte as invalid JSON.
void refuse_columnar_input(const std::string& path) {
  const std::string hint = "; sft_prepare reads JSONL only: run scripts/sft_prepare_hf.py --input " + path +
                           " (it reads Parquet, Arrow and datasets.save_to_disk directories)";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const bool saved = std::filesystem::exists(std::filesystem::path(path) / "state.json", ec) ||
                       std::filesystem::exists(std::filesystem::path(path) / "dataset_info.json", ec);
    throw UserError(path + (saved ? ": is a datasets.save_to_disk directory" : ": is a directory") + hint);
  }
  std::ifstream in(path, std::ios::binary);
  char head[6] = {};
  in.read(head, sizeof head);
  const std::string magic(head, static_cast<size_t>(in.gcount()));
  if (magic.rfind("PAR1", 0) == 0) throw UserError(path + ": is a Parquet file" + hint);
  if (magic.rfind("ARROW1", 0) == 0 || magic.rfind("\xff\xff\xff\xff", 0) == 0)
    throw UserError(path + ": is an Arrow IPC file" + hint);
}

}  // namespace

Prepared prepare_jsonl(const std::string& path, const PrepareOptions& options) {
  if (!std::filesystem::exists(path)) throw UserError(path + ": not found");
  refuse_columnar_input(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot be opened for reading");
  RowBuilder builder(options);
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (blank(line)) continue;
    try {
      builder.add(parse_example(line));
    } catch (const UserError& e) {
      throw UserError(path + ":" + std::to_string(line_no) + ": " + e.what());
    }
  }
  if (in.bad()) throw UserError(path + ": read error");
  Prepared out{builder.finish(), builder.stats()};
  if (out.stats.examples == 0) throw UserError(path + ": no examples (the file is empty)");
  if (out.rows.rows == 0)
    throw UserError(path + ": no rows left: all " + std::to_string(out.stats.dropped) +
                    " examples are longer than max-length+1 = " + std::to_string(options.T + 1) +
                    " tokens; use --overflow truncate or a larger --max-length");
  return out;
}

}  // namespace sftdp::data
