// tests/train/test_gpu_plan.cpp — plan_gpus (src/train/gpu_plan.h): a job may use the GPUs only when
// no two ranks of a node would take one device, counting a device narrowed per task once per task
// (told apart by bus id); the reason names the first short node, its local ranks and devices.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "train/gpu_plan.h"

namespace sftdp::train {
namespace {

const std::string kA = "0000:19:00.0", kB = "0000:3B:00.0", kC = "0000:4C:00.0", kD = "0000:5D:00.0";

RankGpuFacts rank(const std::string& host, int local_rank, std::vector<std::string> devices) {
  return {host, local_rank, std::move(devices)};
}

TEST(GpuPlan, OneRankOneDevice) {
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA})});
  EXPECT_TRUE(p.ok);
  EXPECT_TRUE(p.any_device);
  EXPECT_EQ(p.why, "");
}

TEST(GpuPlan, TwoRanksOnOneGpuAreRefused) {
  // mpirun -np 2 on a one-GPU machine: both see the same device, both would take it.
  const GpuPlan p = plan_gpus({rank("vm", 0, {kA}), rank("vm", 1, {kA})});
  EXPECT_FALSE(p.ok);
  EXPECT_TRUE(p.any_device);
  EXPECT_CONTAINS(p.why, "vm runs 2 local ranks but has 1 usable CUDA device;");
  EXPECT_CONTAINS(p.why, "ranks 0 and 1 would share device " + kA);
}

TEST(GpuPlan, EveryTaskSeesAllDevicesOfItsNode) {
  // --gpus-per-node=2 --ntasks-per-node=2: device local_rank % 2, one each.
  EXPECT_TRUE(plan_gpus({rank("n1", 0, {kA, kB}), rank("n1", 1, {kA, kB})}).ok);
  // More devices than ranks is fine too.
  EXPECT_TRUE(plan_gpus({rank("n1", 0, {kA, kB, kC, kD}), rank("n1", 1, {kA, kB, kC, kD})}).ok);
}

TEST(GpuPlan, MoreLocalRanksThanDevices) {
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA, kB}), rank("n1", 1, {kA, kB}), rank("n1", 2, {kA, kB})});
  EXPECT_FALSE(p.ok);
  EXPECT_CONTAINS(p.why, "n1 runs 3 local ranks but has 2 usable CUDA devices;");
  EXPECT_CONTAINS(p.why, "ranks 0 and 2 would share device " + kA);
}

TEST(GpuPlan, NarrowedToOneDevicePerTaskCountsOneEach) {
  // srun --gpus-per-task=1 (or --gpu-bind=single:1): each task sees one device, another one each,
  // even where a device cgroup renumbers every task's device as 0.
  EXPECT_TRUE(plan_gpus({rank("n1", 0, {kA}), rank("n1", 1, {kB}), rank("n1", 2, {kC})}).ok);
}

TEST(GpuPlan, NarrowedToTheSameDeviceIsRefused) {
  // CUDA_VISIBLE_DEVICES=0 exported to every task: one device each, but the same one.
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA}), rank("n1", 1, {kB}), rank("n1", 2, {kB})});
  EXPECT_FALSE(p.ok);
  EXPECT_CONTAINS(p.why, "n1 runs 3 local ranks but has 2 usable CUDA devices;");
  EXPECT_CONTAINS(p.why, "ranks 1 and 2 would share device " + kB);
}

TEST(GpuPlan, NodesAreCountedApart) {
  // Two one-GPU nodes, one rank each: fine, even though the bus ids are equal across nodes.
  EXPECT_TRUE(plan_gpus({rank("n1", 0, {kA}), rank("n2", 0, {kA})}).ok);
  // Ranks in any order: rank 2 is n1's second local rank; n2 is fine, n1 is not.
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA}), rank("n2", 0, {kA, kB}), rank("n1", 1, {kA}),
                               rank("n2", 1, {kA, kB})});
  EXPECT_FALSE(p.ok);
  EXPECT_CONTAINS(p.why, "n1 runs 2 local ranks but has 1 usable CUDA device;");
  EXPECT_CONTAINS(p.why, "ranks 0 and 2 would share");
}

TEST(GpuPlan, FirstShortNodeIsNamed) {
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA}), rank("n2", 0, {kA}), rank("n2", 1, {kA}),
                               rank("n3", 0, {kA}), rank("n3", 1, {kA})});
  EXPECT_FALSE(p.ok);
  EXPECT_CONTAINS(p.why, "n2 runs 2 local ranks");
  EXPECT_EQ(p.why.find("n3"), std::string::npos) << p.why;
}

TEST(GpuPlan, ARankWithoutDevice) {
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA}), rank("n2", 0, {})});
  EXPECT_FALSE(p.ok);
  EXPECT_TRUE(p.any_device);
  EXPECT_CONTAINS(p.why, "n2 runs 1 local rank but has 0 usable CUDA devices (rank 1 sees none)");
}

TEST(GpuPlan, NoDeviceAnywhereIsTheCpuCase) {
  const GpuPlan p = plan_gpus({rank("n1", 0, {}), rank("n1", 1, {})});
  EXPECT_FALSE(p.ok);
  EXPECT_FALSE(p.any_device);  // hardware=auto then picks the CPU without a word
}

TEST(GpuPlan, LocalRankPicksTheDeviceAsCudaSelectDeviceDoes) {
  // Local ranks 0 and 2 on two devices: 0 % 2 == 2 % 2, the same device, though there are enough.
  const GpuPlan p = plan_gpus({rank("n1", 0, {kA, kB}), rank("n1", 2, {kA, kB})});
  EXPECT_FALSE(p.ok);
  EXPECT_CONTAINS(p.why, "would share device " + kA);
}

TEST(GpuPlan, EmptyJob) { EXPECT_FALSE(plan_gpus({}).ok); }

}  // namespace
}  // namespace sftdp::train
