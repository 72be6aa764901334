// tests/kernels/test_cuda_attention_tc.cpp — the bf16 table's attention on tensor cores
// (kernels/cuda/attention/tensor_cores.cu: mma.sync, ldmatrix, cp.async) against its CPU twin with the same
// roundings (cpu::attention_{fwd,bwd}_bf16: bf16 q, k, v, dO, P and dS, the GPU's tiles and sums) and
// against the float64 reference of unrounded inputs within bf16 tolerance: output, log-sum-exp and every
// input gradient, for every head size on tensor cores (16..128 by 16), GQA and MHA, T = 1, T a
// multiple of the 64-row tile and not, packed segments with boundaries inside tiles, a segment id that
// recurs after another (a tile far back that must be visited); two runs bitwise equal; GQA equal to MHA
// on repeated k/v; a head size without tensor-core kernels (HS 8, 256) takes the CUDA-core kernel.
// On the simulator the twins agree bit for bit (the simulator's mma rounds as the CPU twin does, and
// every other operation is the same IEEE operation in the same order); on a GPU to 2e-3 of each tensor's
// largest value (its exp2 and the tensor cores' own summation move a few bf16 roundings of P by one
// unit). Skips without a GPU or the simulator.
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/attention.h"
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
// Against the fp64 attention of the unrounded inputs: bf16 inputs (2^-9 relative each) and bf16 P and
// dS in the GEMMs. Measured on the simulator (2026-12-03): out ≤ 5.8e-3, lse ≤ 5.3e-3, dqkv ≤ 4.9e-3 of the
// largest value.
constexpr double kBf16Rel = 2e-2;

struct TcCase {
  int B, T, NH, KVH, HS;
  bool segments;
};
std::string test_name(const TcCase& c) {
  std::string name = shape_name({{"B", c.B}, {"T", c.T}, {"NH", c.NH}, {"KVH", c.KVH}, {"HS", c.HS}});
  return c.segments ? name + "_seg" : name;
}
void PrintTo(const TcCase& c, std::ostream* os) { *os << test_name(c); }
AttentionShape shape_of(const TcCase& c) { return {c.B, c.T, c.NH, c.KVH, c.HS}; }

struct Outputs {
  std::vector<float> out, lse, dqkv;
};
Outputs run_cpu_twin(const std::vector<float>& qkv, const std::vector<float>& dout, const int32_t* seg,
                     const AttentionShape& c) {
  Outputs r{std::vector<float>(out_size(c), 7.f), std::vector<float>(size_t(c.B) * c.NH * c.T, 5.f),
            std::vector<float>(qkv.size(), 9.f)};
  cpu::attention_fwd_bf16(r.out.data(), r.lse.data(), qkv.data(), seg, c.B, c.T, c.NH, c.KVH, c.HS);
  cpu::attention_bwd_bf16(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), seg, c.B, c.T, c.NH,
                          c.KVH, c.HS);
  return r;
}
// Through the cuda-bf16 Ops table, outputs poisoned first, twice: the two runs must agree bit for bit.
Outputs run_gpu(const Ops& ops, const std::vector<float>& qkv, const std::vector<float>& dout,
                const std::vector<int32_t>* seg, const AttentionShape& c) {
  DeviceBuffer<float> d_qkv(ops, qkv), d_dout(ops, dout), d_out(ops, out_size(c)), d_lse(ops, size_t(c.B) * c.NH * c.T),
      d_dqkv(ops, qkv.size());
  DeviceBuffer<int32_t> d_seg(ops, seg ? *seg : std::vector<int32_t>(1, 0));
  const int32_t* sg = seg ? d_seg.get() : nullptr;
  const auto got = run_twice_same_bits([&] {
    d_out.poison(), d_lse.poison(), d_dqkv.poison();
    ops.attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), sg, c.B, c.T, c.NH, c.KVH, c.HS);
    ops.attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), sg, c.B, c.T, c.NH, c.KVH,
                      c.HS);
    return std::vector<std::vector<float>>{d_out.download(), d_lse.download(), d_dqkv.download()};
  });
  return {got[0], got[1], got[2]};
}

class CudaAttentionTc : public ::testing::TestWithParam<TcCase> {};

TEST_P(CudaAttentionTc, MatchesItsCpuTwinAndTheFp64Reference) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const TcCase tc = GetParam();
  const AttentionShape c = shape_of(tc);
  ASSERT_TRUE(attention_bf16::tensor_cores(c.HS));
  const auto qkv = uniform(qkv_size(c), 501, -2.f, 2.f), dout = uniform(out_size(c), 502);
  const auto seg = packed_segments(c.B, c.T, 503);
  const int32_t* seg_host = tc.segments ? seg.data() : nullptr;
  const Outputs got = run_gpu(*ops, qkv, dout, tc.segments ? &seg : nullptr, c);
  const Outputs twin = run_cpu_twin(qkv, dout, seg_host, c);
  EXPECT_TRUE(close_rel(got.out, twin.out, kTwinRel));
  EXPECT_TRUE(close_rel(got.lse, twin.lse, kTwinRel));
  EXPECT_TRUE(close_rel(got.dqkv, twin.dqkv, kTwinRel));
  const Ref ref = reference(to_f64(qkv), to_f64(dout), seg_host, c);
  const auto f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  EXPECT_LE(max_rel_diff(got.out, f32(ref.out)), kBf16Rel);
  EXPECT_LE(max_rel_diff(got.lse, f32(ref.lse)), kBf16Rel);
  EXPECT_LE(max_rel_diff(got.dqkv, f32(ref.dqkv)), kBf16Rel);
}
// Every head size on tensor cores; groups of 1, 2, 4; T = 1, one partial tile, exactly one tile, one
// past it, several tiles with a partial last one.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTc,
                         ::testing::Values(TcCase{1, 1, 2, 1, 16, false}, TcCase{2, 33, 4, 2, 16, true},
                                           TcCase{1, 64, 2, 2, 32, true}, TcCase{2, 65, 4, 1, 48, true},
                                           TcCase{1, 130, 4, 2, 64, true}, TcCase{1, 129, 2, 2, 64, false},
                                           TcCase{1, 70, 2, 1, 80, true}, TcCase{1, 100, 2, 2, 96, true},
                                           TcCase{1, 40, 2, 1, 112, false}, TcCase{1, 150, 2, 1, 128, true}),
                         NameFromParam());

// Segment ids that recur: rows 256..319 share id 5 with rows 0..63 (and not with rows 64..255), so the
// last query tile must visit key tile 0 while skipping tiles 1-3; rows 64..255 hold two segments
// whose boundary (at 150) lies inside a tile.
TEST(CudaAttentionTcSegments, ARecurringIdIsSeenAcrossSkippedTiles) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const AttentionShape c{1, 320, 2, 1, 64};
  std::vector<int32_t> seg(c.T);
  for (int t = 0; t < c.T; ++t) seg[t] = t < 64 || t >= 256 ? 5 : (t < 150 ? 7 : 8);
  const auto qkv = uniform(qkv_size(c), 511, -2.f, 2.f), dout = uniform(out_size(c), 512);
  const Outputs got = run_gpu(*ops, qkv, dout, &seg, c);
  const Outputs twin = run_cpu_twin(qkv, dout, seg.data(), c);
  EXPECT_TRUE(close_rel(got.out, twin.out, kTwinRel));
  EXPECT_TRUE(close_rel(got.lse, twin.lse, kTwinRel));
  EXPECT_TRUE(close_rel(got.dqkv, twin.dqkv, kTwinRel));
  const Ref ref = reference(to_f64(qkv), to_f64(dout), seg.data(), c);
  EXPECT_LE(max_rel_diff(got.out, std::vector<float>(ref.out.begin(), ref.out.end())), kBf16Rel);
  EXPECT_LE(max_rel_diff(got.dqkv, std::vector<float>(ref.dqkv.begin(), ref.dqkv.end())), kBf16Rel);
}

// GQA is MHA on k/v heads repeated by hand: the same output, lse and dq bit for bit (each query head's
// computation is the same); dk and dv within fp32 rounding (the GQA kernel sums the group's heads in
// one running accumulator, here each head's sum is rounded before the heads are added).
TEST(CudaAttentionTcGqa, EqualsMhaOnRepeatedKv) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const AttentionShape gqa{2, 100, 4, 2, 32}, mha{2, 100, 4, 4, 32};
  const int G = 2, HS = 32, C = 4 * HS, QKVg = 8 * HS;
  const auto qkv = uniform(qkv_size(gqa), 521, -2.f, 2.f), dout = uniform(out_size(gqa), 522);
  std::vector<float> qkv_mha;
  for (size_t r = 0; r < qkv.size() / QKVg; ++r) {
    const float* row = qkv.data() + r * QKVg;
    qkv_mha.insert(qkv_mha.end(), row, row + C);
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < 4; ++h)
        qkv_mha.insert(qkv_mha.end(), row + C + (part * 2 + h / G) * HS, row + C + (part * 2 + h / G + 1) * HS);
  }
  const auto seg = packed_segments(2, 100, 523);
  const Outputs a = run_gpu(*ops, qkv, dout, &seg, gqa), m = run_gpu(*ops, qkv_mha, dout, &seg, mha);
  EXPECT_TRUE(bitwise_equal(a.out, m.out));
  EXPECT_TRUE(bitwise_equal(a.lse, m.lse));
  std::vector<float> dq_a, dq_m, dkv_a, dkv_m;
  for (size_t r = 0; r < a.dqkv.size() / QKVg; ++r) {
    const float* ra = a.dqkv.data() + r * QKVg;
    const float* rm = m.dqkv.data() + r * 3 * C;
    dq_a.insert(dq_a.end(), ra, ra + C), dq_m.insert(dq_m.end(), rm, rm + C);
    for (int part = 0; part < 2; ++part)
      for (int kv = 0; kv < 2; ++kv)
        for (int i = 0; i < HS; ++i) {
          dkv_a.push_back(ra[C + (part * 2 + kv) * HS + i]);
          dkv_m.push_back(rm[C + part * C + (kv * G) * HS + i] + rm[C + part * C + (kv * G + 1) * HS + i]);
        }
  }
  EXPECT_TRUE(bitwise_equal(dq_a, dq_m));
  EXPECT_TRUE(close_rel(dkv_a, dkv_m, 1e-6));
}

// Head sizes without tensor-core kernels keep the CUDA-core kernel on bf16-rounded inputs, and so does
// the CPU twin: they agree as that kernel's tests demand (1e-5 / 1e-4 of the largest value).
TEST(CudaAttentionTcFallback, OtherHeadSizesMatchTheTwinOnCudaCores) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  for (const AttentionShape c : {AttentionShape{1, 70, 2, 1, 8}, AttentionShape{1, 40, 2, 1, 256}}) {
    SCOPED_TRACE(shape_str(c));
    ASSERT_FALSE(attention_bf16::tensor_cores(c.HS));
    const auto qkv = uniform(qkv_size(c), 531, -2.f, 2.f), dout = uniform(out_size(c), 532);
    const auto seg = packed_segments(c.B, c.T, 533);
    const Outputs got = run_gpu(*ops, qkv, dout, &seg, c), twin = run_cpu_twin(qkv, dout, seg.data(), c);
    EXPECT_TRUE(close_rel(got.out, twin.out, 1e-5));
    EXPECT_TRUE(close_rel(got.lse, twin.lse, 1e-5));
    EXPECT_TRUE(close_rel(got.dqkv, twin.dqkv, 1e-4));
  }
}

}  // namespace
}  // namespace sftdp::test
