// tests/kernels/test_cuda_attention_act16.cpp — the act16 attention on the GPU (cuda::act16::attention_{fwd,bwd}
// through the cuda-bf16 table's Ops::act16 entries: bf16 q|k|v, dO and O read where they are, out and dqkv written as
// bf16 once, lse fp32) against its CPU twin with the same roundings: on tensor-core head sizes bit for bit on the
// simulator (to 2e-3 of each tensor's largest value on a GPU, as test_cuda_attention_tc.cpp says why), on CUDA-core
// head sizes (24, 160) within one bf16 ulp (fp32 summation order); within bf16 tolerance of the float64 reference of
// its bf16 inputs; equal, bit for bit on any device, to the bf16 table's fp32-interface attention (the same kernels)
// on the widened values with its outputs rounded once; GQA and MHA, T = 1, T not a multiple of the 64-row tile,
// segments that cross tiles and an id that recurs across skipped tiles, the head sizes whose half-tiles have an odd
// number of n-tiles (48, 112); two runs bitwise equal. Skips without a GPU or the simulator.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/attention.h"
#include "kernels/attention_act16_util.h"
#include "kernels/attention_reference.h"
#include "kernels/grad_check.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

#ifdef SFTDP_CUDA_SIM
constexpr double kTwinRel = 0;  // close_rel(.., 0): every element equal
#else
constexpr double kTwinRel = 2e-3;
#endif
// Against fp64 of the bf16 inputs: ~3x the CPU twin's measured errors (test_attention_act16.cpp); lse 10x its bound,
// for a GPU's exp2f and logf.
constexpr double kBf16Rel = 1e-2, kLseRel = 1e-5;
constexpr uint16_t kBf16Nan = 0x7fff;

struct Act16Case {
  int B, T, NH, KVH, HS;
  bool segments;
};
std::string test_name(const Act16Case& c) {
  std::string name = shape_name({{"B", c.B}, {"T", c.T}, {"NH", c.NH}, {"KVH", c.KVH}, {"HS", c.HS}});
  return c.segments ? name + "_seg" : name;
}
void PrintTo(const Act16Case& c, std::ostream* os) { *os << test_name(c); }

// Segments of 40, 60, 70 and 30 positions (boundaries at 40, 100 and 170: inside tiles, each segment but the first
// crossing a 64-row boundary), then padding (0) past 200; for T <= 200 the first T.
std::vector<int32_t> crossing_segments(int B, int T) {
  std::vector<int32_t> seg(size_t(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) seg[size_t(b) * T + t] = t < 40 ? 1 : t < 100 ? 2 : t < 170 ? 3 : t < 200 ? 4 : 0;
  return seg;
}

// Through the cuda-bf16 table's act16 entries, outputs poisoned (bf16 NaN) first, twice: the two runs must agree bit
// for bit.
Act16Outputs run_gpu_act16(const Ops& ops, const std::vector<uint16_t>& qkv, const std::vector<uint16_t>& dout,
                           const std::vector<int32_t>* seg, const AttentionShape& c) {
  DeviceBuffer<uint16_t> d_qkv(ops, qkv), d_dout(ops, dout), d_out(ops, out_size(c)), d_dqkv(ops, qkv.size());
  DeviceBuffer<float> d_lse(ops, size_t(c.B) * c.NH * c.T);
  DeviceBuffer<int32_t> d_seg(ops, seg ? *seg : std::vector<int32_t>(1, 0));
  const int32_t* sg = seg ? d_seg.get() : nullptr;
  const auto got = run_twice_same_bits([&] {
    d_out.upload(std::vector<uint16_t>(d_out.size(), kBf16Nan));
    d_dqkv.upload(std::vector<uint16_t>(d_dqkv.size(), kBf16Nan));
    d_lse.poison();
    ops.act16.attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), sg, c.B, c.T, c.NH, c.KVH, c.HS);
    ops.act16.attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), sg, c.B, c.T, c.NH,
                            c.KVH, c.HS);
    return std::vector<std::vector<float>>{widen(d_out.download()), d_lse.download(), widen(d_dqkv.download())};
  });
  return {to_bf16(got[0]), got[1], to_bf16(got[2])};  // (bf16 values widened and rounded back: the same bits)
}

// The CUDA twin against the CPU twin: bit for bit on the simulator where both run the tensor-core arithmetic, within
// one bf16 ulp (and fp32 rounding of lse) where both run CUDA-core formulas in their own summation orders.
void expect_matches_twin(const Act16Outputs& got, const Act16Outputs& twin, int HS) {
  if (attention_bf16::tensor_cores(HS)) {
    EXPECT_TRUE(close_rel(widen(got.out), widen(twin.out), kTwinRel));
    EXPECT_TRUE(close_rel(got.lse, twin.lse, kTwinRel));
    EXPECT_TRUE(close_rel(widen(got.dqkv), widen(twin.dqkv), kTwinRel));
  } else {
    EXPECT_TRUE(within_bf16_ulps(got.out, twin.out, 1));
    EXPECT_TRUE(close_rel(got.lse, twin.lse, 1e-5));
    double largest = 0;
    for (float x : widen(twin.dqkv)) largest = std::max(largest, std::fabs(double(x)));
    EXPECT_TRUE(within_bf16_ulps(got.dqkv, twin.dqkv, 1, 1e-5 * largest));  // sums that cancel near 0: fp32's error
  }
}

class CudaAttentionAct16 : public ::testing::TestWithParam<Act16Case> {};

TEST_P(CudaAttentionAct16, MatchesItsCpuTwinAndTheFp64Reference) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const Act16Case tc = GetParam();
  const AttentionShape c{tc.B, tc.T, tc.NH, tc.KVH, tc.HS};
  const auto qkv = to_bf16(uniform(qkv_size(c), 701, -2.f, 2.f)), dout = to_bf16(uniform(out_size(c), 702));
  const auto seg = crossing_segments(c.B, c.T);
  const int32_t* seg_host = tc.segments ? seg.data() : nullptr;
  const Act16Outputs got = run_gpu_act16(*ops, qkv, dout, tc.segments ? &seg : nullptr, c);
  expect_matches_twin(got, run_cpu_act16(qkv, dout, seg_host, c), c.HS);
  const Ref ref = reference(to_f64(widen(qkv)), to_f64(widen(dout)), seg_host, c);
  const auto f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  EXPECT_LE(max_rel_diff(widen(got.out), f32(ref.out)), kBf16Rel);
  EXPECT_LE(max_rel_diff(got.lse, f32(ref.lse)), kLseRel);
  EXPECT_LE(max_rel_diff(widen(got.dqkv), f32(ref.dqkv)), kBf16Rel);
}
// HS 64 and 128 with GQA and MHA, T = 1, T one past a tile and not a multiple of it, segments crossing tiles; HS 16,
// 48 and 112 (one, three and seven n-tiles per half); CUDA-core head sizes 24 and 160.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionAct16,
                         ::testing::Values(Act16Case{1, 130, 4, 2, 64, true}, Act16Case{2, 65, 2, 2, 64, false},
                                           Act16Case{1, 1, 2, 1, 128, false}, Act16Case{1, 150, 4, 1, 128, true},
                                           Act16Case{2, 33, 4, 2, 16, true}, Act16Case{1, 100, 2, 1, 48, true},
                                           Act16Case{1, 70, 2, 2, 112, true}, Act16Case{1, 70, 2, 1, 24, true},
                                           Act16Case{1, 40, 4, 2, 160, true}),
                         NameFromParam());

// The act16 kernels are the bf16 table's kernels writing bf16: on the same (bf16) values the fp32 interface's
// outputs rounded once, bit for bit on any device, for every head size (its backward fed the stored bf16 O, from
// which both compute D).
TEST(CudaAttentionAct16Interfaces, Act16IsTheFp32InterfaceRoundedOnce) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  for (const AttentionShape c : {AttentionShape{1, 130, 4, 2, 64}, AttentionShape{1, 70, 2, 1, 128},
                                 AttentionShape{1, 70, 2, 1, 24}}) {
    SCOPED_TRACE(shape_str(c));
    const auto qkv = to_bf16(uniform(qkv_size(c), 711, -2.f, 2.f)), dout = to_bf16(uniform(out_size(c), 712));
    const auto seg = crossing_segments(c.B, c.T);
    const Act16Outputs got = run_gpu_act16(*ops, qkv, dout, &seg, c);
    DeviceBuffer<float> d_qkv(*ops, widen(qkv)), d_dout(*ops, widen(dout)), d_out16(*ops, widen(got.out)),
        d_out(*ops, out_size(c)), d_lse(*ops, got.lse.size()), d_dqkv(*ops, qkv.size());
    DeviceBuffer<int32_t> d_seg(*ops, seg);
    ops->attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), d_seg.get(), c.B, c.T, c.NH, c.KVH, c.HS);
    ops->attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out16.get(), d_lse.get(), d_seg.get(), c.B, c.T,
                       c.NH, c.KVH, c.HS);
    EXPECT_EQ(got.out, to_bf16(d_out.download()));
    EXPECT_TRUE(bitwise_equal(got.lse, d_lse.download()));
    EXPECT_EQ(got.dqkv, to_bf16(d_dqkv.download()));
  }
}

// Rows 256..319 share id 5 with rows 0..63 and no other: the last query tile visits key tile 0 and skips tiles 1-3
// (test_cuda_attention_tc.cpp's case, on bf16 storage at HS 128).
TEST(CudaAttentionAct16Segments, ARecurringIdIsSeenAcrossSkippedTiles) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const AttentionShape c{1, 320, 2, 1, 128};
  std::vector<int32_t> seg(c.T);
  for (int t = 0; t < c.T; ++t) seg[t] = t < 64 || t >= 256 ? 5 : (t < 150 ? 7 : 8);
  const auto qkv = to_bf16(uniform(qkv_size(c), 721, -2.f, 2.f)), dout = to_bf16(uniform(out_size(c), 722));
  expect_matches_twin(run_gpu_act16(*ops, qkv, dout, &seg, c), run_cpu_act16(qkv, dout, seg.data(), c), c.HS);
}

TEST(CudaAttentionAct16Table, TheBf16TableCarriesTheAct16Entries) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  EXPECT_NE(ops->act16.attention_fwd, nullptr);
  EXPECT_NE(ops->act16.attention_bwd, nullptr);
}

}  // namespace
}  // namespace sftdp::test
