// tests/cudasim/test_cuda_sim_atomics.cpp — the simulator's 32-bit integer atomics and fences
// (cudasim/device.h) against the CUDA Programming Guide's definitions: atomicAdd, atomicInc and
// atomicExch return the word they read and store old + val, (old >= val) ? 0 : old + 1, and val; a counter
// every thread of a grid increments ends at the thread count in every schedule; the "last block finishes"
// reduction (partials, __threadfence, a blocks-done counter that atomicInc brings back to 0) gives the same
// bits in every schedule and leaves the counter at 0 for the next launch; and a kernel whose output is
// which thread got which `old` depends on the schedule and is a racecheck report.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "kernels/cuda/common.cuh"

namespace sftdp::test {
namespace {

constexpr int kBlock = 128;

// One thread, a fixed sequence: each atomic's returned `old` into olds[], the words' final values stay in
// place. ints[0..1], uints[0..3] start as the test sets them.
__global__ void atomic_sequence_kernel(int* olds, int* ints, unsigned* uints) {
  olds[0] = atomicAdd(&ints[0], 5);                           // 10 -> 15
  olds[1] = atomicAdd(&ints[0], -20);                         // 15 -> -5
  olds[2] = static_cast<int>(atomicAdd(&uints[0], 3u));       // 0xfffffffe -> 1 (wraps)
  olds[3] = static_cast<int>(atomicInc(&uints[1], 7u));       // 6 -> 7 (old < val: old + 1)
  olds[4] = static_cast<int>(atomicInc(&uints[1], 7u));       // 7 -> 0 (old >= val: 0)
  olds[5] = static_cast<int>(atomicInc(&uints[2], 3u));       // 9 -> 0 (old > val: 0)
  olds[6] = atomicExch(&ints[1], -42);                        // 8 -> -42
  olds[7] = static_cast<int>(atomicExch(&uints[3], 123u));    // 77 -> 123
  __threadfence();
  __threadfence_block();
}

__global__ void count_threads_kernel(unsigned* counter, int* signed_counter) {
  atomicAdd(counter, 1u);
  atomicAdd(signed_counter, -1);
}

// Planted bug: which thread gets which `old` is the schedule's, and the output keeps it.
__global__ void ticket_kernel(int* out, int* counter) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(counter, 1);
}

// sum[0] = Σ x over n values: each block writes the sum of its chunk to partials[blockIdx.x]; the block that
// finishes last (the blocks-done counter, wrapped back to 0 by atomicInc) adds the partials in block order.
__global__ void last_block_sum_kernel(float* sum, float* partials, unsigned* blocks_done, const float* x, int n) {
  __shared__ float shared[32];
  __shared__ bool last;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const float total = cuda::block_sum(i < n ? x[i] : 0.f, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
  __threadfence();  // the partial is visible device-wide before the block counts itself done
  __syncthreads();
  if (threadIdx.x == 0) last = atomicInc(blocks_done, gridDim.x - 1) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  float s = 0.f;
  for (unsigned b = 0; b < gridDim.x; ++b) s += __ldcg(&partials[b]);
  sum[0] = s;
}

using SimAtomics = SimTest;

TEST_F(SimAtomics, ReturnTheOldWordAndStoreWhatTheProgrammingGuideDefines) {
  int* olds = device<int>(8);
  int* ints = device_from<int>({10, 8});
  unsigned* uints = device_from<unsigned>({0xfffffffeu, 6u, 9u, 77u});
  SFTDP_LAUNCH(atomic_sequence_kernel, 1, 1, 0, stream_, olds, ints, uints);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(olds, 8), (std::vector<int>{10, 15, -2, 6, 7, 9, 8, 77}));
  EXPECT_EQ(host(ints, 2), (std::vector<int>{-5, -42}));
  EXPECT_EQ(host(uints, 4), (std::vector<unsigned>{1u, 0u, 0u, 123u}));
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimAtomics, ACounterEveryThreadIncrementsEndsAtTheThreadCountInEverySchedule) {
  ASSERT_GE(sim::schedules(), 2) << "the schedule comparison is what this test checks";
  unsigned* counter = device_from<unsigned>({0u});
  int* signed_counter = device_from<int>({INT_MIN + 5});
  SFTDP_LAUNCH(count_threads_kernel, 7, kBlock, 0, stream_, counter, signed_counter);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(counter, 1)[0], 7u * kBlock);
  const long long wrapped = static_cast<long long>(INT_MIN) + 5 - 7 * kBlock + (1LL << 32);  // below INT_MIN: wraps
  EXPECT_EQ(host(signed_counter, 1)[0], static_cast<int>(wrapped));
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimAtomics, LastBlockReductionIsTheSameInEveryScheduleAndResetsItsCounter) {
  const int n = 1000, blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.25f * static_cast<float>(i % 17) - 1.f;
  float* sum = device<float>(1);
  float* partials = device<float>(blocks);
  unsigned* blocks_done = device_from<unsigned>({0u});
  const float* dx = device_from(x);
  for (int run = 0; run < 2; ++run) {  // the counter the first launch leaves is the second one's start
    SFTDP_LAUNCH(last_block_sum_kernel, blocks, kBlock, 0, stream_, sum, partials, blocks_done, dx, n);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    float expect = 0.f;  // block sums in block order; small integers and quarters: every sum exact
    for (float v : x) expect += v;
    EXPECT_EQ(host(sum, 1)[0], expect) << "run " << run;
    EXPECT_EQ(host(blocks_done, 1)[0], 0u) << "run " << run;
  }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimAtomics, AnOutputThatKeepsTheAtomicsOrderIsARace) {
  int* out = device<int>(2 * kBlock);
  int* counter = device_from<int>({0});
  SFTDP_LAUNCH(ticket_kernel, 2, kBlock, 0, stream_, out, counter);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("racecheck", "ticket_kernel", "depends on the thread schedule");
}

}  // namespace
}  // namespace sftdp::test
