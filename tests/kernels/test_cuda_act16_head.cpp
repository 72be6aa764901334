// tests/kernels/test_cuda_act16_head.cpp — the act16 path's LM-head kernels (kernels/act16.h): the cross-entropy
// on bf16 logits at a padded row stride (kernels/cross_entropy.h) and the bf16 row gather/scatter
// (kernels/gather.h). The CPU twin against the fp32 twin on the widened logits (the act16 contract: fp32 math, each
// dlogit rounded once), then the CUDA twin against the CPU twin: sums to fp32 summation order, dlogits within one
// bf16 ulp, the padding columns never touched, weight-0 rows all zero, in place, forward only, two runs bitwise.
// Skips without a device or the simulator.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/act16.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

using act16::to_bf16;
using act16::to_float;

constexpr uint16_t kPadding = 0x7fc1;  // a NaN pattern no kernel writes: the padding columns must keep it

struct HeadCase {
  int N, V, pad;  // rows, vocabulary, padding columns (ld = V + pad)
  bool in_place;
};
std::string test_name(const HeadCase& c) {
  return shape_name({{"N", c.N}, {"V", c.V}, {"pad", c.pad}}) + (c.in_place ? "_inplace" : "_separate");
}
void PrintTo(const HeadCase& c, std::ostream* os) { *os << test_name(c); }
class Act16CrossEntropy : public ::testing::TestWithParam<HeadCase> {};

// Logits (N rows at stride ld, the padding columns kPadding), targets and weights (some 0).
struct Inputs {
  std::vector<uint16_t> logits;
  CrossEntropyInputs fp32;  // the same values, contiguous, as floats
};
Inputs inputs(const HeadCase& c) {
  Inputs in{{}, cross_entropy_inputs(c.N, c.V)};
  const size_t ld = c.V + c.pad;
  in.logits.assign(c.N * ld, kPadding);
  for (size_t n = 0; n < static_cast<size_t>(c.N); ++n)
    for (int v = 0; v < c.V; ++v) {
      const uint16_t h = to_bf16(in.fp32.logits[n * c.V + v]);
      in.logits[n * ld + v] = h;
      in.fp32.logits[n * c.V + v] = to_float(h);
    }
  return in;
}

struct Result {
  float sums[2];
  std::vector<uint16_t> dlogits;  // (N, ld) as left by the kernel
};
Result run(const Ops& o, const HeadCase& c, const Inputs& in, bool backward) {
  const size_t ld = c.V + c.pad;
  DeviceBuffer<uint16_t> logits(o, in.logits), dlogits(o, std::vector<uint16_t>(c.N * ld, kPadding));
  DeviceBuffer<int32_t> targets(o, in.fp32.targets);
  DeviceBuffer<float> weights(o, in.fp32.weights), sums(o, std::vector<float>{0.25f, 2.f});
  uint16_t* d = backward ? (c.in_place ? logits.get() : dlogits.get()) : nullptr;
  o.act16.cross_entropy_fwd_bwd(sums.get(), d, logits.get(), static_cast<int>(ld), targets.get(), weights.get(), c.N,
                                c.V);
  Result r;
  const auto s = sums.download();
  r.sums[0] = s[0], r.sums[1] = s[1];
  r.dlogits = backward && c.in_place ? logits.download() : dlogits.download();
  return r;
}

TEST_P(Act16CrossEntropy, CpuTwinIsTheFp32TwinOnTheWidenedLogitsRoundedOnce) {
  const HeadCase c = GetParam();
  const Inputs in = inputs(c);
  std::vector<float> sums{0.25f, 2.f}, dlogits(c.N * static_cast<size_t>(c.V));
  cpu::cross_entropy_fwd_bwd(sums.data(), dlogits.data(), in.fp32.logits.data(), in.fp32.targets.data(),
                             in.fp32.weights.data(), c.N, c.V);
  const Result r = run(cpu_ops(), c, in, true);
  EXPECT_EQ(r.sums[0], sums[0]);
  EXPECT_EQ(r.sums[1], sums[1]);
  const size_t ld = c.V + c.pad;
  for (size_t n = 0; n < static_cast<size_t>(c.N); ++n) {
    for (int v = 0; v < c.V; ++v) ASSERT_EQ(r.dlogits[n * ld + v], to_bf16(dlogits[n * c.V + v])) << n << "," << v;
    for (size_t v = c.V; v < ld; ++v) ASSERT_EQ(r.dlogits[n * ld + v], kPadding) << "padding written";
  }
}

TEST_P(Act16CrossEntropy, CudaTwinMatchesTheCpuTwin) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const HeadCase c = GetParam();
  const Inputs in = inputs(c);
  for (const bool backward : {true, false}) {
    const Result want = run(cpu_ops(), c, in, backward), got = run(*ops, c, in, backward);
    EXPECT_NEAR(got.sums[0], want.sums[0], 1e-6 * std::fabs(want.sums[0])) << "backward " << backward;
    EXPECT_EQ(got.sums[1], want.sums[1]);
    const size_t ld = c.V + c.pad;
    int bad = 0;
    for (size_t i = 0; i < got.dlogits.size(); ++i) {
      const bool padding = i % ld >= static_cast<size_t>(c.V);
      if (padding || !backward) {
        ASSERT_EQ(got.dlogits[i], want.dlogits[i]) << "element " << i << (padding ? " (padding)" : "");
        continue;
      }
      const bool row_off = in.fp32.weights[i / ld] == 0.f;
      if (row_off) {
        ASSERT_EQ(to_float(got.dlogits[i]), 0.f) << "a weight-0 row's dlogits";
      }
      // one bf16 ulp (the exp and the sum's order differ in fp32's last bits), or tiny values near zero
      const double g = to_float(got.dlogits[i]), w = to_float(want.dlogits[i]);
      if (!(std::fabs(g - w) <= std::ldexp(std::fabs(w), -7) + 1e-7) && bad++ < 5)
        ADD_FAILURE() << "dlogits[" << i << "] = " << g << ", CPU twin " << w;
    }
    EXPECT_EQ(bad, 0);
    const Result again = run(*ops, c, in, backward);
    EXPECT_EQ(again.dlogits, got.dlogits);
    EXPECT_EQ(again.sums[0], got.sums[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Act16CrossEntropy,
                         ::testing::Values(HeadCase{3, 7, 1, false}, HeadCase{37, 5003, 53, false},
                                           HeadCase{9, 50257, 47, true}),
                         NameFromParam());

}  // namespace
}  // namespace sftdp::test
