// tests/train/test_placement.cpp — the placement line (src/train/placement.h) and the rank lists
// of the error lines (src/comm/rank_list.h): ranks grouped by host, runs written as ranges, GPUs by
// bus id (equal ids on two hosts are two devices), hosts in order of their lowest rank.
#include <gtest/gtest.h>

#include "comm/rank_list.h"
#include "train/placement.h"

namespace sftdp {
namespace {

TEST(RankList, RunsAreRanges) {
  EXPECT_EQ(comm::rank_ranges({}), "");
  EXPECT_EQ(comm::rank_ranges({3}), "3");
  EXPECT_EQ(comm::rank_ranges({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(comm::rank_ranges({0, 2, 4, 5}), "0,2,4-5");
}

TEST(RankList, RanksAreNamedWithTheirHosts) {
  const std::vector<std::string> hosts = {"node1", "node1", "node2", "node2", "node3"};
  EXPECT_EQ(comm::ranks_with_hosts({2}, hosts), "rank 2 (node2)");
  EXPECT_EQ(comm::ranks_with_hosts({2, 3}, hosts), "ranks 2-3 (node2)");
  EXPECT_EQ(comm::ranks_with_hosts({0, 2, 3, 4}, hosts), "ranks 0 (node1), 2-3 (node2), 4 (node3)");
  EXPECT_EQ(comm::ranks_with_hosts({0, 2, 3, 4}, hosts, 1), "ranks 0 (node1) and 3 more on 2 other hosts");
  EXPECT_EQ(comm::ranks_with_hosts({0, 1, 4}, hosts, 8, comm::HostStyle::kOn), "ranks 0-1 on node1, 4 on node3");
  // Without the hosts (the arrival channel closed): ranks only.
  EXPECT_EQ(comm::ranks_with_hosts({1}, {}), "rank 1");
}

TEST(RankList, HostsInOrderOfTheirLowestRank) {
  // --distribution=cyclic: ranks alternate between the hosts.
  const auto g = comm::group_by_host({0, 1, 2, 3}, {"b", "a", "b", "a"});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].host, "b");
  EXPECT_EQ(g[0].ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(g[1].ranks, (std::vector<int>{1, 3}));
}

TEST(Placement, TwoNodesOfTwoCpuRanks) {
  EXPECT_EQ(
      train::describe_placement({{"node1", 0, "cpu"}, {"node1", 1, "cpu"}, {"node2", 0, "cpu"}, {"node2", 1, "cpu"}}),
      "4 ranks on 2 hosts; node1: ranks 0-1, local ranks 0-1, cpu; node2: ranks 2-3, local ranks 0-1, cpu");
}

TEST(Placement, GpusByBusIdPerRank) {
  const std::string a = "0000:18:00.0", b = "0000:28:00.0";
  EXPECT_EQ(train::describe_placement({{"n1", 0, a}, {"n1", 1, b}, {"n2", 0, a}, {"n2", 1, b}}),
            "4 ranks on 2 hosts; n1: ranks 0-1, local ranks 0-1, GPUs " + a + "," + b +
                "; n2: ranks 2-3, local ranks 0-1, GPUs " + a + "," + b);
  EXPECT_EQ(train::describe_placement({{"vm", 0, a}}), "1 rank on 1 host; vm: rank 0, local rank 0, GPU " + a);
}

TEST(Placement, LocalRanksOutOfOrderAreListedAsTheyAre) {
  EXPECT_EQ(train::describe_placement({{"a", 1, "cpu"}, {"a", 0, "cpu"}}),
            "2 ranks on 1 host; a: ranks 0-1, local ranks 1,0, cpu");
}

// srun --mpi=pmix over several hosts with the step's fences possibly on Slurm's tree: warned, naming
// the variable and what to set; nothing where the fences run on the ring, on one host, or without srun.
TEST(Placement, PmixTreeFenceOnSeveralHostsIsWarned) {
  const std::string unset = train::pmix_fence_warning("0", "2", nullptr, 2);
  EXPECT_NE(unset.find("SLURM_PMIX_FENCE is unset"), std::string::npos) << unset;
  EXPECT_NE(unset.find("export SLURM_PMIX_FENCE=ring"), std::string::npos) << unset;
  EXPECT_NE(train::pmix_fence_warning("0", "0", "tree", 3).find("SLURM_PMIX_FENCE is 'tree'"), std::string::npos);
  EXPECT_EQ(train::pmix_fence_warning("0", "0", "ring", 2), "");
  EXPECT_EQ(train::pmix_fence_warning("0", "0", nullptr, 1), "");   // one host: no inter-node fence
  EXPECT_EQ(train::pmix_fence_warning(nullptr, "0", nullptr, 2), "");  // mpirun: ORTE's own PMIx server
  EXPECT_EQ(train::pmix_fence_warning("0", nullptr, nullptr, 2), "");  // srun without --mpi=pmix
}

}  // namespace
}  // namespace sftdp
