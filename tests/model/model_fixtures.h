// tests/model/model_fixtures.h — a tiny GPT-2 and micro-batches with very unequal token counts
// (some rows fully masked), shared by the model tests; and the micro-batch each rank feeds it in
// the MPI data-parallel tests.
#pragma once
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "sftdp/config.h"
#include "sftdp/data.h"

namespace sftdp::test {

inline config::ModelDims tiny_dims() {
  config::ModelDims d;
  d.L = 2, d.NH = 2, d.C = 16, d.F = 64, d.V = 37, d.maxT = 12;
  return d;
}

// A tiny Llama-family model: GQA (4 query heads, 2 k/v heads of size 4), tied head.
inline config::ModelDims tiny_llama_dims() {
  config::ModelDims d;
  d.L = 2, d.NH = 4, d.C = 16, d.F = 24, d.V = 37, d.maxT = 64;
  d.block = config::Block::kLlama, d.KVH = 2, d.HS = 4;
  return d;
}

// A named model configuration for the tests parameterised over model families; the name is the
// test's (family_name) and what gtest prints for the parameter.
struct Family {
  const char* name;
  config::ModelDims dims;
};
inline void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }
inline std::string family_name(const ::testing::TestParamInfo<Family>& info) { return info.param.name; }

// rows x T: random tokens; loss weights on a random-length suffix of each row, row r % 5 == 3
// fully masked; weights are 0/1 except a few 0.5 to exercise weighted sums. With segments,
// rows are packed in two segments and positions restart at 0 in each.
inline data::Batch random_rows(int rows, int T, int V, uint64_t seed, bool segments = false) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  data::Batch b;
  b.B = rows, b.T = T;
  b.inputs.resize(size_t(rows) * T);
  b.targets.resize(b.inputs.size());
  b.loss_weights.assign(b.inputs.size(), 0.0f);
  for (auto& x : b.inputs) x = static_cast<int32_t>(rng() % V);
  for (auto& x : b.targets) x = static_cast<int32_t>(rng() % V);
  for (int r = 0; r < rows; ++r) {
    if (r % 5 == 3) continue;  // fully masked row
    const int start = static_cast<int>(rng() % T);  // completion starts here: 1..T tokens count
    for (int t = start; t < T; ++t) b.loss_weights[size_t(r) * T + t] = (rng() % 7 == 0) ? 0.5f : 1.0f;
  }
  if (segments) {
    b.segment_ids.resize(b.inputs.size());
    b.positions.resize(b.inputs.size());
    for (int r = 0; r < rows; ++r) {
      const int cut = 1 + static_cast<int>(rng() % (T - 1));
      for (int t = 0; t < T; ++t) {
        b.segment_ids[size_t(r) * T + t] = t < cut ? 1 : 2;
        b.positions[size_t(r) * T + t] = t < cut ? t : t - cut;
      }
    }
  }
  return b;
}

// Rows [lo, hi) of a batch as their own batch.
inline data::Batch slice_rows(const data::Batch& b, int lo, int hi) {
  data::Batch s;
  s.B = hi - lo, s.T = b.T;
  const size_t a = size_t(lo) * b.T, e = size_t(hi) * b.T;
  s.inputs.assign(b.inputs.begin() + a, b.inputs.begin() + e);
  s.targets.assign(b.targets.begin() + a, b.targets.begin() + e);
  s.loss_weights.assign(b.loss_weights.begin() + a, b.loss_weights.begin() + e);
  if (b.has_segments()) s.segment_ids.assign(b.segment_ids.begin() + a, b.segment_ids.begin() + e);
  if (b.has_positions()) s.positions.assign(b.positions.begin() + a, b.positions.begin() + e);
  if (!b.row_ids.empty()) s.row_ids.assign(b.row_ids.begin() + lo, b.row_ids.begin() + hi);
  return s;
}

// B rows of T tokens for (rank, micro-step), deterministic in both, with fractional loss weights
// (some near 0): every rank's gradients differ, so a reduction has something to do.
inline data::Batch rows_of_rank(int rank, int step, int B, int T, int V) {
  data::Batch b;
  b.B = B, b.T = T;
  b.inputs = uniform_int(size_t(B) * T, 100 * step + rank, V);
  b.targets = uniform_int(size_t(B) * T, 100 * step + rank + 50, V);
  b.loss_weights = uniform(size_t(B) * T, 7 * step + rank, 0.0f, 1.0f);
  return b;
}

}  // namespace sftdp::test
