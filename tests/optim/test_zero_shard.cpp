// tests/optim/test_zero_shard.cpp — ZeRO-1's sharding arithmetic (optim::zero_shard): the blocks
// of all ranks and the tail cover the flat buffer exactly once, the blocks have equal size (the
// reduce-scatter's requirement), the tail is shorter than the world, and each piece's weight-decay
// count is [0, n_decay) intersected with it, counted element by element.
#include <gtest/gtest.h>

#include <vector>

#include <algorithm>

#include "sftdp/model.h"
#include "sftdp/optim.h"

using sftdp::optim::zero_shard;

TEST(ZeroShard, BlocksAndTailCoverTheBufferOnceWithCorrectDecayCounts) {
  for (size_t total : {1u, 2u, 3u, 7u, 10u, 64u, 1001u, 8193u})
    for (int world : {1, 2, 3, 4, 7, 16})
      for (size_t n_decay : {size_t(0), total / 3, total / 2, total - 1, total}) {
        std::vector<int> owners(total, 0);  // how many blocks cover element i
        const auto s0 = zero_shard(total, n_decay, 0, world);
        for (int r = 0; r < world; ++r) {
          const auto s = zero_shard(total, n_decay, r, world);
          SCOPED_TRACE("total " + std::to_string(total) + " world " + std::to_string(world) +
                       " rank " + std::to_string(r) + " n_decay " + std::to_string(n_decay));
          EXPECT_EQ(s.block, s0.block) << "equal blocks for the reduce-scatter";
          EXPECT_EQ(s.tail_begin, s0.tail_begin);
          EXPECT_EQ(s.tail, s0.tail);
          EXPECT_LT(s.tail, static_cast<size_t>(world));
          EXPECT_EQ(s.tail_begin + s.tail, total);
          EXPECT_EQ(s.owned(), s.block + s.tail);
          size_t decay_block = 0, decay_tail = 0;
          for (size_t i = s.begin; i < s.begin + s.block; ++i) {
            ASSERT_LT(i, s.tail_begin);
            owners[i] += 1;
            decay_block += i < n_decay;
          }
          for (size_t i = s.tail_begin; i < total; ++i) decay_tail += i < n_decay;
          EXPECT_EQ(s.decay_block, decay_block);
          EXPECT_EQ(s.decay_tail, decay_tail);
          // AdamW applies decay to a piece's leading floats only: the decayed ones come first.
          if (s.decay_block < s.block) { EXPECT_EQ(s.decay_tail, 0u); }
        }
        for (size_t i = 0; i < s0.tail_begin; ++i) ASSERT_EQ(owners[i], 1) << "element " << i;
      }
}

TEST(ZeroShard, HandWorkedExamples) {
  // 10 floats on 4 ranks: blocks of 2, tail [8, 10); decay on [0, 5).
  auto s = zero_shard(10, 5, 2, 4);
  EXPECT_EQ(s.block, 2u);
  EXPECT_EQ(s.begin, 4u);
  EXPECT_EQ(s.decay_block, 1u);  // element 4 decays, 5 does not
  EXPECT_EQ(s.tail_begin, 8u);
  EXPECT_EQ(s.tail, 2u);
  EXPECT_EQ(s.decay_tail, 0u);
  s = zero_shard(10, 9, 3, 4);
  EXPECT_EQ(s.begin, 6u);
  EXPECT_EQ(s.decay_block, 2u);
  EXPECT_EQ(s.decay_tail, 1u);  // element 8
  // One rank (and zero_stage 0): the whole buffer is the block.
  s = zero_shard(10, 5, 0, 1);
  EXPECT_EQ(s.block, 10u);
  EXPECT_EQ(s.begin, 0u);
  EXPECT_EQ(s.tail, 0u);
  EXPECT_EQ(s.decay_block, 5u);
  // Fewer floats than ranks: everything is tail, on every rank.
  s = zero_shard(3, 3, 1, 4);
  EXPECT_EQ(s.block, 0u);
  EXPECT_EQ(s.tail_begin, 0u);
  EXPECT_EQ(s.tail, 3u);
  EXPECT_EQ(s.decay_tail, 3u);
}

// ZeRO-2/3's pieces (optim::unit_shards): every rank's pieces of a unit cover it exactly once in rank
// order, all pieces of a unit have one size (ceil(n / world): the collectives' equal blocks), the
// shard's offsets are the same on every rank, and the decayed units' pieces lead the shard.
TEST(UnitShards, PiecesCoverEachUnitOnceAndTheDecayedUnitsLead) {
  using sftdp::model::Unit;
  const std::vector<Unit> units = {{Unit::kEmbed, -1, 0, 37},   {Unit::kBlock, 0, 37, 101},
                                   {Unit::kBlock, 1, 101, 102}, {Unit::kHead, -1, 102, 150},
                                   {Unit::kVectors, -1, 150, 163}};
  for (int world : {1, 2, 3, 4, 7, 64}) {
    std::vector<int> owners(163, 0);
    const auto s0 = sftdp::optim::unit_shards(units, 150, 0, world);
    for (int r = 0; r < world; ++r) {
      const auto s = sftdp::optim::unit_shards(units, 150, r, world);
      ASSERT_EQ(s.total, s0.total);
      ASSERT_EQ(s.decayed, s0.total - s0.units.back().piece) << "the vectors' piece is the shard's last";
      for (size_t u = 0; u < units.size(); ++u) {
        const auto& p = s.units[u];
        EXPECT_EQ(p.piece, (units[u].size() + world - 1) / world);
        EXPECT_EQ(p.offset, s0.units[u].offset);
        EXPECT_EQ(p.held, s.held_by(u, r));
        EXPECT_EQ(s.piece_begin(u, r), units[u].begin + std::min(units[u].size(), r * p.piece));
        for (size_t i = 0; i < p.held; ++i) ++owners[s.piece_begin(u, r) + i];
      }
    }
    for (size_t i = 0; i < owners.size(); ++i) ASSERT_EQ(owners[i], 1) << "element " << i << ", world " << world;
  }
}
