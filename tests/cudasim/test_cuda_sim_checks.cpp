// tests/cudasim/test_cuda_sim_checks.cpp — the CUDA simulator runs kernels under CUDA's execution model
// and catches what compute-sanitizer would: each test launches a small kernel written for it, first
// a correct one (barriers, shuffles, votes with CUDA's results), then one planted bug of each kind,
// which must be reported naming the kernel and end as CUDA reports it (a launch error through
// cudaGetLastError, or a sticky error from the next synchronisation): a missing __syncthreads, a
// barrier not reached by every thread, divergent barriers, a shuffle whose mask does not match the
// lanes that reach it, a shuffle reading a lane outside the operation, blocks racing on one element,
// writes and reads out of bounds, a misaligned 16-byte vector access, host or freed pointers as arguments,
// bad launch configurations, and reads of memory nobody wrote.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vec.cuh"

namespace sftdp::test {
namespace {

constexpr int kBlock = 256;

// ---- kernels: correct ones --------------------------------------------------------------------------
// out[b·256 + t] = 3·((t + 1) mod 256): every thread reads what its neighbour wrote to shared memory.
__global__ void rotate_shared_kernel(int* out, bool with_barrier) {
  __shared__ int s[kBlock];
  const int t = static_cast<int>(threadIdx.x);
  s[t] = 3 * t;
  if (with_barrier) __syncthreads();  // uniform over the block: allowed
  out[blockIdx.x * kBlock + t] = s[(t + 1) % kBlock];
}

__global__ void warp_ops_kernel(float* sum, int* down, int* up, int* idx, unsigned* ballot, int* all) {
  const int lane = static_cast<int>(threadIdx.x % 32), i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float v = static_cast<float>(lane + 1);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  sum[i] = v;
  down[i] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
  up[i] = __shfl_up_sync(0xffffffffu, lane * 10, 5, 16);
  idx[i] = __shfl_sync(0xffffffffu, lane * 10, 7, 8);
  ballot[i] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  all[i] = __all_sync(0xffffffffu, lane < 32) + 2 * __any_sync(0xffffffffu, lane == 5);
}

// never_true is false: the write after the read only keeps the compiler from folding reads of a static array
// that nothing writes to its zero initialiser (clang -O2 does; __shared__ is a static in the simulator build).
__global__ void read_unwritten_shared_kernel(float* out, bool never_true) {
  __shared__ float s[32];
  out[threadIdx.x] = s[threadIdx.x];
  if (never_true) s[threadIdx.x] = 0.f;
}


// ---- kernels: planted bugs ------------------------------------------------------------------------
__global__ void partial_barrier_kernel(int* out) {
  if (threadIdx.x < 16) __syncthreads();  // threads 16.. never arrive
  out[threadIdx.x] = 1;
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x % 2) {
    out[threadIdx.x] = 1;
    __syncthreads();
  } else {
    out[threadIdx.x] = 2;
    __syncthreads();  // another barrier: undefined on a GPU
  }
}

__global__ void half_warp_shuffle_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x % 32 < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);  // the mask names lanes 16..31 too
  __syncthreads();
  out[threadIdx.x] = v;
}

__global__ void shuffle_outside_mask_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v += __shfl_xor_sync(0x0000ffffu, v, 16);  // lane ^ 16 is not in the mask
  out[threadIdx.x] = v;
}

__global__ void blocks_write_same_element_kernel(int* out) {
  if (threadIdx.x == 0) out[0] = static_cast<int>(blockIdx.x);  // the winner depends on block order
}

__global__ void write_one_past_end_kernel(float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[i] = 1.f;  // planted off-by-one: <= instead of <
}

__global__ void read_past_end_kernel(float* out, const float* in, int n) { out[threadIdx.x] = in[n + threadIdx.x]; }

// 16-byte vector copy (kernels/cuda/vec.cuh) at element offsets: an offset that is not a multiple of 4 floats
// is a misaligned 128-bit access, which a GPU refuses.
__global__ void vector_copy_kernel(float* out, const float* in, int out_offset, int in_offset) {
  const int i = static_cast<int>(4 * threadIdx.x);
  cuda::store_vec(out + out_offset + i, cuda::load_vec(in + in_offset + i));
}

// ---- tests ------------------------------------------------------------------------------------------
using SimChecks = SimTest;

TEST_F(SimChecks, BarrierMakesSharedWritesVisibleInEverySchedule) {
  ASSERT_GE(sim::schedules(), 2) << "the schedule comparison is what these tests check";
  int* out = device<int>(3 * kBlock);
  SFTDP_LAUNCH(rotate_shared_kernel, 3, kBlock, 0, stream_, out, true);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto got = host(out, 3 * kBlock);
  for (int i = 0; i < 3 * kBlock; ++i) ASSERT_EQ(got[i], 3 * ((i % kBlock + 1) % kBlock)) << i;
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimChecks, MissingBarrierIsARaceNamingTheKernel) {
  int* out = device<int>(kBlock);
  SFTDP_LAUNCH(rotate_shared_kernel, 1, kBlock, 0, stream_, out, false);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);  // the launch itself is fine
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("racecheck", "rotate_shared_kernel", "depends on the thread schedule");
  // Sticky, as on a GPU: the next call fails too.
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorLaunchFailure);
}

TEST_F(SimChecks, WarpShufflesAndVotesGiveCudasResults) {
  const int n = 64;
  float* sum = device<float>(n);
  int *down = device<int>(n), *up = device<int>(n), *idx = device<int>(n), *all = device<int>(n);
  unsigned* ballot = device<unsigned>(n);
  SFTDP_LAUNCH(warp_ops_kernel, 1, n, 0, stream_, sum, down, up, idx, ballot, all);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto s = host(sum, n);
  const auto d = host(down, n), u = host(up, n), x = host(idx, n), a = host(all, n);
  const auto b = host(ballot, n);
  unsigned every_third = 0;
  for (int l = 0; l < 32; l += 3) every_third |= 1u << l;
  for (int i = 0; i < n; ++i) {
    const int lane = i % 32;
    EXPECT_EQ(s[i], 528.f) << i;                                         // 1 + 2 + ... + 32 on every lane
    EXPECT_EQ(d[i], lane + 3 < 32 ? (lane + 3) * 10 : lane * 10) << i;   // past the warp: own value
    EXPECT_EQ(u[i], lane % 16 >= 5 ? (lane - 5) * 10 : lane * 10) << i;  // within 16-lane segments
    EXPECT_EQ(x[i], (lane / 8 * 8 + 7) * 10) << i;                       // lane 7 of each 8-lane segment
    EXPECT_EQ(b[i], every_third) << i;
    EXPECT_EQ(a[i], 3) << i;
  }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimChecks, BarrierNotReachedByEveryThreadIsAnError) {
  int* out = device<int>(64);
  SFTDP_LAUNCH(partial_barrier_kernel, 1, 64, 0, stream_, out);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "partial_barrier_kernel", "not reached by every thread", "48 thread(s) exited");
}

TEST_F(SimChecks, DivergentBarriersAreAnError) {
  int* out = device<int>(64);
  SFTDP_LAUNCH(divergent_barrier_kernel, 1, 64, 0, stream_, out);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "divergent_barrier_kernel", "different __syncthreads");
}

TEST_F(SimChecks, ShuffleMaskNamingLanesElsewhereIsAnError) {
  float* out = device<float>(64);
  SFTDP_LAUNCH(half_warp_shuffle_kernel, 1, 64, 0, stream_, out);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "half_warp_shuffle_kernel", "__shfl_xor_sync", "mask 0xffffffff", "__syncthreads");
}

TEST_F(SimChecks, ShuffleReadingALaneOutsideTheOperationIsAnError) {
  float* out = device<float>(32);
  SFTDP_LAUNCH(shuffle_outside_mask_kernel, 1, 32, 0, stream_, out);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "shuffle_outside_mask_kernel", "reads lane 16", "does not take part");
}

TEST_F(SimChecks, BlocksWritingOneElementAreARace) {
  int* out = device<int>(1);
  SFTDP_LAUNCH(blocks_write_same_element_kernel, 8, 32, 0, stream_, out);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("racecheck", "blocks_write_same_element_kernel", "0x00000007", "0x00000000");
}

TEST_F(SimChecks, FreshDeviceAndSharedMemoryReadAsNaN) {
  float* fresh = device<float>(100);
  for (float v : host(fresh, 100)) EXPECT_TRUE(std::isnan(v));
  float* out = device<float>(32);
  SFTDP_LAUNCH(read_unwritten_shared_kernel, 1, 32, 0, stream_, out, false);
  for (float v : host(out, 32)) EXPECT_TRUE(std::isnan(v));
}

TEST_F(SimChecks, HostOrFreedPointerArgumentIsALaunchError) {
  std::vector<float> on_host(64);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, on_host.data(), 1.f, 64);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_REPORT("launch", "fill_kernel", "argument 1", "not device memory");
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, static_cast<float*>(p), 1.f, 64);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_REPORT("launch", "fill_kernel", "freed");
  // Launch errors are not sticky: the next launch runs.
  float* ok = device<float>(64);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, ok, 2.f, 64);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  for (float v : host(ok, 64)) EXPECT_EQ(v, 2.f);
}

TEST_F(SimChecks, BadLaunchConfigurationsFailAsOnAGpu) {
  float* out = device<float>(2048);
  SFTDP_LAUNCH(fill_kernel, 1, 1025, 0, stream_, out, 1.f, 2048);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  SFTDP_LAUNCH(fill_kernel, 1, dim3(1, 1, 65), 0, stream_, out, 1.f, 2048);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  SFTDP_LAUNCH(fill_kernel, dim3(1, 65536), 32, 0, stream_, out, 1.f, 2048);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  SFTDP_LAUNCH(fill_kernel, 0, 32, 0, stream_, out, 1.f, 2048);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  SFTDP_LAUNCH(fill_kernel, 1, 32, (48 << 10) + 1, stream_, out, 1.f, 2048);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_REPORT("launch", "fill_kernel", "1025 threads per block");
  EXPECT_REPORT("launch", "fill_kernel", "block (1,1,65)");
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);  // nothing was queued
  for (float v : host(out, 2048)) EXPECT_TRUE(std::isnan(v));
}

TEST_F(SimChecks, MisalignedVectorAccessIsAStickyMisalignedAddress) {
  std::vector<float> values(4 * 32 + 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const float* in = device_from(values);
  float* out = device<float>(4 * 32 + 8);
  SFTDP_LAUNCH(vector_copy_kernel, 1, 32, 0, stream_, out, in, 0, 4);  // both 16-byte aligned: fine
  const auto copied = host(out, 4 * 32);
  for (int i = 0; i < 4 * 32; ++i) ASSERT_EQ(copied[i], values[4 + i]) << i;
  EXPECT_TRUE(sim::reports().empty()) << all_reports();

  SFTDP_LAUNCH(vector_copy_kernel, 1, 32, 0, stream_, out, in, 0, 1);  // the load 4 bytes past a boundary
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the launch itself is fine
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorMisalignedAddress);
  EXPECT_REPORT("memcheck", "vector_copy_kernel", "misaligned address", "16-byte vector load", "byte 4 of allocation");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMisalignedAddress), "misaligned address");
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorMisalignedAddress);  // sticky, as on a GPU

  sim::clear_sticky_error();
  sim::clear_reports();
  SFTDP_LAUNCH(vector_copy_kernel, 1, 32, 0, stream_, out, in, 2, 0);  // the store 8 bytes past a boundary
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorMisalignedAddress);
  EXPECT_REPORT("memcheck", "vector_copy_kernel", "misaligned address", "16-byte vector store", "byte 8 of allocation");
}

// Out-of-bounds accesses: in the plain simulator build a write into an allocation's slack is a
// memcheck report and a sticky cudaErrorIllegalAddress; under ASan (the sanitized CI build) the
// slack is poisoned and ASan ends the process, our death callback naming the kernel. A read past
// the end of a page-sized allocation hits the guard page in both builds. Either way the kernel is named.
void run_and_exit(const std::function<void()>& body) {
  body();
  for (const std::string& r : sim::reports()) std::fputs(r.c_str(), stderr);
  std::_Exit(3);
}

TEST(SimChecksDeath, WriteOnePastTheEndNamesTheKernel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      run_and_exit([] {
        float* out = nullptr;
        cudaMalloc(&out, 100 * sizeof(float));
        SFTDP_LAUNCH(write_one_past_end_kernel, 1, 128, 0, nullptr, out, 100);
        const cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaErrorIllegalAddress) std::fputs("sticky cudaErrorIllegalAddress\n", stderr);
      }),
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); },
      "write_one_past_end_kernel.* wrote out of bounds: 0 bytes after the end of allocation|"
      "AddressSanitizer report above is from kernel write_one_past_end_kernel");
}

TEST(SimChecksDeath, ReadIntoTheGuardPageNamesTheKernel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto read_past_end = [] {
    float *in = nullptr, *out = nullptr;
    cudaMalloc(&in, 4096);  // one page: the next byte is the guard page
    cudaMalloc(&out, 32 * sizeof(float));
    SFTDP_LAUNCH(read_past_end_kernel, 1, 32, 0, nullptr, out, in, 1024);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(read_past_end(), "read_past_end_kernel");
}

}  // namespace
}  // namespace sftdp::test
