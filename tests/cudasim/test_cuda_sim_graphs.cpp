// tests/cudasim/test_cuda_sim_graphs.cpp — stream capture and CUDA graphs in the simulator (cudasim/
// capture.h), as the CUDA Programming Guide and the runtime API describe them: a captured sequence (memset,
// kernels, a device-to-device copy, a cuBLASLt matmul, a branch forked to a second stream and joined back by
// events) runs nothing while captured, and its replay equals the eager run bitwise and runs again at each
// launch; kernel arguments are captured by value, pointers stay pointers; an NCCL allreduce replays; the
// launches of one executable graph are ordered; replayed kernels keep racecheck and memcheck; a replay is
// recorded as the eager ops with "graph" and "node" added. Errors with CUDA's codes: a synchronising call on
// a capturing stream, or a query of a captured event, invalidates the capture (cudaStreamEndCapture then
// fails); "potentially unsafe" calls by capture mode; the legacy stream; unjoined forks; ending a capture
// that is not there or not this stream's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include <cublasLt.h>
#include <mpi.h>
#include <nccl.h>

#include "common/test_util.h"
#include "cudasim/record.h"
#include "kernels/cuda/common.cuh"

namespace sftdp::test {
namespace {

constexpr int kN = 64, kM = 8, kK = 16, kCols = 8;  // vectors of kN; D(kM, kCols) = A(kM, kK)·B(kK, kCols)

__global__ void axpy_kernel(float* out, float a, const float* x, const float* y, int n) {  // out = a·x + y
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    out[i] = a * x[i] + y[i];
}
__global__ void blocks_write_same_element_kernel(int* out) {
  if (threadIdx.x == 0) out[0] = static_cast<int>(blockIdx.x);  // the winner depends on block order
}

// A column-major fp32 cuBLASLt product D = A·B set up once (handle, descriptors, heuristic), as a trainer
// would before capturing; run() is the one call a capture sees.
struct LtGemm {
  LtGemm() {
    EXPECT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, kM, kK, kM), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, kK, kCols, kK), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, kM, kCols, kM), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    int returned = 0;
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &algo, &returned), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreferenceDestroy(pref);
  }
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
  }
  cublasStatus_t run(cudaStream_t s, const float* A, const float* B, float* D) const {
    const float alpha = 1.f, beta = 0.f;
    return cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &algo.algo, nullptr, 0, s);
  }
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
};

// A one-rank NCCL communicator (MPI as a singleton, initialised once, finalised at exit).
ncclComm_t one_rank_comm() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    EXPECT_EQ(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), MPI_SUCCESS);
    std::atexit([] {
      int done = 0;
      MPI_Finalized(&done);
      if (!done) MPI_Finalize();
    });
  }
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  return comm;
}

class SimGraphs : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_EQ(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), cudaSuccess);
    x_ = device<float>(kN), y_ = device<float>(kN), z_ = device<float>(kN), acc_ = device<float>(kN);
    A_ = device_from(uniform(kM * kK, 1)), B_ = device_from(uniform(kK * kCols, 2)), D_ = device<float>(kM * kCols);
  }
  void TearDown() override {
    cudaGraph_t dropped = nullptr;
    for (cudaStream_t s : {stream_, side_}) (void)cudaStreamEndCapture(s, &dropped);  // a failed test's capture
    (void)cudaEventDestroy(fork_), (void)cudaEventDestroy(join_);
    (void)cudaStreamDestroy(side_);
    SimTest::TearDown();
  }
  // What a training step is made of: a memset, kernels, a device-to-device copy, a cuBLASLt matmul, a branch
  // on side_ forked and joined by events, and an accumulation acc += z that shows each run adds again.
  void step(float value) {
    EXPECT_EQ(cudaMemsetAsync(z_, 0, kN * sizeof(float), stream_), cudaSuccess);
    SFTDP_LAUNCH(fill_kernel, 2, 32, 0, stream_, x_, value, kN);
    EXPECT_EQ(cudaMemcpyAsync(y_, x_, kN * sizeof(float), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    EXPECT_EQ(gemm_.run(stream_, A_, B_, D_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(side_, fork_, 0), cudaSuccess);
    SFTDP_LAUNCH(axpy_kernel, 2, 32, 0, side_, z_, 2.f, y_, z_, kN);  // z = 2·y, beside the matmul
    EXPECT_EQ(cudaEventRecord(join_, side_), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(stream_, join_, 0), cudaSuccess);
    SFTDP_LAUNCH(axpy_kernel, 2, 32, 0, stream_, z_, 1.f, D_, z_, kN);  // z += D: needs both branches
    SFTDP_LAUNCH(axpy_kernel, 2, 32, 0, stream_, acc_, 1.f, z_, acc_, kN);
  }
  void zero_outputs() {
    for (float* p : {x_, y_, z_, acc_, D_}) ASSERT_EQ(cudaMemset(p, 0, kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<float> outputs() {  // z, acc and D, one after another
    std::vector<float> out;
    for (float* p : {z_, acc_, D_}) {
      const std::vector<float> h = host(p, kN);
      out.insert(out.end(), h.begin(), h.end());
    }
    return out;
  }
  cudaGraphExec_t capture_step(float value, size_t* nodes) {
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    step(value);
    EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, nodes), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the executable graph keeps what it needs
    return exec;
  }
  // Begins a capture on stream_ with one kernel in it, for the error tests.
  void begin_with_a_kernel(cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
    ASSERT_EQ(cudaStreamBeginCapture(stream_, mode), cudaSuccess);
    (void)cudaGetLastError();  // what earlier failing calls left
    SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, x_, 1.f, kN);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  // The capture on stream_ was invalidated: the stream says so, new work on it fails, and ending it gives
  // cudaErrorStreamCaptureInvalidated and no graph; afterwards the stream works eagerly again.
  void expect_invalidated() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    EXPECT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    EXPECT_EQ(cudaMemsetAsync(y_, 0, 4, stream_), cudaErrorStreamCaptureInvalidated);
    cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(this);
    EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    EXPECT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    (void)cudaGetLastError();
  }
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  float *x_ = nullptr, *y_ = nullptr, *z_ = nullptr, *acc_ = nullptr, *A_ = nullptr, *B_ = nullptr, *D_ = nullptr;
  LtGemm gemm_;
};

TEST_F(SimGraphs, ReplayEqualsTheEagerRunBitwiseAndEachLaunchRunsAgain) {
  zero_outputs();
  step(0.75f);
  const std::vector<float> eager = outputs();
  zero_outputs();
  size_t nodes = 0;
  const cudaGraphExec_t exec = capture_step(0.75f, &nodes);
  EXPECT_EQ(nodes, 7u);  // memset, fill, copy, matmul, the branch's kernel, two kernels after the join
  EXPECT_EQ(outputs(), std::vector<float>(3 * kN, 0.f)) << "a capture ran its work";
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  const std::vector<float> replayed = outputs();
  EXPECT_TRUE(bitwise_equal(replayed, eager));
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  const std::vector<float> twice = outputs();
  for (int i = 0; i < kN; ++i) ASSERT_EQ(twice[kN + i], 2 * eager[kN + i]) << "acc[" << i << "]: one launch, one run";
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

TEST_F(SimGraphs, KernelArgumentsAreCapturedByValuePointersStayPointers) {
  float value = 1.f;
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, x_, value, kN);
  SFTDP_LAUNCH(copy_kernel, 1, 32, 0, stream_, y_, z_, kN);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  value = 2.f;  // after the capture: the graph keeps 1
  const std::vector<float> later(kN, 5.f);
  ASSERT_EQ(cudaMemcpy(z_, later.data(), kN * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);  // read at replay
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(host(x_, kN), std::vector<float>(kN, 1.f));
  EXPECT_EQ(host(y_, kN), later);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(SimGraphs, LaunchesOfOneExecutableGraphAreOrderedAcrossStreams) {
  const std::vector<float> ones(kN, 1.f);
  ASSERT_EQ(cudaMemcpy(x_, ones.data(), kN * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(acc_, 0, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  SFTDP_LAUNCH(axpy_kernel, 1, 64, 0, stream_, acc_, 1.f, x_, acc_, kN);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, side_), cudaSuccess);  // behind the launch on stream_
  ASSERT_EQ(cudaStreamSynchronize(side_), cudaSuccess);  // side_ alone: stream_'s launch ran first
  std::vector<float> got(kN);
  ASSERT_EQ(cudaMemcpy(got.data(), acc_, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(kN, 2.f));
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(SimGraphs, AGraphLaunchedIntoACaptureBecomesItsNodes) {
  cudaGraph_t inner = nullptr, outer = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, x_, 3.f, kN);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &inner), cudaSuccess);
  cudaGraphExec_t inner_exec = nullptr, outer_exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&inner_exec, inner, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(side_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(inner_exec, side_), cudaSuccess);
  SFTDP_LAUNCH(axpy_kernel, 1, 64, 0, side_, y_, 2.f, x_, x_, kN);
  ASSERT_EQ(cudaStreamEndCapture(side_, &outer), cudaSuccess);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(outer, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 2u);
  ASSERT_EQ(cudaGraphInstantiate(&outer_exec, outer, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(outer_exec, stream_), cudaSuccess);
  EXPECT_EQ(host(y_, kN), std::vector<float>(kN, 9.f));
  for (cudaGraphExec_t e : {inner_exec, outer_exec}) EXPECT_EQ(cudaGraphExecDestroy(e), cudaSuccess);
  for (cudaGraph_t g : {inner, outer}) EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
}

TEST_F(SimGraphs, CapturedNcclAllReduceReplays) {
  ncclComm_t comm = one_rank_comm();
  ASSERT_EQ(cudaMemset(y_, 0, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, x_, 4.f, kN);
  ASSERT_EQ(ncclAllReduce(x_, y_, kN, ncclFloat, ncclSum, comm, stream_), ncclSuccess);  // out of place
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(host(y_, kN), std::vector<float>(kN, 0.f)) << "a capture ran the collective";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(host(y_, kN), std::vector<float>(kN, 4.f));  // one rank: the sum is its own contribution
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(SimGraphs, ReplayedKernelsKeepRacecheckAndMemcheck) {
  int* out = device<int>(1);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  SFTDP_LAUNCH(blocks_write_same_element_kernel, 8, 32, 0, stream_, out);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("racecheck", "blocks_write_same_element_kernel");
  sim::clear_sticky_error();
  // memcheck: the graph outlives the memory its kernel writes (a use after free on a GPU).
  float* doomed = nullptr;
  ASSERT_EQ(cudaMalloc(&doomed, kN * sizeof(float)), cudaSuccess);
  cudaGraph_t uses_doomed = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, doomed, 1.f, kN);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &uses_doomed), cudaSuccess);
  cudaGraphExec_t exec2 = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec2, uses_doomed, 0), cudaSuccess);
  ASSERT_EQ(cudaFree(doomed), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec2, stream_), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorIllegalAddress);
  EXPECT_REPORT("memcheck", "fill_kernel", "freed since the launch was queued or captured");
  sim::clear_sticky_error();
  for (cudaGraphExec_t e : {exec, exec2}) EXPECT_EQ(cudaGraphExecDestroy(e), cudaSuccess);
  for (cudaGraph_t g : {graph, uses_doomed}) EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
}

// ---- record mode ------------------------------------------------------------------------------------------
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}
std::string without_seq(std::string line) {
  const size_t at = line.find(",\"seq\":");
  if (at != std::string::npos) line.erase(at, line.find(',', at + 1) - at);
  return line;
}

TEST_F(SimGraphs, AReplayIsRecordedAsTheEagerOpsWithGraphAndNode) {
  ncclComm_t comm = one_rank_comm();
  TempDir dir;
  const std::string path = dir.path() + "/record.jsonl";
  const auto ops = [&] {  // one of each op bench/gpu_cost.py costs
    SFTDP_LAUNCH(fill_kernel, 2, 32, 0, stream_, x_, 1.5f, kN);
    EXPECT_EQ(cudaMemsetAsync(z_, 0, kN * sizeof(float), stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(y_, x_, kN * sizeof(float), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    EXPECT_EQ(gemm_.run(stream_, A_, B_, D_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(ncclAllReduce(y_, z_, kN, ncclFloat, ncclSum, comm, stream_), ncclSuccess);
  };
  sim::set_record(path, /*only=*/false);
  ops();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const size_t eager_lines = lines_of(path).size();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ops();
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(lines_of(path).size(), eager_lines) << "a capture recorded lines (nothing ran)";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  unsigned long long id = 0;  // the graph's number: that of its capture sequence
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  sim::set_record("", false);
  const std::vector<std::string> got = lines_of(path);
  ASSERT_EQ(got.size(), 1 + 2 * 5u);  // the start line, five eager ops, five replayed
  const std::string first = got[6];
  const size_t at = first.find(",\"graph\":");
  ASSERT_NE(at, std::string::npos) << first;
  id = std::stoull(first.substr(at + 9));
  for (size_t i = 0; i < 5; ++i) {
    std::string want = without_seq(got[1 + i]);
    want.insert(want.size() - 1, ",\"graph\":" + std::to_string(id) + ",\"node\":" + std::to_string(i));
    EXPECT_EQ(without_seq(got[6 + i]), want) << "node " << i;
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

// ---- errors -------------------------------------------------------------------------------------------------
TEST_F(SimGraphs, SynchronisingACapturingStreamFailsAndInvalidatesTheCapture) {
  begin_with_a_kernel();
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();
  begin_with_a_kernel();
  EXPECT_EQ(cudaStreamQuery(stream_), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();
  begin_with_a_kernel();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);  // the device encompasses the capture
  expect_invalidated();
  begin_with_a_kernel();  // a captured event stands for no scheduled work: it cannot be asked or waited for
  ASSERT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(fork_), cudaErrorCapturedEvent);
  expect_invalidated();
  begin_with_a_kernel();
  ASSERT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(fork_), cudaErrorCapturedEvent);
  expect_invalidated();
  EXPECT_EQ(cudaEventSynchronize(fork_), cudaErrorCapturedEvent) << "still last recorded in a capture";
  ASSERT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(fork_), cudaSuccess);
}

TEST_F(SimGraphs, UnsafeCallsFailInGlobalAndThreadLocalCapturesNotInRelaxedOnes) {
  void* p = nullptr;
  std::vector<float> h(kN);
  begin_with_a_kernel();
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();
  begin_with_a_kernel();
  EXPECT_EQ(cudaFree(y_), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();
  begin_with_a_kernel();  // synchronous: it would wait for the device
  EXPECT_EQ(cudaMemcpy(h.data(), y_, 256, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();
  // Another thread: a global capture forbids it in global mode, not in thread-local mode.
  begin_with_a_kernel(cudaStreamCaptureModeGlobal);
  cudaError_t global = cudaSuccess, local = cudaErrorUnknown;
  std::thread([&] {
    void* q = nullptr;
    global = cudaMalloc(&q, 256);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);  // the previous mode, given back
    local = cudaMalloc(&q, 256);
    EXPECT_EQ(cudaFree(q), cudaSuccess);
  }).join();
  EXPECT_EQ(global, cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(local, cudaSuccess);
  expect_invalidated();
  // A thread-local capture leaves other threads alone; a relaxed one its own thread too.
  begin_with_a_kernel(cudaStreamCaptureModeThreadLocal);
  std::thread([&] { global = cudaMalloc(&p, 256); }).join();
  EXPECT_EQ(global, cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorStreamCaptureUnsupported);  // this thread's own capture
  expect_invalidated();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  begin_with_a_kernel(cudaStreamCaptureModeRelaxed);
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(SimGraphs, TheLegacyStreamCannotCaptureNorBeUsedWhileABlockingStreamCaptures) {
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(nullptr, &status), cudaErrorStreamCaptureImplicit);  // asking invalidates nothing
  EXPECT_EQ(cudaStreamIsCapturing(blocking, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_EQ(cudaMemset(x_, 0, 4), cudaErrorStreamCaptureImplicit);  // queued on the legacy stream
  EXPECT_EQ(cudaStreamIsCapturing(blocking, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cudaMemset(x_, 0, 4), cudaSuccess);  // no capture any more
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(SimGraphs, EndingACaptureThatIsNotThereOrNotThisStreamsFails) {
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorIllegalState);  // never began
  EXPECT_EQ(cudaStreamEndCapture(stream_, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamBeginCapture(stream_, static_cast<cudaStreamCaptureMode>(3)), cudaErrorInvalidValue);
  begin_with_a_kernel();
  EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);  // already
  cudaError_t other_thread = cudaSuccess;
  std::thread([&] { other_thread = cudaStreamEndCapture(stream_, &graph); }).join();
  EXPECT_EQ(other_thread, cudaErrorStreamCaptureWrongThread);  // a global capture ends on its own thread
  EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorInvalidValue);
  cudaGraph_t in_progress = nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamGetCaptureInfo(stream_, &status, nullptr, &in_progress), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&exec, in_progress, 0), cudaErrorInvalidValue);  // not before EndCapture
  EXPECT_EQ(cudaGraphDestroy(in_progress), cudaErrorIllegalState);
  ASSERT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side_, fork_, 0), cudaSuccess);  // side_ joins the capture
  EXPECT_EQ(cudaStreamIsCapturing(side_, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_EQ(cudaStreamEndCapture(side_, &graph), cudaErrorStreamCaptureUnmatched);  // not where it began
  expect_invalidated();
  EXPECT_EQ(cudaStreamIsCapturing(side_, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "ending a capture takes every stream it holds out of it";
}

TEST_F(SimGraphs, ForksMustJoinAndOnlyCapturedEventsCanBeWaitedOn) {
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(this);
  begin_with_a_kernel();
  ASSERT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side_, fork_, 0), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 32, 0, side_, y_, 1.f, kN);  // never joined back to stream_
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  EXPECT_EQ(cudaStreamIsCapturing(side_, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  // An event recorded outside the capture (here: before it) is no dependency a capture can have.
  ASSERT_EQ(cudaEventRecord(join_, side_), cudaSuccess);
  begin_with_a_kernel();
  EXPECT_EQ(cudaStreamWaitEvent(stream_, join_, 0), cudaErrorStreamCaptureIsolation);
  expect_invalidated();
  // Two captures cannot merge through an event.
  begin_with_a_kernel();
  ASSERT_EQ(cudaEventRecord(fork_, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(side_, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(side_, fork_, 0), cudaErrorStreamCaptureMerge);
  EXPECT_EQ(cudaStreamEndCapture(side_, &graph), cudaErrorStreamCaptureInvalidated);
  expect_invalidated();
}

TEST_F(SimGraphs, GraphHandlesAreChecked) {
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&exec, nullptr, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphLaunch(nullptr, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphExecDestroy(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphDestroy(nullptr), cudaErrorInvalidValue);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);  // an empty graph is a graph
  EXPECT_EQ(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagDeviceLaunch), cudaErrorNotSupported);
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUpload), cudaSuccess);
  EXPECT_EQ(cudaGraphUpload(exec, stream_), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaErrorInvalidValue);  // destroyed
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorInvalidValue);
}

TEST_F(SimGraphs, CheckCudaTreatsACaptureErrorAsAnInternalError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        (void)cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal);
        CHECK_CUDA(cudaStreamSynchronize(stream_));
      },
      ::testing::ExitedWithCode(1),
      "CUDA error: .*cudaStreamSynchronize.*operation not permitted when stream is capturing");
}

}  // namespace
}  // namespace sftdp::test
