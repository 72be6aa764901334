// src/data/sampler.cpp — which rows each optimizer step uses (SPEC §4) and how a step's rows are
// split over ranks and micro-steps. The shuffle is our own splitmix64 + Fisher-Yates, so the
// permutation is the same on every platform and standard library, for any world size or GA.
#include <utility>

#include "sftdp/check.h"
#include "sftdp/data.h"

namespace sftdp::data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit counter through a fixed mixing function.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias: reject the top partial block of 2^64.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

// One stream per (seed, epoch): both are mixed, so nearby seeds and epochs give unrelated streams.
uint64_t epoch_state(uint64_t seed, int64_t epoch) {
  SplitMix64 a(seed), b(static_cast<uint64_t>(epoch) ^ 0xD1B54A32D192ED03ull);
  return a.next() ^ (b.next() * 0x9E3779B97F4A7C15ull);
}

}  // namespace

Sampler::Sampler(int64_t num_rows, int64_t global_batch, bool shuffle, uint64_t seed)
    : n_(num_rows), g_(global_batch), shuffle_(shuffle), seed_(seed) {
  SFTDP_ASSERT(num_rows >= 0 && global_batch >= 1, "Sampler needs N >= 0 and G >= 1");
}

int64_t Sampler::steps_per_epoch() const { return n_ / g_; }
int64_t Sampler::rows_left_over() const { return n_ % g_; }

const std::vector<int64_t>& Sampler::permutation(int64_t epoch) const {
  if (perm_epoch_ == epoch && static_cast<int64_t>(perm_.size()) == n_) return perm_;
  perm_.resize(n_);
  for (int64_t i = 0; i < n_; ++i) perm_[i] = i;
  SplitMix64 rng(epoch_state(seed_, epoch));
  for (int64_t i = n_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(perm_[i], perm_[j]);
  }
  perm_epoch_ = epoch;
  return perm_;
}

std::vector<int64_t> Sampler::step_rows(int64_t epoch, int64_t step_in_epoch) const {
  SFTDP_ASSERT(epoch >= 0 && step_in_epoch >= 0 && step_in_epoch < steps_per_epoch(),
               "step_rows: step outside the epoch");
  std::vector<int64_t> rows(g_);
  const int64_t first = step_in_epoch * g_;
  if (shuffle_) {
    const auto& perm = permutation(epoch);
    for (int64_t i = 0; i < g_; ++i) rows[i] = perm[first + i];
  } else {
    for (int64_t i = 0; i < g_; ++i) rows[i] = first + i;
  }
  return rows;
}

std::vector<int64_t> micro_rows(const std::vector<int64_t>& step_rows, int rank, int world, int ga,
                                int micro) {
  SFTDP_ASSERT(world >= 1 && ga >= 1 && rank >= 0 && rank < world && micro >= 0 && micro < ga,
               "micro_rows: rank or micro-step out of range");
  const int64_t G = static_cast<int64_t>(step_rows.size());
  const int64_t split = static_cast<int64_t>(world) * ga;
  SFTDP_ASSERT(
      G % split == 0 && G / split >= 1,
      "micro_rows: global batch not divisible by world_size * gradient_accumulation_steps");
  const int64_t b = G / split;
  const int64_t first = (static_cast<int64_t>(micro) * world + rank) * b;
  return std::vector<int64_t>(step_rows.begin() + first, step_rows.begin() + first + b);
}

}  // namespace sftdp::data
