// tests/comm/test_shard_collectives_mpi.cpp — under mpiexec: ZeRO-1's MPI collectives. In place on
// world·block floats, reduce_scatter_sum leaves in this rank's block the sum over ranks of that
// block (integers: exact, checked against the sum written out; random floats: equal to what the
// allreduce gives) and all_gather gives every rank every rank's block.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "sftdp/comm.h"

using namespace sftdp;

namespace {
// Small integers: every partial sum is exact in fp32, whatever order MPI adds them in.
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)); }
}  // namespace

TEST(ShardCollectives, ReduceScatterSumsThisRanksBlock) {
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  for (size_t block : {size_t(1), size_t(5), size_t(4099)}) {
    std::vector<float> buf(W * block);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = value(r, i);
    c->reduce_scatter_sum(buf.data(), block);
    for (size_t i = r * block; i < (r + 1) * block; ++i) {
      double want = 0;
      for (int q = 0; q < W; ++q) want += value(q, i);
      ASSERT_EQ(buf[i], want) << "block " << block << " element " << i;
    }
  }
}

TEST(ShardCollectives, ReduceScatterMatchesTheAllreduceOnRandomFloats) {
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  const size_t block = 3001;
  auto mine = test::uniform(W * block, 40 + r, -3.f, 3.f);
  std::vector<float> all = mine;
  c->allreduce_sum(all.data(), all.size());
  c->reduce_scatter_sum(mine.data(), block);
  for (size_t i = r * block; i < (r + 1) * block; ++i) {
    // Two ranks: a + b either way round, bitwise. More: MPI may add in another order.
    if (W <= 2) ASSERT_EQ(mine[i], all[i]) << i;
    else ASSERT_NEAR(mine[i], all[i], 1e-5f * (1 + std::fabs(all[i]))) << i;
  }
}

TEST(ShardCollectives, AllGatherGivesEveryRankEveryBlock) {
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  for (size_t block : {size_t(1), size_t(7), size_t(5000)}) {
    std::vector<float> buf(W * block, -1.f);  // others' blocks: stale values, overwritten
    for (size_t i = r * block; i < (r + 1) * block; ++i) buf[i] = value(r, i);
    c->all_gather(buf.data(), block);
    for (int q = 0; q < W; ++q)
      for (size_t i = q * block; i < (q + 1) * block; ++i) ASSERT_EQ(buf[i], value(q, i)) << i;
  }
}

TEST(ShardCollectives, ZeroBlocksAreANoOp) {
  auto c = comm::make_mpi_communicator();
  float x = 3.f;
  c->reduce_scatter_sum(&x, 0);
  c->all_gather(&x, 0);
  EXPECT_EQ(x, 3.f);
}
