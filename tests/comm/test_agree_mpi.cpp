// tests/comm/test_agree_mpi.cpp — under mpiexec: a user error seen by one rank only (a file that
// its node cannot see) reaches every rank as the same UserError, so all exit 2 together; and the
// MPI communicator's sums, broadcasts and rank numbers are what they say.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/comm.h"

using namespace sftdp;

TEST(AgreeOnUserErrors, ErrorOnOneRankIsThrownOnEveryRank) {
  const int rank = comm::world_rank(), world = comm::world_size();
  const int bad = world - 1;  // the last rank "cannot see" the file
  try {
    comm::agree_on_user_errors([&] {
      if (rank == bad) throw UserError("train_files: /node-local/x.h5: not found");
    });
    FAIL() << "rank " << rank << " did not throw";
  } catch (const UserError& e) {
    const std::string want = world == 1 || bad == 0 ? "train_files: /node-local/x.h5: not found"
                                                    : "train_files: /node-local/x.h5: not found (seen by rank " +
                                                          std::to_string(bad) + ")";
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(AgreeOnUserErrors, LowestFailingRankSpeaks) {
  const int rank = comm::world_rank();
  try {
    comm::agree_on_user_errors([&] { throw UserError("rank " + std::to_string(rank)); });
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0");
  }
}

TEST(AgreeOnUserErrors, NoErrorNoThrow) {
  int calls = 0;
  EXPECT_NO_THROW(comm::agree_on_user_errors([&] { ++calls; }));
  EXPECT_EQ(calls, 1);
}

TEST(MpiCommunicator, SumsBroadcastsAndRanks) {
  auto c = comm::make_mpi_communicator();
  const int n = c->world();
  EXPECT_EQ(c->rank(), comm::world_rank());
  std::vector<float> g(1001, float(c->rank() + 1));
  c->allreduce_sum(g.data(), g.size());
  for (float x : g) ASSERT_EQ(x, n * (n + 1) / 2.0f);
  double h[2] = {1.0, double(c->rank())};
  c->allreduce_sum_host(h, 2);
  EXPECT_EQ(h[0], n);
  EXPECT_EQ(h[1], n * (n - 1) / 2.0);
  uint64_t v = c->rank() == 0 ? 0xfeedull : 0;
  c->broadcast_host(&v, sizeof v, 0);
  EXPECT_EQ(v, 0xfeedull);
}
