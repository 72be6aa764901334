// tests/cudasim/test_cuda_sim_streams.cpp — streams, events and devices of the CUDA simulator keep
// CUDA's meaning, and a program that leans on luck fails every time: queued work runs only when the
// program's own synchronisation asks for it, so a device-to-host copy read before synchronising,
// or a stream that forgot to wait for another's event, reads stale data; events order streams; the
// legacy default stream orders itself with blocking streams and not with non-blocking ones;
// cudaFree waits for queued work. Devices: SFTDP_SIM_DEVICES and CUDA_VISIBLE_DEVICES as CUDA reads
// it, one PCI bus id each, a memory budget that cudaMalloc enforces with cudaErrorMemoryAllocation,
// and bad settings are an error line with exit 2 (each device test runs in a fresh process).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "kernels/cuda/common.cuh"

namespace sftdp::test {
namespace {


using SimStreams = SimTest;

TEST_F(SimStreams, DeviceToHostCopyReadBeforeSynchronisingIsStale) {
  const std::vector<float> src = {1, 2, 3, 4};
  float* d = device<float>(4);
  std::vector<float> got(4, -7.f);
  ASSERT_EQ(cudaMemcpyAsync(d, src.data(), 16, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, d, 5.f, 2);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), d, 16, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(4, -7.f)) << "queued work ran before the program synchronised";
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(got, (std::vector<float>{5, 5, 3, 4}));
}

TEST_F(SimStreams, MissingEventWaitReadsStaleDataIsReportedAndTheWaitFixesIt) {
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  float *a = device<float>(64), *b = device<float>(64);
  ASSERT_EQ(cudaMemset(a, 0, 256), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Producer on stream_, consumer on `other`, no wait: the consumer sees a's old zeros, and once the
  // producer runs, streamcheck reports the two accesses of `a` that nothing orders.
  SFTDP_LAUNCH(fill_kernel, 2, 32, 0, stream_, a, 9.f, 64);
  SFTDP_LAUNCH(copy_kernel, 2, 32, 0, other, b, a, 64);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  std::vector<float> got(64);
  ASSERT_EQ(cudaMemcpy(got.data(), b, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(64, 0.f)) << "the consumer ran after the producer although nothing ordered it";
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("streamcheck", "kernel fill_kernel", "writes bytes 0..", "kernel copy_kernel (argument 2)",
                "nothing orders the two");
  sim::clear_sticky_error();
  sim::clear_reports();
  // With the event: the consumer's stream waits for the producer's work, which runs because of it.
  cudaEvent_t produced = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 2, 32, 0, stream_, a, 4.f, 64);
  ASSERT_EQ(cudaEventRecord(produced, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, produced, 0), cudaSuccess);
  SFTDP_LAUNCH(copy_kernel, 2, 32, 0, other, b, a, 64);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), b, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(64, 4.f));
  EXPECT_EQ(sim::reports(), std::vector<std::string>{}) << "the event orders the two streams";
  EXPECT_EQ(cudaEventDestroy(produced), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

// ---- streamcheck (cudasim/stream_order.h): what orders two streams' accesses ----

TEST_F(SimStreams, StreamcheckTakesHostSynchronisationAndDisjointRangesAsOrderedOrApart) {
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  float *a = device<float>(64), *b = device<float>(64);
  ASSERT_EQ(cudaMemset(a, 0, 256), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // The host waited for the producer before queueing the consumer: ordered.
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, a, 1.f, 64);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  SFTDP_LAUNCH(copy_kernel, 1, 32, 0, other, b, a, 64);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  // Two streams writing the two halves of one allocation: no byte in common.
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, a, 2.f, 32);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, other, a + 32, 3.f, 32);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // An event polled until it answers cudaSuccess: the host has seen the work, what it queues next is after it.
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, b, 4.f, 64);
  ASSERT_EQ(cudaEventRecord(done, stream_), cudaSuccess);
  while (cudaEventQuery(done) == cudaErrorNotReady) {
  }
  ASSERT_EQ(cudaMemcpyAsync(a, b, 256, cudaMemcpyDeviceToDevice, other), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_EQ(sim::reports(), std::vector<std::string>{});
  // The same copy queued without the host having seen the fill: its source is written by an unordered fill.
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, b, 6.f, 64);
  ASSERT_EQ(cudaMemcpyAsync(a, b, 256, cudaMemcpyDeviceToDevice, other), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_REPORT("streamcheck", "cudaMemcpyAsync (source)", "kernel fill_kernel");
  EXPECT_EQ(cudaEventDestroy(done), cudaSuccess);
  sim::clear_sticky_error();
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

TEST_F(SimStreams, EventsCompleteWhenAskedAndTime) {
  cudaEvent_t start = nullptr, stop = nullptr, never = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&never), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(never), cudaSuccess);  // never recorded: complete
  float* d = device<float>(1 << 16);
  ASSERT_EQ(cudaEventRecord(start, stream_), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 64, 256, 0, stream_, d, 1.f, 1 << 16);
  ASSERT_EQ(cudaEventRecord(stop, stream_), cudaSuccess);
  int polls = 0;
  cudaError_t e;
  while ((e = cudaEventQuery(stop)) == cudaErrorNotReady) ++polls;  // the first query starts the work
  EXPECT_EQ(e, cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaErrorNotReady is not an error";
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 0.f);
  for (cudaEvent_t ev : {start, stop, never}) EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
}

TEST_F(SimStreams, LegacyStreamWaitsForBlockingStreamsOnly) {
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  float *a = device<float>(32), *b = device<float>(32);
  ASSERT_EQ(cudaMemset(a, 0, 128), cudaSuccess);
  ASSERT_EQ(cudaMemset(b, 0, 128), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, blocking, a, 3.f, 32);  // ordered before legacy-stream work
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, b, 3.f, 32);   // non-blocking: not ordered
  std::vector<float> ga(32), gb(32);
  ASSERT_EQ(cudaMemcpy(ga.data(), a, 128, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(gb.data(), b, 128, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(ga, std::vector<float>(32, 3.f));
  EXPECT_EQ(gb, std::vector<float>(32, 0.f));
  // The legacy stream's copy of `a` was ordered after the blocking stream's fill; the copy of `b` was not after
  // the non-blocking stream's, a race streamcheck reports once that fill runs.
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("streamcheck", "kernel fill_kernel", "cudaMemcpy (source)");
  EXPECT_EQ(report_with({"streamcheck", "blocking"}), "");
  sim::clear_sticky_error();
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(SimStreams, FreeWaitsForQueuedWork) {
  const std::vector<float> src(50, 6.f);
  float* in = device_from(src);
  float* out = device<float>(50);
  float* doomed = nullptr;
  ASSERT_EQ(cudaMalloc(&doomed, 200), cudaSuccess);
  SFTDP_LAUNCH(copy_kernel, 1, 64, 0, stream_, doomed, in, 50);
  SFTDP_LAUNCH(copy_kernel, 1, 64, 0, stream_, out, doomed, 50);
  ASSERT_EQ(cudaFree(doomed), cudaSuccess);  // both kernels have run by now
  std::vector<float> got(50);
  ASSERT_EQ(cudaMemcpy(got.data(), out, 200, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, src);
  EXPECT_EQ(cudaFree(doomed), cudaErrorInvalidValue);  // a double free
  EXPECT_REPORT("memcheck", "cudaFree", "double free");
}

TEST_F(SimStreams, CopiesOutsideAnAllocationAreRejected) {
  float* d = device<float>(10);
  std::vector<float> h(11);
  EXPECT_EQ(cudaMemcpyAsync(d, h.data(), 44, cudaMemcpyHostToDevice, stream_), cudaErrorInvalidValue);
  EXPECT_REPORT("memcheck", "cudaMemcpyAsync", "destination range of 44 bytes");
  EXPECT_EQ(cudaMemsetAsync(h.data(), 0, 4, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, 8, cudaMemcpyHostToDevice, stream_), cudaErrorInvalidValue);  // wrong kind
}

// ---- devices, each in a fresh process (settings are read once per process) --------------------------
void expect_in_child(const char* env, const std::function<void()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        for (std::string kv : {std::string(env)}) {
          size_t at = 0;
          while (at < kv.size()) {
            const size_t end = std::min(kv.find(';', at), kv.size());
            const std::string item = kv.substr(at, end - at);
            const size_t eq = item.find('=');
            setenv(item.substr(0, eq).c_str(), item.substr(eq + 1).c_str(), 1);
            at = end + 1;
          }
        }
        body();
        std::exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SimDevices, CountAndBusIdsFollowTheEnvironment) {
  expect_in_child("SFTDP_SIM_DEVICES=3", [] {
    int n = 0;
    EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
    EXPECT_EQ(n, 3);
    std::set<std::string> ids;
    for (int d = 0; d < n; ++d) {
      char id[32] = {};
      EXPECT_EQ(cudaDeviceGetPCIBusId(id, sizeof id, d), cudaSuccess);
      ids.insert(id);
    }
    EXPECT_EQ(ids.size(), 3u);
    EXPECT_EQ(cudaSetDevice(3), cudaErrorInvalidDevice);
  });
  // CUDA's rule: the listed devices in order, up to the first entry that is not one.
  expect_in_child("SFTDP_SIM_DEVICES=3;CUDA_VISIBLE_DEVICES=2,0,x,1", [] {
    int n = 0;
    EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
    EXPECT_EQ(n, 2);
    char first[32] = {}, physical2[32] = {};
    EXPECT_EQ(cudaDeviceGetPCIBusId(first, sizeof first, 0), cudaSuccess);
    std::snprintf(physical2, sizeof physical2, "0000:%02X:00.0", 0x18 + 0x10 * 2);
    EXPECT_STREQ(first, physical2);
  });
  expect_in_child("CUDA_VISIBLE_DEVICES=", [] {
    int n = -1;
    EXPECT_EQ(cudaGetDeviceCount(&n), cudaErrorNoDevice);
    EXPECT_EQ(n, 0);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 4), cudaErrorNoDevice);
  });
}

TEST(SimDevices, MallocEnforcesEachDevicesBudget) {
  expect_in_child("SFTDP_SIM_DEVICES=2;SFTDP_SIM_DEVICE_MEMORY=8M", [] {
    size_t free_b = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_b, &total), cudaSuccess);
    EXPECT_EQ(total, size_t{8} << 20);
    void *a = nullptr, *b = nullptr, *c = nullptr;
    EXPECT_EQ(cudaMalloc(&a, size_t{9} << 20), cudaErrorMemoryAllocation);
    EXPECT_EQ(a, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
    EXPECT_EQ(cudaMalloc(&a, size_t{5} << 20), cudaSuccess);
    EXPECT_EQ(cudaMemGetInfo(&free_b, &total), cudaSuccess);
    EXPECT_EQ(free_b, size_t{3} << 20);
    EXPECT_EQ(cudaMalloc(&b, size_t{4} << 20), cudaErrorMemoryAllocation);
    EXPECT_EQ(cudaSetDevice(1), cudaSuccess);  // the other device has its own budget
    EXPECT_EQ(cudaMalloc(&c, size_t{6} << 20), cudaSuccess);
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaFree(a), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&b, size_t{8} << 20), cudaSuccess);
  });
}

// fill_kernel(a, value) on a producer stream, then copy_kernel(b <- a) on a consumer stream that waits for it by an
// event: the wait SFTDP_SIM_PLANT=drop-wait-before:kernel copy_kernel deletes. Returns a (64 floats), or null.
float* fill_then_copy_across_streams(float value) {
  cudaStream_t producer = nullptr, consumer = nullptr;
  float *a = nullptr, *b = nullptr;
  cudaEvent_t done = nullptr;
  if (cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&a, 256) != cudaSuccess ||
      cudaMalloc(&b, 256) != cudaSuccess || cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess)
    return nullptr;
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, producer, a, value, 64);
  if (cudaEventRecord(done, producer) != cudaSuccess || cudaStreamWaitEvent(consumer, done, 0) != cudaSuccess)
    return nullptr;
  SFTDP_LAUNCH(copy_kernel, 1, 32, 0, consumer, b, a, 64);
  return a;
}

// SFTDP_SIM_PLANT (tests): a deleted cudaStreamWaitEvent, planted from outside the program, is reported.
TEST(SimPlant, ADroppedWaitIsAStreamcheckReport) {
  expect_in_child("SFTDP_SIM_PLANT=drop-wait-before:kernel copy_kernel", [] {
    ASSERT_NE(fill_then_copy_across_streams(1.f), nullptr);
    (void)cudaDeviceSynchronize();
    EXPECT_REPORT("plant", "dropped the cudaStreamWaitEvent before kernel copy_kernel");
    EXPECT_REPORT("streamcheck", "kernel copy_kernel", "kernel fill_kernel");
  });
}

// SFTDP_SIM_STREAMCHECK=0 turns streamcheck off and nothing else: kernels still run, on one thread schedule too
// (a launch once read the snapshot that neither streamcheck nor a second schedule takes then: a crash).
TEST(SimStreamcheck, OffRunsEveryKernelAndReportsNoStreamOrder) {
  expect_in_child("SFTDP_SIM_STREAMCHECK=0;SFTDP_SIM_SCHEDULES=1;SFTDP_SIM_PLANT=drop-wait-before:kernel copy_kernel", [] {
    float* a = fill_then_copy_across_streams(3.f);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(report_with({"streamcheck"}), "");
    std::vector<float> h(64);
    ASSERT_EQ(cudaMemcpy(h.data(), a, 256, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h, std::vector<float>(64, 3.f));
  });
}

TEST(SimDevices, BadSettingIsAnErrorLineWithExitTwo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SFTDP_SIM_DEVICES", "two", 1);
        int n = 0;
        cudaGetDeviceCount(&n);
      },
      ::testing::ExitedWithCode(2), "error: SFTDP_SIM_DEVICES=two: expected a whole number");
}

}  // namespace
}  // namespace sftdp::test
