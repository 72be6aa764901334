// tests/kernels/test_cuda_util.h — shared by the CUDA-vs-CPU kernel tests (test_cuda_*.cpp):
// device buffers through the CUDA Ops table (plain C++, no CUDA headers), NaN poisoning so an
// unwritten output element fails, a tolerance relative to the reference's largest magnitude, an
// element-wise one with a per-element absolute part, and readable names for parameterised tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"

namespace sftdp::test {

// In a test body: `ops_var` = the CUDA table with fp32 (SFTDP_REQUIRE_CUDA) or the given
// (SFTDP_REQUIRE_CUDA_GEMM) Linear GEMM inputs, or the test is skipped (GTEST_SKIP returns from
// the body) when the build has no CUDA or no device is usable.
#define SFTDP_REQUIRE_CUDA_GEMM(ops_var, inputs)           \
  const ::sftdp::Ops* ops_var = ::sftdp::cuda_ops(inputs); \
  if (ops_var == nullptr) GTEST_SKIP() << "no CUDA device"
#define SFTDP_REQUIRE_CUDA(ops_var) SFTDP_REQUIRE_CUDA_GEMM(ops_var, ::sftdp::GemmInputs::kFp32)

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

// |got_i − ref_i| <= atol_of(i) + rtol·|ref_i| for every element i, and got finite: for tensors
// whose entries are each a product or quotient (softmax probabilities, cross-entropy gradients),
// where a relative bound per element holds. The first 8 mismatches are printed with their index.
template <class AtolOf>
::testing::AssertionResult close_each(const std::vector<float>& got, const std::vector<float>& ref, AtolOf atol_of,
                                      double rtol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  std::ostringstream misses;
  size_t n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i], atol = atol_of(i);
    if (std::isfinite(g) && std::fabs(g - r) <= atol + rtol * std::fabs(r)) continue;
    if (n_bad++ < 8)
      misses << "\n  [" << i << "] ref " << r << " got " << g << " (|diff| " << std::fabs(g - r) << ", allowed "
             << atol + rtol * std::fabs(r) << ")";
  }
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n_bad << " of " << got.size() << " elements outside atol_i + rtol " << rtol
                                       << "·|ref_i|:" << misses.str();
}

// The element-wise tolerances of the CUDA kernel tests, shared with the CPU tests that check the
// CPU twin stays within half of them of an fp64 reference (test_cross_entropy.cpp,
// test_attention.cpp): the other half is left for the CUDA twin, whose sums are no less accurate.
// Softmax probabilities (attention) and cross-entropy gradients, relative per element:
constexpr double kSoftmaxRtol = 1e-5;
// Absolute floor for non-target entries (covers nothing a 3% error in a probability >= 3e-8 hides).
constexpr double kSoftmaxAtol = 1e-9;
// The target entry of a cross-entropy gradient row, w·(p − 1), may cancel (p near 1): its error is
// that of p, so it gets an absolute tolerance of kSoftmaxRtol·|w| as well.

// Inputs of the CUDA cross-entropy test, also used by the CPU test that checks its tolerance:
// logits uniform in [-8, 8), targets uniform in [0, V), weights 0 (a third: prompt/pad rows),
// 0.5 or 1.
struct CrossEntropyInputs {
  std::vector<float> logits;
  std::vector<int32_t> targets;
  std::vector<float> weights;
};
inline CrossEntropyInputs cross_entropy_inputs(int N, int V) {
  CrossEntropyInputs in{uniform(static_cast<size_t>(N) * V, 41, -8.f, 8.f), uniform_int(N, 42, V), uniform(N, 43)};
  for (float& w : in.weights) w = w < -0.3f ? 0.f : (w < 0.3f ? 1.f : 0.5f);
  return in;
}
// Absolute part of the element-wise dlogits tolerance (close_each): `scale`·|w| on a row's target
// entry, kSoftmaxAtol elsewhere.
inline auto dlogits_atol(const CrossEntropyInputs& in, int V, double scale) {
  return [&in, V, scale](size_t i) {
    const size_t n = i / static_cast<size_t>(V);
    return static_cast<int32_t>(i % V) == in.targets[n] ? scale * std::fabs(in.weights[n]) : kSoftmaxAtol;
  };
}

// Inputs of the CUDA attention test: packed rows of nondecreasing segment ids, padding (0) in the
// last eighth of each row.
inline std::vector<int32_t> packed_segments(int B, int T, uint64_t seed) {
  const auto coin = uniform(static_cast<size_t>(B) * T, seed, 0.f, 1.f);
  std::vector<int32_t> seg(coin.size());
  for (int b = 0; b < B; ++b) {
    int32_t id = 1;
    for (int t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b) * T + t;
      if (t > 0 && coin[i] < 0.15f) ++id;
      seg[i] = t >= T - T / 8 ? 0 : id;
    }
  }
  return seg;
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

}  // namespace sftdp::test
