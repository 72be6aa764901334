// tests/comm/test_shard_collectives_mpi.cpp — under mpiexec: ZeRO-1's MPI collectives. In place on
// world·block floats, reduce_scatter_sum leaves in this rank's block the sum over ranks of that
// block (integers: exact, checked against the sum written out; random floats: equal to what the
// allreduce gives) and all_gather gives every rank every rank's block. ZeRO-2/3's non-blocking,
// out-of-place start_reduce_scatter_sum / start_all_gather: several started before any wait, with
// tickets 1, 2, 3, ...; wait(t) completes t and every earlier one (a wait for an already completed
// ticket is a no-op), wait_all the rest; results exact on integers and equal to the blocking ones,
// also with allreduce_overlap's sums in flight.
// The in-place 16-bit all-gather (bf16 weights) moves every rank's bits likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

// ZeRO-2/3: the sizes started one after another, a reduce-scatter then an all-gather of each.
struct Started {
  size_t block;
  std::vector<float> rs_send, rs_recv;  // world·block -> block
  std::vector<float> ag_send, ag_recv;  // block -> world·block
  comm::Communicator::Ticket rs_ticket = 0, ag_ticket = 0;
};

// Integers: the reduce-scatter gives exactly the written-out sum of this rank's block, the
// all-gather rank q's block at q·block.
void expect_exact(const Started& s, int W, int r) {
  for (size_t i = 0; i < s.block; ++i) {
    double want = 0;
    for (int q = 0; q < W; ++q) want += value(q, r * s.block + i);
    ASSERT_EQ(s.rs_recv[i], want) << "reduce-scatter, block " << s.block << " element " << i;
  }
  for (int q = 0; q < W; ++q)
    for (size_t i = 0; i < s.block; ++i)
      ASSERT_EQ(s.ag_recv[q * s.block + i], value(q, q * s.block + i)) << "all-gather, block " << s.block;
}

TEST(ShardCollectives, StartedInARowTheyCompleteByTicketAndMatchTheBlockingOnes) {
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  std::vector<Started> all;
  for (size_t block : {size_t(1), size_t(5), size_t(4099)}) {
    Started s{block, std::vector<float>(W * block), std::vector<float>(block, -1.f), std::vector<float>(block),
              std::vector<float>(W * block, -1.f)};
    for (size_t i = 0; i < s.rs_send.size(); ++i) s.rs_send[i] = value(r, i);
    for (size_t i = 0; i < block; ++i) s.ag_send[i] = value(r, r * block + i);
    all.push_back(std::move(s));
  }
  comm::Communicator::Ticket expected = 0;
  for (Started& s : all) {  // every start before any wait
    s.rs_ticket = c->start_reduce_scatter_sum(s.rs_send.data(), s.rs_recv.data(), s.block);
    s.ag_ticket = c->start_all_gather(s.ag_send.data(), s.ag_recv.data(), s.block);
    EXPECT_EQ(s.rs_ticket, ++expected);
    EXPECT_EQ(s.ag_ticket, ++expected);
  }
  // Ticket 3 (the reduce-scatter of block 5): it and tickets 1 and 2 are complete.
  c->wait(all[1].rs_ticket);
  expect_exact(all[0], W, r);
  for (size_t i = 0; i < all[1].block; ++i) {
    double want = 0;
    for (int q = 0; q < W; ++q) want += value(q, r * all[1].block + i);
    ASSERT_EQ(all[1].rs_recv[i], want) << i;
  }
  c->wait(all[0].ag_ticket);  // already complete: nothing to do
  c->wait_all();
  for (const Started& s : all) expect_exact(s, W, r);
  c->wait(all[2].ag_ticket);  // after wait_all, every ticket is complete
  c->wait_all();              // nothing started since: a no-op

  // The same results as the blocking, in-place forms, bitwise.
  for (const Started& s : all) {
    std::vector<float> buf = s.rs_send;
    c->reduce_scatter_sum(buf.data(), s.block);
    ASSERT_EQ(std::memcmp(buf.data() + r * s.block, s.rs_recv.data(), s.block * sizeof(float)), 0) << s.block;
    std::vector<float> gathered(W * s.block, -1.f);
    std::memcpy(gathered.data() + r * s.block, s.ag_send.data(), s.block * sizeof(float));
    c->all_gather(gathered.data(), s.block);
    ASSERT_EQ(gathered, s.ag_recv) << s.block;
  }
  // Tickets go on counting after wait_all; an empty block gets one too.
  float x = 3.f, y = 4.f;
  EXPECT_EQ(c->start_all_gather(&x, &y, 0), expected + 1);
  c->wait_all();
  EXPECT_EQ(y, 4.f);
}

TEST(ShardCollectives, StartedReduceScatterEqualsTheBlockingOneOnRandomFloats) {
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  const size_t block = 3001;
  const auto send = test::uniform(W * block, 60 + r, -3.f, 3.f);
  std::vector<float> recv(block, -1.f), second(block, -1.f);
  const auto t1 = c->start_reduce_scatter_sum(send.data(), recv.data(), block);
  const auto t2 = c->start_reduce_scatter_sum(send.data(), second.data(), block);  // send is only read
  c->wait(t2);
  EXPECT_EQ(t2, t1 + 1);
  EXPECT_EQ(recv, second);  // the same sum, bitwise, each time
  std::vector<float> buf = send;
  c->reduce_scatter_sum(buf.data(), block);
  for (size_t i = 0; i < block; ++i) {
    const float want = buf[r * block + i];
    // Two ranks: a + b either way round, bitwise. More: MPI may add in another order out of place.
    if (W <= 2) ASSERT_EQ(recv[i], want) << i;
    else ASSERT_NEAR(recv[i], want, 1e-5f * (1 + std::fabs(want))) << i;
  }
  c->wait_all();
}

TEST(ShardCollectives, StartedCollectivesInterleaveWithTheOverlapSums) {
  // A pass of ZeRO-2 with allreduce_overlap's sums and blocking collectives in between: each kind
  // keeps its own requests, and MPI orders them all by start, the same on every rank.
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  const size_t block = 257;
  std::vector<float> send(W * block), recv(block, -1.f), sum(100, 1.f);
  for (size_t i = 0; i < send.size(); ++i) send[i] = value(r, i);
  c->start_allreduce_sum(sum.data(), sum.size());
  const auto t = c->start_reduce_scatter_sum(send.data(), recv.data(), block);
  std::vector<double> d(3, 1.0);
  c->allreduce_sum_host(d.data(), d.size());
  c->wait_allreduces();
  c->wait(t);
  for (size_t i = 0; i < block; ++i) {
    double want = 0;
    for (int q = 0; q < W; ++q) want += value(q, r * block + i);
    ASSERT_EQ(recv[i], want) << i;
  }
  EXPECT_EQ(sum, std::vector<float>(100, static_cast<float>(W)));
  EXPECT_EQ(d, std::vector<double>(3, static_cast<double>(W)));
  c->wait_all();
}

// weight_dtype bfloat16 (issue 25): the in-place all-gather of 16-bit values moves their bits, every
// rank's block to every rank, in ticket order with the fp32 collectives (odd block sizes included).
TEST(ShardCollectives, Bf16AllGatherMovesEveryRanksBits) {
  auto c = comm::make_mpi_communicator();
  const int W = c->world(), r = c->rank();
  for (size_t block : {size_t(1), size_t(7), size_t(4099)}) {
    std::vector<uint16_t> recv(W * block, 0xffff);  // this rank's block in its place, the others' unset
    for (size_t i = 0; i < block; ++i) recv[r * block + i] = static_cast<uint16_t>((r * 7919 + i * 31) & 0xffff);
    std::vector<float> fsend(block, float(r)), frecv(W * block, -1.f);
    const auto t1 = c->start_all_gather_bf16(recv.data(), block);
    const auto t2 = c->start_all_gather(fsend.data(), frecv.data(), block);
    EXPECT_EQ(t2, t1 + 1);
    c->wait(t2);
    for (int q = 0; q < W; ++q)
      for (size_t i = 0; i < block; ++i) {
        ASSERT_EQ(recv[q * block + i], static_cast<uint16_t>((q * 7919 + i * 31) & 0xffff)) << q << " " << i;
        ASSERT_EQ(frecv[q * block + i], float(q));
      }
  }
  c->wait_all();
}
