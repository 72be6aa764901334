// tests/cudasim/planted_attention_bugs.cpp — the tensor-core attention's tests catch its likely bugs:
// this binary links its own copy of kernels/cuda/attention/tensor_cores.cu built with SFTDP_PLANTED_BUGS, and for
// each planted bug (a fragment on the wrong lanes, a missing cp.async wait, a tile skipped that holds
// visible pairs, a wrong log-sum-exp, a fragment taken from the wrong warp of a pair, a missing barrier before a
// warp reads its partner's fragments) runs the comparison of
// test_cuda_attention_tc.cpp and test_cuda_attention_act16.cpp — the kernels against their CPU twin, bit for bit
// on the simulator — through both interfaces (the fp32 one, on bf16 copies; act16, on bf16 storage), which must
// fail: by a simulator report, or by results that differ. With no bug planted the same comparisons pass (the
// control).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "kernels/act16.h"
#include "kernels/attention.h"

namespace sftdp::cuda {
extern int planted_attention_bug;  // kernels/cuda/attention/tensor_cores.cu, SFTDP_PLANTED_BUGS builds
}

namespace sftdp::test {
namespace {

constexpr int B = 1, T = 200, NH = 2, KVH = 1, HS = 64, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;

// (This binary links no sftdp_core, so not tests/common's helpers either.)
std::vector<float> uniform(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}
template <class E>
bool bitwise_equal(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = act16::to_bf16(x[i]);
  return r;
}

// The interface whose results are compared: the fp32 one (attention_tc_*) or act16 (cuda::act16::*).
enum class Interface { kFp32, kAct16 };
std::string interface_name(const ::testing::TestParamInfo<Interface>& info) {
  return info.param == Interface::kFp32 ? "Fp32" : "Act16";
}

class PlantedAttentionBugs : public SimTest, public ::testing::WithParamInterface<Interface> {
 protected:
  void TearDown() override {
    cuda::planted_attention_bug = 0;
    SimTest::TearDown();
  }
  // True when the tensor-core kernels match the CPU twin bit for bit with no simulator report.
  bool matches_twin() {
    const auto qkv = uniform(size_t(B) * T * QKV, 601, -2.f, 2.f), dout = uniform(size_t(B) * T * OC, 602, -1.f, 1.f);
    std::vector<int32_t> seg(T);
    for (int t = 0; t < T; ++t) seg[t] = t < 100 ? 1 : 2;  // tiles 0, 1 hold id 1; tile 1 also id 2
    const int32_t* d_seg = device_from(seg);
    bool same = false;
    if (GetParam() == Interface::kFp32) {
      std::vector<float> out(size_t(B) * T * OC), lse(size_t(B) * NH * T), dqkv(qkv.size());
      cpu::attention_fwd_bf16(out.data(), lse.data(), qkv.data(), seg.data(), B, T, NH, KVH, HS);
      cpu::attention_bwd_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), seg.data(), B, T, NH,
                              KVH, HS);
      float *d_out = device<float>(out.size()), *d_lse = device<float>(lse.size());
      float* d_dqkv = device<float>(dqkv.size());
      const float *d_qkv = device_from(qkv), *d_dout = device_from(dout);
      cuda::attention_tc_fwd(d_out, d_lse, d_qkv, d_seg, B, T, NH, KVH, HS, stream_);
      cuda::attention_tc_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_seg, B, T, NH, KVH, HS, stream_);
      if (cudaStreamSynchronize(stream_) != cudaSuccess) return reported();
      same = bitwise_equal(host(d_out, out.size()), out) && bitwise_equal(host(d_lse, lse.size()), lse) &&
             bitwise_equal(host(d_dqkv, dqkv.size()), dqkv);
    } else {
      const auto qkv16 = to_bf16(qkv), dout16 = to_bf16(dout);
      std::vector<uint16_t> out(size_t(B) * T * OC), dqkv(qkv.size());
      std::vector<float> lse(size_t(B) * NH * T);
      cpu::act16::attention_fwd(out.data(), lse.data(), qkv16.data(), seg.data(), B, T, NH, KVH, HS);
      cpu::act16::attention_bwd(dqkv.data(), dout16.data(), qkv16.data(), out.data(), lse.data(), seg.data(), B, T,
                                NH, KVH, HS);
      uint16_t *d_out = device<uint16_t>(out.size()), *d_dqkv = device<uint16_t>(dqkv.size());
      float* d_lse = device<float>(lse.size());
      const uint16_t *d_qkv = device_from(qkv16), *d_dout = device_from(dout16);
      cuda::act16::attention_fwd(d_out, d_lse, d_qkv, d_seg, B, T, NH, KVH, HS, stream_);
      cuda::act16::attention_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_seg, B, T, NH, KVH, HS, stream_);
      if (cudaStreamSynchronize(stream_) != cudaSuccess) return reported();
      same = bitwise_equal(host(d_out, out.size()), out) && bitwise_equal(host(d_lse, lse.size()), lse) &&
             bitwise_equal(host(d_dqkv, dqkv.size()), dqkv);
    }
    return same && sim::reports().empty();
  }
  bool reported() {
    reported_ = all_reports();
    return false;
  }
  std::string reported_;
};

TEST_P(PlantedAttentionBugs, NoBugPasses) { EXPECT_TRUE(matches_twin()) << reported_; }

TEST_P(PlantedAttentionBugs, AFragmentOnTheWrongLanesFails) {
  cuda::planted_attention_bug = 1;
  EXPECT_FALSE(matches_twin());
}

TEST_P(PlantedAttentionBugs, AMissingCpAsyncWaitFails) {
  cuda::planted_attention_bug = 2;
  EXPECT_FALSE(matches_twin());
}

TEST_P(PlantedAttentionBugs, ATileSkippedThatHoldsVisiblePairsFails) {
  cuda::planted_attention_bug = 3;
  EXPECT_FALSE(matches_twin());
}

TEST_P(PlantedAttentionBugs, AWrongLogSumExpFails) {
  cuda::planted_attention_bug = 4;
  EXPECT_FALSE(matches_twin());
}

// Each warp pair trades its bf16 P / dS fragments (and row maxima) through shared memory: reading its own for the
// partner's k-steps must fail.
TEST_P(PlantedAttentionBugs, AFragmentFromTheWrongWarpOfThePairFails) {
  cuda::planted_attention_bug = 5;
  EXPECT_FALSE(matches_twin());
}

// ... and reading them before the barrier that says they are written must fail (racecheck: the two schedules differ).
TEST_P(PlantedAttentionBugs, AMissingBarrierBeforeThePartnersFragmentsFails) {
  cuda::planted_attention_bug = 6;
  EXPECT_FALSE(matches_twin());
}

INSTANTIATE_TEST_SUITE_P(Interfaces, PlantedAttentionBugs, ::testing::Values(Interface::kFp32, Interface::kAct16),
                         interface_name);

}  // namespace
}  // namespace sftdp::test
