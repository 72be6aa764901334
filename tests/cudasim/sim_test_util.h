// tests/cudasim/sim_test_util.h — shared by the CUDA simulator's own tests (tests/cudasim): device
// buffers through the CUDA runtime, two small kernels (fill, copy), a fixture that starts each test with no report and no sticky
// error, and a search of the simulator's reports. Include it after the C++ headers and before any
// other CUDA header: it brings the simulator's device side (cudasim/device.h) for test kernels.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

// The device side first (before NVIDIA's headers), as the simulator build force-includes it.
#include "cudasim/device.h"
#include "cudasim/sim.h"
#include "sftdp/check_cuda.h"

namespace sftdp::test {

// The first report containing every one of `needles`, or "" (the test then prints all reports).
inline std::string report_with(std::initializer_list<const char*> needles) {
  for (const std::string& r : sim::reports()) {
    bool all = true;
    for (const char* n : needles) all &= r.find(n) != std::string::npos;
    if (all) return r;
  }
  return "";
}
inline std::string all_reports() {
  std::string s;
  for (const std::string& r : sim::reports()) s += r;
  return s.empty() ? "(no report)" : s;
}
#define EXPECT_REPORT(...) \
  EXPECT_NE(::sftdp::test::report_with({__VA_ARGS__}), "") << "reports: " << ::sftdp::test::all_reports()

// Kernels the simulator tests share (they build in the simulator build only, as host C++).
[[maybe_unused]] __global__ static void fill_kernel(float* out, float value, int n) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    out[i] = value;
}
[[maybe_unused]] __global__ static void copy_kernel(float* out, const float* in, int n) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    out[i] = in[i];
}

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)cudaGetLastError();
    sim::clear_sticky_error();
    sim::clear_reports();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    sim::clear_sticky_error();
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
    sim::clear_sticky_error();
    for (void* p : owned_) (void)cudaFree(p);
    (void)cudaGetLastError();
  }
  template <class T>
  T* device(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  template <class T>
  T* device_from(const std::vector<T>& host) {
    T* p = device<T>(host.size());
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }
  template <class T>
  std::vector<T> host(const T* p, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  cudaStream_t stream_ = nullptr;
  std::vector<void*> owned_;
};

}  // namespace sftdp::test
