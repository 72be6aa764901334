// src/data/prepare.h — JSONL examples → SPEC §4 rows (what sft_prepare does, callable from tests).
// An Example is a token sequence with one loss weight per token, the weight it gets as a TARGET.
// Rows of length T take inputs = tokens[0..L-2], targets = tokens[1..L-1], padded with <|pad|>.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sftdp::data {

struct Example {
  std::vector<int32_t> tokens;  // (L) starts with <|bos|>, ends with <|eos|>
  std::vector<float> weights;   // (L) 1 where predicting this token counts (completion), else 0
};

// One JSONL line → Example (byte tokenizer, data/README.md):
//   {"prompt": P, "completion": C}  → <|bos|> P C <|eos|>, loss on C and <|eos|>;
//   {"messages": [{"role": R, "content": X}, ...]} → <|bos|> (<|R|> X <|end|>)* <|eos|>, loss on
//   assistant X and its <|end|> (and <|eos|> when the last turn is the assistant's).
// Throws UserError(reason) without file or line: the caller adds them.
Example parse_example(const std::string& json_line);

enum class Overflow { kDrop, kTruncate };

struct PrepareOptions {
  int T = 0;                            // row length (max_target_length)
  Overflow overflow = Overflow::kDrop;  // examples longer than T+1 tokens
  bool pack = false;                    // several examples per row, with segment ids and positions
};

// Rows built so far, row-major [rows, T]. segment_ids and positions are filled only when packed.
struct RowSet {
  int T = 0;
  int64_t rows = 0;
  bool packed = false;
  std::vector<int32_t> inputs, targets, segment_ids, positions;
  std::vector<float> loss_weights;
};

struct PrepareStats {
  int64_t examples = 0;           // examples read
  int64_t dropped = 0;            // longer than T+1 tokens, left out (--overflow drop)
  int64_t truncated = 0;          // longer than T+1 tokens, cut to T+1 (--overflow truncate)
  int64_t completion_tokens = 0;  // target positions with a non-zero loss weight, over all rows
};

// Turns examples into rows. Unpacked: one example per row. Packed: examples are appended to the
// current row while they fit (an example of L tokens takes L-1 positions), segment ids 1, 2, ...
// per row (0 = padding) and positions restarting at 0 per segment (0 on padding).
class RowBuilder {
 public:
  explicit RowBuilder(const PrepareOptions& options);
  void add(const Example& example);
  // Closes the last row and hands over everything; the builder is empty afterwards.
  RowSet finish();
  const PrepareStats& stats() const { return stats_; }

 private:
  void start_row();
  PrepareOptions options_;
  RowSet rows_;
  PrepareStats stats_;
  int fill_ = 0;     // positions used in the current (last) row
  int segment_ = 0;  // segment id of the last example placed in the current row
  bool row_open_ = false;
};

struct Prepared {
  RowSet rows;
  PrepareStats stats;
};

// Reads a JSONL file (blank lines skipped). Errors are UserError "<path>:<line>: <reason>";
// a missing file is "<path>: not found"; a file yielding no rows is an error as well.
Prepared prepare_jsonl(const std::string& path, const PrepareOptions& options);

}  // namespace sftdp::data
