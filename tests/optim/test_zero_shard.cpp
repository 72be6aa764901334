// tests/optim/test_zero_shard.cpp — ZeRO-1's sharding arithmetic (optim::zero_shard): the blocks
// of all ranks and the tail cover the flat buffer exactly once, the blocks have equal size (the
// reduce-scatter's requirement), the tail is shorter than the world, and each piece's weight-decay
// count is [0, n_decay) intersected with it, counted element by element.
#include <gtest/gtest.h>

#include <vector>

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
          if (s.decay_block < s.block) EXPECT_EQ(s.decay_tail, 0u);
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
