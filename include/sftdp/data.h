// sftdp/data.h — the SPEC §4 data file, read by rows, and the sampler that decides which rows
// each optimizer step, rank and micro-step uses. The sampler depends only on (N, G, shuffle,
// seed, epoch): never on world size or GA, so every factorisation sees the same rows per step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sftdp::data {

// One micro-batch on the host. B rows of T tokens, row-major [B, T].
struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> inputs;        // (B,T) token ids fed to the model
  std::vector<int32_t> targets;       // (B,T) token each position predicts
  std::vector<float> loss_weights;    // (B,T) 0 on prompt and padding
  std::vector<int32_t> segment_ids;   // (B,T) empty when the file has none
  std::vector<int32_t> positions;     // (B,T) empty when the file has none (then 0..T-1)
  std::vector<int64_t> row_ids;       // (B) each row's index in the training data (LoRA dropout masks)
  bool has_segments() const { return !segment_ids.empty(); }
  bool has_positions() const { return !positions.empty(); }
};

// A read-only view of one or more SPEC §4 files whose rows are concatenated in the order given.
// Opening checks datasets, types, shapes, T and vocab_size; reading checks every value read
// (token ids in [0, vocab_size), weights finite and >= 0, segment ids >= 0, positions in
// [0, max_positions)) and throws UserError naming file, dataset and row. Only the requested rows
// are read from disk (hyperslabs).
class Dataset {
 public:
  // T: max_target_length; vocab_size: the model's; max_positions: rows of wpe (>= T).
  Dataset(const std::vector<std::string>& paths, int T, int vocab_size, int max_positions);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  int64_t rows() const;
  int T() const;
  // Reads the given global row indices (any order, may repeat) into out, in that order.
  void read_rows(const std::vector<int64_t>& rows, Batch& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Which rows each optimizer step uses (SPEC §4).
class Sampler {
 public:
  Sampler(int64_t num_rows, int64_t global_batch, bool shuffle, uint64_t seed);
  int64_t steps_per_epoch() const;   // floor(N / G)
  int64_t rows_left_over() const;    // N mod G: not used in an epoch
  // The G rows of step `step_in_epoch` of `epoch`, in canonical order. Without shuffling rows
  // s*G .. s*G+G-1; with it, the same slice of a permutation seeded by (seed, epoch).
  std::vector<int64_t> step_rows(int64_t epoch, int64_t step_in_epoch) const;

 private:
  // The epoch's permutation of all N rows (splitmix64 + Fisher-Yates), cached for the last epoch.
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  int64_t n_, g_;
  bool shuffle_;
  uint64_t seed_;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

// The rows that `rank` processes at micro-step `micro` of a step, given the step's G rows.
// Layout (documented in README): micro-batch b = G / (world * ga); micro-step m of rank r takes
// step_rows[(m * world + r) * b, ... + b). Every row of the step is used exactly once.
std::vector<int64_t> micro_rows(const std::vector<int64_t>& step_rows, int rank, int world,
                                int ga, int micro);

}  // namespace sftdp::data
