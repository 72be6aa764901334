// tests/kernels/test_cuda_gemm_vs_cpu.cpp — the cuBLASLt-based CUDA kernels against their CPU
// twins: Linear forward/backward in fp32 (≤ 1e-4 relative: TF32 would miss that at K = 768) and
// with bf16 GEMM inputs (the CUDA table for GemmInputs::kBf16: ≤ 1e-2, and visibly not fp32), at
// odd leading dimensions (257, 5003, 50257: the bf16 copies' padded rows) and with a bias that is
// only 4-byte aligned (the unfused bias kernel). Outputs poisoned before each launch, two CUDA runs
// bitwise equal. Skips without a device (attention: test_cuda_attention.cpp).
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
  int bias_offset = 0;  // bias this many floats past its cudaMalloc'd (256-byte-aligned) start
};
// "N7_IC257_OC129", plus "_nobias", "_bf16" (the suite prefix says it too) and "_biasoff1".
std::string test_name(const MatmulCase& c) {
  std::string name = shape_name({{"N", c.N}, {"IC", c.IC}, {"OC", c.OC}});
  if (!c.bias) name += "_nobias";
  if (c.bf16) name += "_bf16";
  if (c.bias_offset) name += "_biasoff" + std::to_string(c.bias_offset);
  return name;
}
void PrintTo(const MatmulCase& c, std::ostream* os) { *os << test_name(c); }
class CudaMatmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(CudaMatmul, ForwardAndBackwardMatchCpu) {
  const auto [N_, IC_, OC_, has_bias_, bf16_, bias_offset_] = GetParam();
  // named copies: lambdas below capture them (clang 14 cannot capture structured bindings)
  const auto N = N_;
  const auto IC = IC_;
  const auto OC = OC_;
  const auto has_bias = has_bias_;
  const auto bf16 = bf16_;
  const auto bias_offset = bias_offset_;
  SFTDP_REQUIRE_CUDA_GEMM(ops, bf16 ? GemmInputs::kBf16 : GemmInputs::kFp32);
  const size_t NIC = static_cast<size_t>(N) * IC, NOC = static_cast<size_t>(N) * OC;
  const size_t W = static_cast<size_t>(OC) * IC;
  const auto inp = uniform(NIC, 61), weight = uniform(W, 62, -0.2f, 0.2f), bias = uniform(OC, 63);
  const auto dout = uniform(NOC, 64), dweight0 = uniform(W, 65), dbias0 = uniform(OC, 66);
  std::vector<float> out(NOC), dinp(NIC), dweight = dweight0, dbias = dbias0;
  cpu_ops().matmul_fwd(out.data(), inp.data(), weight.data(), has_bias ? bias.data() : nullptr, N, IC, OC);
  cpu_ops().matmul_bwd(dinp.data(), dweight.data(), has_bias ? dbias.data() : nullptr, dout.data(), inp.data(),
                       weight.data(), N, IC, OC);

  // The bias sits bias_offset floats into its buffer: at offset 1 it is 4-byte aligned only, and
  // gemm.cu adds it with its own kernel after the GEMM instead of cuBLASLt's fused epilogue.
  std::vector<float> bias_host(bias_offset, 0.f);
  bias_host.insert(bias_host.end(), bias.begin(), bias.end());
  DeviceBuffer<float> d_inp(*ops, inp), d_w(*ops, weight), d_bias(*ops, bias_host), d_dout(*ops, dout),
      d_out(*ops, NOC), d_dinp(*ops, NIC), d_dw(*ops, W), d_db(*ops, OC);
  const float* dev_bias = has_bias ? d_bias.get() + bias_offset : nullptr;
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_dinp.poison(); d_dw.upload(dweight0); d_db.upload(dbias0);
    ops->matmul_fwd(d_out.get(), d_inp.get(), d_w.get(), dev_bias, N, IC, OC);
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
// Odd and ragged sizes, N > 128 (several dbias row chunks), a GPT-2 sized qkv projection, and
// vocabulary-like OCs that are multiples of nothing (257, 5003, and GPT-2's 50257 as the LM head:
// its dout, ld = 50257, is a GEMM input of matmul_bwd); IC = 257 leaves fp32 rows 4-byte aligned
// and bf16 copies would be 2-byte aligned without gemm.cu's padded leading dimension. biasoff1:
// the unfused bias path, with a fused-path twin of the same shape beside it.
INSTANTIATE_TEST_SUITE_P(Fp32, CudaMatmul,
                         ::testing::Values(MatmulCase{1, 8, 3, true, false}, MatmulCase{7, 257, 129, true, false},
                                           MatmulCase{7, 257, 129, true, false, 1},
                                           MatmulCase{300, 64, 48, true, false},
                                           MatmulCase{300, 64, 48, true, false, 1},
                                           MatmulCase{64, 768, 2304, true, false},
                                           MatmulCase{33, 100, 5003, false, false},
                                           MatmulCase{9, 257, 257, true, false, 2},
                                           MatmulCase{17, 64, 50257, false, false}),
                         NameFromParam());
INSTANTIATE_TEST_SUITE_P(Bf16, CudaMatmul,
                         ::testing::Values(MatmulCase{7, 257, 129, true, true}, MatmulCase{7, 257, 129, true, true, 1},
                                           MatmulCase{64, 768, 2304, true, true},
                                           MatmulCase{33, 100, 5003, false, true},
                                           MatmulCase{9, 257, 257, true, true, 2},
                                           MatmulCase{5, 5003, 257, true, true},
                                           MatmulCase{17, 64, 50257, false, true}),
                         NameFromParam());

}  // namespace
}  // namespace sftdp::test
