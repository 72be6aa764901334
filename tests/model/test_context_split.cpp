// tests/train/test_context_split.cpp — context parallelism's layout (src/model/context_split.h, SPEC §1):
// a group's ranks hold every position of a row exactly once, each the same causal attention work
// (Σ over its positions of the keys each sees); groups are adjacent ranks; a bad
// context_parallelism is a UserError naming the key and the numbers; a rank's batch is the full
// batch at its positions, with global positions (the file's where it has them) and its segments,
// and the group's loss weights sum to the full batch's.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "sftdp/check.h"
#include "model/context_split.h"

namespace sftdp::model {
namespace {

TEST(ContextSplit, AGroupHoldsEveryPositionOnceWithEqualCausalWork) {
  for (int n : {1, 2, 3, 4})
    for (int T : {2 * n, 12 * n}) {
      const int world = 2 * n;
      for (int group = 0; group < 2; ++group) {
        std::multiset<int> seen;
        long work0 = -1;
        for (int i = 0; i < n; ++i) {
          const ContextSplit s = context_split(T, world, group * n + i, n);
          EXPECT_EQ(s.group, group);
          EXPECT_EQ(s.index, i);
          EXPECT_EQ(s.local_T(), T / n);
          seen.insert(s.positions.begin(), s.positions.end());
          long work = 0;  // position p attends p + 1 keys
          for (int p : s.positions) work += p + 1;
          if (work0 < 0) work0 = work;
          EXPECT_EQ(work, work0) << "n " << n << " T " << T << " rank index " << i;
        }
        std::vector<int> all(T);
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(std::vector<int>(seen.begin(), seen.end()), all);
      }
    }
  EXPECT_EQ(context_split(8, 4, 1, 2).positions, (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(context_split(8, 4, 2, 2).positions, (std::vector<int32_t>{0, 1, 6, 7}));
}

void expect_error(int T, int world, int n, const std::string& says) {
  try {
    context_split(T, world, 0, n);
    ADD_FAILURE() << "no error for T " << T << " world " << world << " n " << n;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(ContextSplit, BadValuesAreUserErrorsNamingTheKey) {
  expect_error(16, 6, 4, "context_parallelism: 4 does not divide the 6 ranks");
  expect_error(20, 4, 4, "context_parallelism: 4 needs max_target_length divisible by 8 (2 chunks per rank), got 20");
  expect_error(16, 4, 0, "context_parallelism: must be >= 1, got 0");
}

data::Batch full_batch(bool with_positions, bool with_segments) {
  data::Batch b;
  b.B = 2, b.T = 8;
  for (int i = 0; i < b.B * b.T; ++i) {
    b.inputs.push_back(100 + i), b.targets.push_back(200 + i), b.loss_weights.push_back(i % 3 == 0 ? 0.f : 0.5f * i);
    if (with_positions) b.positions.push_back((i % b.T) + 3);
    if (with_segments) b.segment_ids.push_back((i % b.T) / 3);
  }
  b.row_ids = {41, 42};
  return b;
}

TEST(ContextSplit, ARanksBatchIsTheFullBatchAtItsPositions) {
  for (bool with_positions : {false, true})
    for (bool with_segments : {false, true}) {
      const data::Batch full = full_batch(with_positions, with_segments);
      float weights = 0;
      for (int i = 0; i < 2; ++i) {
        const ContextSplit s = context_split(full.T, 2, i, 2);
        const data::Batch b = local_batch(full, s);
        ASSERT_EQ(b.B, 2);
        ASSERT_EQ(b.T, 4);
        EXPECT_EQ(b.row_ids, full.row_ids);
        EXPECT_EQ(b.has_segments(), with_segments);
        for (int r = 0; r < b.B; ++r) {
          for (int t = 0; t < b.T; ++t) {
            const int from = r * full.T + s.positions[t], to = r * b.T + t;
            EXPECT_EQ(b.inputs[to], full.inputs[from]);
            EXPECT_EQ(b.targets[to], full.targets[from]);
            EXPECT_EQ(b.loss_weights[to], full.loss_weights[from]);
            EXPECT_EQ(b.positions[to], with_positions ? full.positions[from] : s.positions[t]);
            if (with_segments) {
              EXPECT_EQ(b.segment_ids[to], full.segment_ids[from]);
            }
            weights += b.loss_weights[to];
          }
        }
      }
      EXPECT_EQ(weights, std::accumulate(full.loss_weights.begin(), full.loss_weights.end(), 0.f));
    }
}

}  // namespace
}  // namespace sftdp::model
