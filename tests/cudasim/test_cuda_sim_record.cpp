// tests/cudasim/test_cuda_sim_record.cpp — record mode (cudasim/record.h): a known sequence of device
// operations (two kernel launches, a host-to-device copy, a memset, a cuBLASLt matmul, an NCCL allreduce
// on one rank, a device-to-host copy, the program's marks) gives exactly the expected JSON lines, with
// the kernels' argument types as declared, pointers as the allocation they point into and in queueing
// order; the project's own bf16 GEMM launcher records its two casts and a bf16 matmul; record-only runs
// nothing on the device (a buffer keeps its contents through a kernel, a memset, a device-to-device copy,
// a GEMM and a collective) while host<->device copies still run, leaves new allocations as zero pages,
// and records the same lines as a real run; bad settings are "error: ..." and exit 2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include <cublasLt.h>
#include <mpi.h>
#include <nccl.h>

#include "common/test_util.h"
#include "cudasim/memory.h"
#include "cudasim/record.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace sftdp::test {
namespace {

// A kernel with every scalar kind the records decode.
__global__ void scalars_kernel(float* out, const int32_t* idx, double d, size_t n, bool flag, unsigned u, int64_t neg) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    out[0] = static_cast<float>(d + static_cast<double>(n + u + neg) + flag + idx[0]);
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string alloc_of(const void* p) { return std::to_string(sim::memory().find(p, 0)->id); }
std::string ptr(const void* p, size_t offset = 0) {
  return "{\"alloc\":" + alloc_of(p) + ",\"offset\":" + std::to_string(offset) + "}";
}

// The line without its "seq", "pid" (which the expectation cannot know for the start line).
std::string without_pid(std::string s) {
  const size_t at = s.find(",\"pid\":");
  if (at == std::string::npos) return s;
  const size_t end = s.find(',', at + 1);
  return s.erase(at, end - at);
}

// One column-major fp32 cuBLASLt product D(m,n) = A(m,k)·B(k,n) on `stream`, through the real call
// sequence (descriptor, layouts, heuristic, matmul), D in place of C with beta 0.
void lt_matmul(cudaStream_t stream, const float* A, const float* B, float* D, int m, int n, int k) {
  cublasLtHandle_t h = nullptr;
  ASSERT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la, lb, ld;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &result, &returned), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.f, beta = 0.f;
  EXPECT_EQ(cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &result.algo, nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
}

// ncclAllReduce (sum, in place) of n floats on a one-rank communicator (MPI as a singleton, initialised
// here once and finalised at exit), then the communicator destroyed.
void allreduce_one_rank(cudaStream_t stream, float* buf, size_t n) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    ASSERT_EQ(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), MPI_SUCCESS);
    std::atexit([] {
      int done = 0;
      MPI_Finalized(&done);
      if (!done) MPI_Finalize();
    });
  }
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

class SimRecord : public SimTest {
 protected:
  void TearDown() override {
    sim::set_record("", false);
    SimTest::TearDown();
  }
  TempDir dir_;
};

TEST_F(SimRecord, KnownOperationsGiveExactlyTheExpectedLines) {
  constexpr int n = 64, m = 4, k = 8, cols = 2;
  float* a = device<float>(n);
  int32_t* idx = device<int32_t>(4);
  float* A = device<float>(m * k);
  float* B = device<float>(k * cols);
  float* D = device<float>(m * cols);
  const std::vector<float> ones(n, 1.f);
  const std::string path = dir_.path() + "/record.jsonl";
  sim::set_record(path, /*only=*/false);

  const int fill_line = __LINE__ + 1;
  SFTDP_LAUNCH(fill_kernel, 2, 32, 0, stream_, a + 8, 2.5f, n - 8);
  sim::record_mark("between", "\"x\":1");
  ASSERT_EQ(cudaMemcpyAsync(a, ones.data(), 8 * sizeof(float), cudaMemcpyHostToDevice, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(idx, 0, 4 * sizeof(int32_t), stream_), cudaSuccess);
  const size_t big = size_t{1} << 40;
  const int64_t neg = -3;
  const int scalars_line = __LINE__ + 1;  // the launch on one line: __LINE__ is a macro call's last line
  SFTDP_LAUNCH(scalars_kernel, dim3(1, 2, 3), dim3(32, 2), 0, stream_, D, idx, 0.1, big, true, 7u, neg);
  lt_matmul(stream_, A, B, D, m, cols, k);
  allreduce_one_rank(stream_, a, n);
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  sim::set_record("", false);
  EXPECT_EQ(back[0], 1.f);  // a real run: the copy, the kernel and the (one-rank) sum all ran
  EXPECT_EQ(back[8], 2.5f);

  const std::string s = "\"device\":0,\"stream\":0,";
  const std::vector<std::string> want = {
      R"({"op":"start","record_only":false,"format":1})",
      R"({"op":"kernel","seq":0,)" + s + R"("name":"fill_kernel","site":"test_cuda_sim_record.cpp:)" +
          std::to_string(fill_line) + R"(","grid":[2,1,1],"block":[32,1,1],"smem":0,"args":[{"type":"float*",)" +
          ptr(a, 32).substr(1) + R"(,{"type":"float","value":2.5},{"type":"int","value":56}]})",
      R"({"op":"mark","seq":1,"label":"between","x":1})",
      R"({"op":"memcpy","seq":2,)" + s + R"("call":"cudaMemcpyAsync","kind":"HtoD","bytes":32,"dst":)" + ptr(a) +
          R"(,"src":{"host":true}})",
      R"({"op":"memset","seq":3,)" + s + R"("call":"cudaMemsetAsync","bytes":16,"value":0,"dst":)" + ptr(idx) + "}",
      R"({"op":"kernel","seq":4,)" + s + R"("name":"scalars_kernel","site":"test_cuda_sim_record.cpp:)" +
          std::to_string(scalars_line) + R"(","grid":[1,2,3],"block":[32,2,1],"smem":0,"args":[{"type":"float*",)" +
          ptr(D).substr(1) + R"(,{"type":"int const*",)" + ptr(idx).substr(1) +
          R"(,{"type":"double","value":0.1},{"type":"unsigned long","value":1099511627776},)"
          R"({"type":"bool","value":true},{"type":"unsigned int","value":7},{"type":"long","value":-3}]})",
      R"({"op":"gemm","seq":5,)" + s +
          R"("m":4,"n":2,"k":8,"batch":1,"trans_a":false,"trans_b":false,"a_type":"fp32","lda":4,"stride_a":0,)"
          R"("b_type":"fp32","ldb":8,"stride_b":0,"c_type":"fp32","ldc":4,"stride_c":0,"d_type":"fp32","ldd":4,)"
          R"("stride_d":0,"epilogue":"default","alpha":1,"beta":0,"A":)" +
          ptr(A) + R"(,"B":)" + ptr(B) + R"(,"C":)" + ptr(D) + R"(,"D":)" + ptr(D) + R"(,"workspace_bytes":0})",
      R"({"op":"nccl","seq":6,)" + s +
          R"("call":"ncclAllReduce","count":64,"dtype":"fp32","redop":"sum","ranks":1,)"
          R"("rank":0,"send":)" +
          ptr(a) + R"(,"recv":)" + ptr(a) + "}",
      R"({"op":"memcpy","seq":7,)" + s +
          R"("call":"cudaMemcpyAsync","kind":"DtoH","bytes":256,"dst":{"host":true},)"
          R"("src":)" +
          ptr(a) + "}",
  };
  std::vector<std::string> got = lines_of(path);
  ASSERT_FALSE(got.empty());
  got[0] = without_pid(got[0]);
  ASSERT_EQ(got.size(), want.size()) << testing::PrintToString(got);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "line " << i;
}

TEST_F(SimRecord, ProjectBf16GemmRecordsItsCastsAndABf16Matmul) {
  constexpr int M = 5, N = 3, K = 7;  // row-major C(M,N) = A(M,K)·B(N,K)ᵀ, the Linear forward
  const float* A = device_from(uniform(M * K, 1));
  const float* Bw = device_from(uniform(N * K, 2));
  float* C = device<float>(M * N);
  const std::string path = dir_.path() + "/gemm.jsonl";
  sim::set_record(path, false);
  cuda::gemm(false, true, M, N, K, 1.f, A, K, Bw, K, 0.f, C, N, nullptr, /*bf16_inputs=*/true, cuda::GemmBatch{},
             stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  sim::set_record("", false);
  const auto got = lines_of(path);
  std::vector<std::string> ops;
  for (const auto& l : got)
    if (l.find("\"op\":\"kernel\"") != std::string::npos || l.find("\"op\":\"gemm\"") != std::string::npos)
      ops.push_back(l);
  ASSERT_EQ(ops.size(), 3u) << testing::PrintToString(got);
  // Column-major Cᵀ(N,M) = op(B)ᵀ·op(A)ᵀ: B is cast first (kGemmA16), then A, each into padded columns.
  EXPECT_NE(ops[0].find(R"("name":"fp32_to_bf16_kernel")"), std::string::npos) << ops[0];
  EXPECT_NE(ops[0].find(R"({"type":"__nv_bfloat16*")"), std::string::npos) << ops[0];
  EXPECT_NE(ops[0].find(R"(,{"type":"float const*",)" + ptr(Bw).substr(1)), std::string::npos) << ops[0];
  EXPECT_NE(ops[1].find(R"(,{"type":"float const*",)" + ptr(A).substr(1)), std::string::npos) << ops[1];
  EXPECT_NE(ops[2].find(R"("m":3,"n":5,"k":7,"batch":1,"trans_a":true,"trans_b":false,"a_type":"bf16","lda":8,)"),
            std::string::npos)
      << ops[2];
  EXPECT_NE(ops[2].find(R"("b_type":"bf16","ldb":8,)"), std::string::npos) << ops[2];
  EXPECT_NE(ops[2].find(R"("c_type":"fp32","ldc":3,)"), std::string::npos) << ops[2];
  EXPECT_NE(ops[2].find(R"("D":)" + ptr(C)), std::string::npos) << ops[2];
}

// The same operations twice, in one process: once run, once record-only. Returns the record's lines
// (seq and the start line's pid left out) and what the buffer `a` holds afterwards.
struct Outcome {
  std::vector<std::string> lines;
  std::vector<float> a;
};

class SimRecordOnly : public SimRecord {
 protected:
  Outcome run(bool only, const char* name) {
    constexpr int n = 32;
    Outcome o;
    float* a = device<float>(n);
    std::vector<float> pattern(n);
    for (int i = 0; i < n; ++i) pattern[i] = static_cast<float>(i) - 3.5f;
    EXPECT_EQ(cudaMemcpy(a, pattern.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    const float* b = device_from(uniform(n, 7));
    const std::string path = dir_.path() + "/" + name;
    sim::set_record(path, only);
    float* fresh = device<float>(n);  // record-only: untouched zero pages (no 0xff fill)
    std::vector<float> seen(n, -1.f);
    EXPECT_EQ(cudaMemcpy(seen.data(), fresh, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    if (only) EXPECT_EQ(seen, std::vector<float>(n, 0.f));
    lt_matmul(stream_, b, b, a, 2, 2, 2);                                            // a[0..4)
    SFTDP_LAUNCH(fill_kernel, 1, 32, 0, stream_, a + 4, 9.f, 12);                    // a[4..16)
    EXPECT_EQ(cudaMemsetAsync(a + 16, 0, 4 * sizeof(float), stream_), cudaSuccess);  // a[16..20)
    EXPECT_EQ(cudaMemcpyAsync(a + 20, b, 4 * sizeof(float), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    allreduce_one_rank(stream_, a, n);  // one rank: a sum that would leave a alone; in record-only no MPI at all
    o.a = host(a, n);
    sim::set_record("", false);
    o.lines = lines_of(path);
    for (auto& l : o.lines) {
      l = without_pid(l);
      const size_t at = l.find("\"record_only\":");
      if (at != std::string::npos) l.replace(at, l.find(',', at) - at, "\"record_only\":?");
      // the buffers' allocation ids differ between the two runs by the allocations in between
      for (size_t p = l.find("\"alloc\":"); p != std::string::npos; p = l.find("\"alloc\":", p + 1))
        l.replace(p + 8, l.find_first_of(",}", p + 8) - (p + 8), "#");
    }
    return o;
  }
};

TEST_F(SimRecordOnly, RunsNoDeviceWorkAndRecordsWhatARealRunRecords) {
  const Outcome real = run(false, "real.jsonl");
  const Outcome only = run(true, "only.jsonl");
  // The real run changed a everywhere the device wrote; record-only left the host-written pattern.
  for (int i = 0; i < 32; ++i) {
    const float pattern = static_cast<float>(i) - 3.5f;
    EXPECT_EQ(only.a[i], pattern) << i;
    if (i < 24) EXPECT_NE(real.a[i], pattern) << i;
  }
  EXPECT_EQ(real.lines, only.lines);
  EXPECT_EQ(real.lines.size(), 8u) << testing::PrintToString(real.lines);  // start, malloc'd read, 5 ops, read-back
}

// ---- settings --------------------------------------------------------------------------------------
// A child process with these variables set reads them at its first CUDA call.
void first_cuda_call_with(const char* name, const char* value) {
  setenv(name, value, 1);
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  std::exit(0);
}

TEST(SimRecordSettings, BadValuesAreAnErrorLineAndExit2) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: settings are read once per process
  EXPECT_EXIT(first_cuda_call_with("SFTDP_SIM_RECORD_ONLY", "yes"), testing::ExitedWithCode(2),
              "error: SFTDP_SIM_RECORD_ONLY=yes: expected 0 or 1");
  EXPECT_EXIT(first_cuda_call_with("SFTDP_SIM_RECORD_ONLY", "1"), testing::ExitedWithCode(2),
              "error: SFTDP_SIM_RECORD_ONLY=1: needs SFTDP_SIM_RECORD");
  EXPECT_EXIT(first_cuda_call_with("SFTDP_SIM_RECORD", "/nonexistent-dir/record.jsonl"), testing::ExitedWithCode(2),
              "error: SFTDP_SIM_RECORD=/nonexistent-dir/record.jsonl: No such file or directory");
}

}  // namespace
}  // namespace sftdp::test
