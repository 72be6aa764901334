// tests/comm/test_collective_mpi.cpp — under mpiexec: the collective deadline (comm/collective.h)
// lets a slow-but-alive rank through, every_rank and allgather_strings give every rank the same
// answer, and thousands of collectives with the arrival channel open stay cheap. That
// an expired deadline ends the job and names the missing rank is checked end to end by
// tests/integration/test_rank_stopped_mpi.py (MPI_Abort cannot be caught inside one test binary).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "sftdp/comm.h"

using namespace sftdp;

namespace {
// The arrival channel for the length of one test (collective: every rank runs every test).
struct ChannelScope {
  ChannelScope() { comm::detail::open_arrival_channel(); }
  ~ChannelScope() { comm::detail::close_arrival_channel(); }
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

TEST(CollectiveDeadline, WatchersSpeakFirstThenTheOthers) {
  using comm::detail::deadline_after_s;
  EXPECT_EQ(deadline_after_s(0, 0, 4), 0) << "0 = no deadline";
  EXPECT_EQ(deadline_after_s(5, 0, 1), 5);
  EXPECT_EQ(deadline_after_s(5, 0, 4), 5) << "rank 0 names the missing ranks first";
  EXPECT_EQ(deadline_after_s(5, 1, 4), 6) << "rank 1 one grace second later (rank 0 stuck?)";
  EXPECT_EQ(deadline_after_s(5, 3, 4), 7) << "the others last: they cannot name anyone";
  EXPECT_EQ(deadline_after_s(600, 1, 4), 610) << "grace: timeout / 10, at most 10 s";
}

TEST(CollectiveDeadline, ASlowRankWithinTheDeadlineIsWaitedFor) {
  ChannelScope channel;
  const double saved = comm::collective_timeout();
  comm::set_collective_timeout(5);
  auto c = comm::make_mpi_communicator();
  const int last = c->world() - 1;
  if (c->rank() == last) usleep(1'500'000);  // > one beat period (0.5 s): beats are sent meanwhile
  const double t0 = now_s();
  double x = 1;
  c->allreduce_sum_host(&x, 1);
  EXPECT_EQ(x, c->world());
  if (c->rank() != last && c->world() > 1) {
    EXPECT_GT(now_s() - t0, 1.0) << "it did wait";
  }
  c->barrier();
  comm::set_collective_timeout(saved);
}

TEST(CollectiveDeadline, WaitUntilPollsAnyPredicate) {
  const double saved = comm::collective_timeout();
  comm::set_collective_timeout(5);
  int calls = 0;
  comm::detail::Collective c("a test wait");
  c.wait_until([&] { return ++calls == 1000; });
  EXPECT_EQ(calls, 1000);
  comm::set_collective_timeout(saved);
}

TEST(CollectiveDeadline, EveryRankAndAllgatherStrings) {
  ChannelScope channel;
  const int rank = comm::world_rank(), world = comm::world_size();
  EXPECT_TRUE(comm::every_rank(true, "test"));
  EXPECT_FALSE(comm::every_rank(rank != world - 1, "test")) << "the last rank says no";
  const auto all = comm::allgather_strings(std::string(static_cast<size_t>(rank), 'x') + "@" +
                                               std::to_string(rank), "test");
  ASSERT_EQ(all.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(all[r], std::string(static_cast<size_t>(r), 'x') + "@" + std::to_string(r));
}

// Many collectives in a row with the arrival channel open (the watchers drain each other rank's
// 8-byte messages as they come), and the helper's cost per small collective, with and without
// the channel, next to a blocking MPI_Allreduce's.
TEST(CollectiveDeadline, ThousandsOfCollectivesStayCheap) {
  auto c = comm::make_mpi_communicator();
  const int n = 5000;
  auto per_call_us = [&](bool helper) {
    double x = 0;
    c->barrier();
    const double t0 = now_s();
    for (int i = 0; i < n; ++i) {
      x = 1;
      if (helper) c->allreduce_sum_host(&x, 1);
      else MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    EXPECT_EQ(x, c->world());
    return (now_s() - t0) / n * 1e6;
  };
  const double raw_us = per_call_us(false), bare_us = per_call_us(true);
  double channel_us = 0;
  {
    ChannelScope channel;
    channel_us = per_call_us(true);
    c->barrier();
  }
  if (c->rank() == 0)
    std::printf("8-byte allreduce, %d ranks: %.2f us blocking MPI_Allreduce, %.2f us through the "
                "deadline helper, %.2f us with the arrival channel too\n",
                c->world(), raw_us, bare_us, channel_us);
}
