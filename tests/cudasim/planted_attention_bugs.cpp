// tests/cudasim/planted_attention_bugs.cpp — the tensor-core attention's tests catch its likely bugs:
// this binary links its own copy of kernels/cuda/attention_tc.cu built with SFTDP_PLANTED_BUGS, and for
// each planted bug (a fragment on the wrong lanes, a missing cp.async wait, a tile skipped that holds
// visible pairs, a wrong log-sum-exp) runs the comparison of test_cuda_attention_tc.cpp — the kernels
// against their CPU twin, bit for bit on the simulator — which must fail: by a simulator report, or by
// results that differ. With no bug planted the same comparison passes (the control).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "kernels/attention.h"

namespace sftdp::cuda {
extern int planted_attention_bug;  // kernels/cuda/attention_tc.cu, SFTDP_PLANTED_BUGS builds
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
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PlantedAttentionBugs : public SimTest {
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
    std::vector<float> out(size_t(B) * T * OC), lse(size_t(B) * NH * T), dqkv(qkv.size());
    cpu::attention_fwd_bf16(out.data(), lse.data(), qkv.data(), seg.data(), B, T, NH, KVH, HS);
    cpu::attention_bwd_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), seg.data(), B, T, NH, KVH,
                            HS);
    float *d_out = device<float>(out.size()), *d_lse = device<float>(lse.size()), *d_dqkv = device<float>(dqkv.size());
    const float *d_qkv = device_from(qkv), *d_dout = device_from(dout);
    const int32_t* d_seg = device_from(seg);
    cuda::attention_tc_fwd(d_out, d_lse, d_qkv, d_seg, B, T, NH, KVH, HS, stream_);
    cuda::attention_tc_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_seg, B, T, NH, KVH, HS, stream_);
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      reported_ = all_reports();
      return false;
    }
    return bitwise_equal(host(d_out, out.size()), out) && bitwise_equal(host(d_lse, lse.size()), lse) &&
           bitwise_equal(host(d_dqkv, dqkv.size()), dqkv) && sim::reports().empty();
  }
  std::string reported_;
};

TEST_F(PlantedAttentionBugs, NoBugPasses) { EXPECT_TRUE(matches_twin()) << reported_; }

TEST_F(PlantedAttentionBugs, AFragmentOnTheWrongLanesFails) {
  cuda::planted_attention_bug = 1;
  EXPECT_FALSE(matches_twin());
}

TEST_F(PlantedAttentionBugs, AMissingCpAsyncWaitFails) {
  cuda::planted_attention_bug = 2;
  EXPECT_FALSE(matches_twin());
}

TEST_F(PlantedAttentionBugs, ATileSkippedThatHoldsVisiblePairsFails) {
  cuda::planted_attention_bug = 3;
  EXPECT_FALSE(matches_twin());
}

TEST_F(PlantedAttentionBugs, AWrongLogSumExpFails) {
  cuda::planted_attention_bug = 4;
  EXPECT_FALSE(matches_twin());
}

}  // namespace
}  // namespace sftdp::test
