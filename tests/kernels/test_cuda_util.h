// tests/kernels/test_cuda_util.h — shared by the CUDA-vs-CPU kernel tests (test_cuda_*.cpp):
// device buffers through the CUDA Ops table (plain C++, no CUDA headers), NaN poisoning so an
// unwritten output element fails, a tolerance relative to the reference's largest magnitude, and
// readable names for parameterised tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"

namespace sftdp::test {

// In a test body: `ops_var` = the CUDA table, or the test is skipped (GTEST_SKIP returns from
// the body) when the build has no CUDA or no device is usable.
#define SFTDP_REQUIRE_CUDA(ops_var)                  \
  const ::sftdp::Ops* ops_var = ::sftdp::cuda_ops(); \
  if (ops_var == nullptr) GTEST_SKIP() << "no CUDA device"

// Readable parameterised tests. Beside each parameter struct, `std::string test_name(const P&)`
// builds "N7_C257" with shape_name() and `PrintTo(const P&, std::ostream*)` prints the same; then
// INSTANTIATE_TEST_SUITE_P(..., NameFromParam()) gives gtest and ctest names with the shape in
// them instead of "/3" or a byte dump of the struct (whose padding bytes change between builds).
inline std::string shape_name(std::initializer_list<std::pair<const char*, long long>> fields) {
  std::string name;  // gtest allows letters, digits and '_' in names
  for (const auto& [key, value] : fields) {
    if (!name.empty()) name += '_';
    name += key;
    name += std::to_string(value);
  }
  return name;
}
struct NameFromParam {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    return test_name(info.param);  // found by argument-dependent lookup beside P
  }
};

// n elements of T in device memory, freed on destruction.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(const Ops& ops, size_t n) : ops_(ops), n_(n), ptr_(static_cast<T*>(ops.alloc(n * sizeof(T)))) {}
  DeviceBuffer(const Ops& ops, const std::vector<T>& host) : DeviceBuffer(ops, host.size()) { upload(host); }
  ~DeviceBuffer() { ops_.free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    ops_.to_device(ptr_, host.data(), std::min(host.size(), n_) * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    ops_.to_host(host.data(), ptr_, n_ * sizeof(T));
    return host;
  }
  // Every element NaN: an element the kernel should write but does not stays NaN and fails.
  void poison() { upload(std::vector<T>(n_, std::numeric_limits<T>::quiet_NaN())); }

 private:
  const Ops& ops_;
  size_t n_;
  T* ptr_;
};

// |got − ref| <= rel·(max|ref| + |ref_i|) for every element, and got finite: one tolerance for
// a tensor whose entries come from sums of mixed signs (per-element rtol alone would demand
// impossible accuracy from entries that cancel to near 0).
inline ::testing::AssertionResult close_rel(const std::vector<float>& got, const std::vector<float>& ref,
                                            double rel) {
  double scale = 0;
  for (float r : ref) scale = std::max(scale, std::fabs(static_cast<double>(r)));
  return allclose(got, ref, rel * scale, rel);
}

// Runs `launch` (poison or reset outputs, launch, download every output) twice on the same device
// buffers, expects the two runs to agree bit for bit (determinism), and returns the first.
template <class Launch>
std::vector<std::vector<float>> run_twice_same_bits(Launch&& launch) {
  const std::vector<std::vector<float>> first = launch(), second = launch();
  EXPECT_EQ(first.size(), second.size());
  for (size_t i = 0; i < std::min(first.size(), second.size()); ++i)
    EXPECT_TRUE(bitwise_equal(second[i], first[i])) << "output " << i << " differs between two CUDA runs";
  return first;
}

// Sets the CUDA table's bf16 GEMM mode for one scope.
class Bf16GemmScope {
 public:
  explicit Bf16GemmScope(bool on) { set(on); }
  ~Bf16GemmScope() { set(false); }
  Bf16GemmScope(const Bf16GemmScope&) = delete;
  Bf16GemmScope& operator=(const Bf16GemmScope&) = delete;

 private:
  static void set([[maybe_unused]] bool on) {
#ifdef SFTDP_WITH_CUDA  // only GPU builds define it; without CUDA every test here skips first
    cuda_set_bf16_gemm(on);
#endif
  }
};

}  // namespace sftdp::test
