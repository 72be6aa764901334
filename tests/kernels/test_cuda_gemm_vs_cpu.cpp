// tests/kernels/test_cuda_gemm_vs_cpu.cpp — the cuBLASLt-based CUDA kernels against their CPU
// twins: Linear forward/backward in fp32 (≤ 1e-4 relative: TF32 would miss that at K = 768) and
// with bf16 GEMM inputs (≤ 1e-2, and visibly not fp32), and causal attention with and without
// packed segments (masked probabilities exactly 0). Outputs poisoned before each launch, two CUDA
// runs bitwise equal. Skips without a device.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

using Outputs = std::vector<std::vector<float>>;
constexpr double kGemmRel = 1e-4;
constexpr double kBf16Rel = 1e-2;

// ---- Linear ------------------------------------------------------------------------------------
struct MatmulCase {
  int N, IC, OC;
  bool bias, bf16;
};
// "N7_IC257_OC129", plus "_nobias" and "_bf16" (the suite prefix Fp32/ or Bf16/ says it too).
std::string test_name(const MatmulCase& c) {
  std::string name = shape_name({{"N", c.N}, {"IC", c.IC}, {"OC", c.OC}});
  if (!c.bias) name += "_nobias";
  if (c.bf16) name += "_bf16";
  return name;
}
void PrintTo(const MatmulCase& c, std::ostream* os) { *os << test_name(c); }
class CudaMatmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(CudaMatmul, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto [N, IC, OC, has_bias, bf16] = GetParam();
  const size_t NIC = static_cast<size_t>(N) * IC, NOC = static_cast<size_t>(N) * OC;
  const size_t W = static_cast<size_t>(OC) * IC;
  const auto inp = uniform(NIC, 61), weight = uniform(W, 62, -0.2f, 0.2f), bias = uniform(OC, 63);
  const auto dout = uniform(NOC, 64), dweight0 = uniform(W, 65), dbias0 = uniform(OC, 66);
  std::vector<float> out(NOC), dinp(NIC), dweight = dweight0, dbias = dbias0;
  cpu_ops().matmul_fwd(out.data(), inp.data(), weight.data(), has_bias ? bias.data() : nullptr, N, IC, OC);
  cpu_ops().matmul_bwd(dinp.data(), dweight.data(), has_bias ? dbias.data() : nullptr, dout.data(), inp.data(),
                       weight.data(), N, IC, OC);

  const Bf16GemmScope precision(bf16);
  DeviceBuffer<float> d_inp(*ops, inp), d_w(*ops, weight), d_bias(*ops, bias), d_dout(*ops, dout), d_out(*ops, NOC),
      d_dinp(*ops, NIC), d_dw(*ops, W), d_db(*ops, OC);
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_dinp.poison(); d_dw.upload(dweight0); d_db.upload(dbias0);
    ops->matmul_fwd(d_out.get(), d_inp.get(), d_w.get(), has_bias ? d_bias.get() : nullptr, N, IC, OC);
    ops->matmul_bwd(d_dinp.get(), d_dw.get(), has_bias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(), d_w.get(),
                    N, IC, OC);
    return Outputs{d_out.download(), d_dinp.download(), d_dw.download(), d_db.download()};
  });
  const double rel = bf16 ? kBf16Rel : kGemmRel;
  EXPECT_TRUE(close_rel(got[0], out, rel));
  EXPECT_TRUE(close_rel(got[1], dinp, rel));
  EXPECT_TRUE(close_rel(got[2], dweight, rel));
  EXPECT_TRUE(close_rel(got[3], dbias, kGemmRel));  // dbias sums fp32 dout in both modes
  if (bf16) {
    EXPECT_GT(max_rel_diff(got[0], out), 1e-6) << "bf16 mode gave fp32 results: inputs not rounded?";
  }
}
// Odd and ragged sizes, N > 128 (several dbias row chunks), a GPT-2 sized qkv projection, and a
// vocabulary-like OC that is a multiple of nothing; IC = 257 leaves rows 4-byte aligned only.
INSTANTIATE_TEST_SUITE_P(Fp32, CudaMatmul,
                         ::testing::Values(MatmulCase{1, 8, 3, true, false}, MatmulCase{7, 257, 129, true, false},
                                           MatmulCase{300, 64, 48, true, false},
                                           MatmulCase{64, 768, 2304, true, false},
                                           MatmulCase{33, 100, 5003, false, false}),
                         NameFromParam());
INSTANTIATE_TEST_SUITE_P(Bf16, CudaMatmul,
                         ::testing::Values(MatmulCase{7, 257, 129, true, true}, MatmulCase{64, 768, 2304, true, true},
                                           MatmulCase{33, 100, 5003, false, true}),
                         NameFromParam());

// ---- Attention ---------------------------------------------------------------------------------
struct AttentionCase {
  int B, T, C, NH;
  bool segments;  // packed rows: nondecreasing segment ids, padding (0) at the end
};
std::string test_name(const AttentionCase& c) {
  std::string name = shape_name({{"B", c.B}, {"T", c.T}, {"C", c.C}, {"NH", c.NH}});
  if (c.segments) name += "_seg";
  return name;
}
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << test_name(c); }
class CudaAttention : public ::testing::TestWithParam<AttentionCase> {};

std::vector<int32_t> packed_segments(int B, int T, uint64_t seed) {
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

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto [B, T, C, NH, segments] = GetParam();
  const size_t BTC = static_cast<size_t>(B) * T * C, ATT = static_cast<size_t>(B) * NH * T * T;
  const auto qkv = uniform(3 * BTC, 71), dout = uniform(BTC, 72);
  const auto seg = packed_segments(B, T, 73);
  const int32_t* seg_host = segments ? seg.data() : nullptr;
  std::vector<float> out(BTC), att(ATT), dqkv(3 * BTC), datt(ATT);
  cpu_ops().attention_fwd(out.data(), att.data(), qkv.data(), seg_host, B, T, C, NH);
  cpu_ops().attention_bwd(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);

  DeviceBuffer<float> d_qkv(*ops, qkv), d_dout(*ops, dout), d_out(*ops, BTC), d_att(*ops, ATT),
      d_dqkv(*ops, 3 * BTC), d_datt(*ops, ATT);
  DeviceBuffer<int32_t> d_seg(*ops, seg);
  const int32_t* seg_dev = segments ? d_seg.get() : nullptr;
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_att.poison(); d_dqkv.poison(); d_datt.poison();
    ops->attention_fwd(d_out.get(), d_att.get(), d_qkv.get(), seg_dev, B, T, C, NH);
    ops->attention_bwd(d_dqkv.get(), d_datt.get(), d_dout.get(), d_qkv.get(), d_att.get(), B, T, C, NH);
    return Outputs{d_out.download(), d_att.download(), d_dqkv.download()};
  });
  EXPECT_TRUE(close_rel(got[0], out, kGemmRel));
  EXPECT_TRUE(close_rel(got[1], att, kGemmRel));
  EXPECT_TRUE(close_rel(got[2], dqkv, kGemmRel));

  // Masked probabilities are exactly 0: above the diagonal and across segments.
  size_t nonzero_masked = 0;
  for (size_t row = 0; row < static_cast<size_t>(B) * NH * T; ++row) {
    const size_t t = row % T, b = row / (static_cast<size_t>(T) * NH);
    for (size_t t2 = 0; t2 < static_cast<size_t>(T); ++t2) {
      const bool masked = t2 > t || (segments && seg[b * T + t2] != seg[b * T + t]);
      if (masked && got[1][row * T + t2] != 0.f) ++nonzero_masked;
    }
  }
  EXPECT_EQ(nonzero_masked, 0u);
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttentionCase{1, 1, 8, 2, false}, AttentionCase{2, 7, 12, 3, true},
                                           AttentionCase{2, 64, 64, 4, true}, AttentionCase{1, 130, 96, 2, false},
                                           AttentionCase{3, 33, 48, 4, true}),
                         NameFromParam());

}  // namespace
}  // namespace sftdp::test
