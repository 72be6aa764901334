// tests/kernels/test_cuda_gemm_vs_cpu.cpp — the cuBLASLt-based CUDA kernels against their CPU
// twins: Linear forward/backward in fp32 (≤ 1e-4 relative: TF32 would miss that at K = 768) and
// with bf16 GEMM inputs (the CUDA table for GemmInputs::kBf16: ≤ 1e-2, and visibly not fp32), at
// odd leading dimensions (257, 5003, 50257: the bf16 copies' padded rows) and with a bias that is
// only 4-byte aligned (the unfused bias kernel). Outputs poisoned before each launch, two CUDA runs
// bitwise equal; bf16 mirrors read in place only where they cover. Skips without a device (attention:
// test_cuda_attention.cpp).
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/bf16.h"
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

// bf16_mirror (kernels/bf16.h): with a registered copy, the bf16 GEMMs read it in place of rounding
// their input again — bitwise the same Linear forward and backward when the copy is bf16_pack(src);
// a copy of other values changes the result (it is read); a matrix reaching past the mirror, a
// leading dimension that is not a multiple of 8, or a cleared slot is rounded as before.
TEST(CudaBf16Mirror, GemmsReadTheCopyExactlyWhereItCovers) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const int N = 24, IC = 64, OC = 40;
  const auto inp = uniform(size_t(N) * IC, 81), w = uniform(size_t(OC) * IC, 82), dout = uniform(size_t(N) * OC, 83);
  DeviceBuffer<float> d_inp(*ops, inp), d_w(*ops, w), d_dout(*ops, dout), d_out(*ops, size_t(N) * OC),
      d_dinp(*ops, inp.size()), d_dw(*ops, w.size());
  DeviceBuffer<uint16_t> copy(*ops, w.size()), other(*ops, w.size());
  ops->bf16_pack(copy.get(), d_w.get(), w.size());
  ops->bf16_pack(other.get(), d_dout.get(), w.size() < dout.size() ? w.size() : dout.size());
  const auto linear = [&] {
    d_out.poison(), d_dinp.poison();
    ops->zero(d_dw.get(), w.size() * sizeof(float));
    ops->matmul_fwd(d_out.get(), d_inp.get(), d_w.get(), nullptr, N, IC, OC);
    ops->matmul_bwd(d_dinp.get(), d_dw.get(), nullptr, d_dout.get(), d_inp.get(), d_w.get(), N, IC, OC);
    return Outputs{d_out.download(), d_dinp.download(), d_dw.download()};
  };
  const Outputs plain = linear();
  ops->bf16_mirror(kMirrorParams, d_w.get(), copy.get(), w.size());
  const Outputs mirrored = linear();
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(bitwise_equal(mirrored[i], plain[i])) << "output " << i;
  ops->bf16_mirror(kMirrorParams, d_w.get(), other.get(), w.size());  // not the weight's rounding
  const Outputs wrong = linear();
  EXPECT_FALSE(bitwise_equal(wrong[0], plain[0])) << "the registered copy was not read";
  ops->bf16_mirror(kMirrorParams, d_w.get(), other.get(), w.size() - 1);  // one element short of the weight
  EXPECT_TRUE(bitwise_equal(linear()[0], plain[0]));
  ops->bf16_mirror(kMirrorParams, nullptr, nullptr, 0);
  const Outputs cleared = linear();
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(bitwise_equal(cleared[i], plain[i])) << "output " << i;
  // IC = 60 (not a multiple of 8): the copy would need its own padded rows, so it is not used.
  const int IC2 = 60;
  const auto w2 = uniform(size_t(OC) * IC2, 84), inp2 = uniform(size_t(N) * IC2, 85);
  DeviceBuffer<float> d_w2(*ops, w2), d_inp2(*ops, inp2);
  DeviceBuffer<uint16_t> junk(*ops, w2.size());
  ops->matmul_fwd(d_out.get(), d_inp2.get(), d_w2.get(), nullptr, N, IC2, OC);
  const auto want = d_out.download();
  ops->bf16_mirror(kMirrorParams, d_w2.get(), junk.get(), w2.size());
  ops->matmul_fwd(d_out.get(), d_inp2.get(), d_w2.get(), nullptr, N, IC2, OC);
  EXPECT_TRUE(bitwise_equal(d_out.download(), want));
  ops->bf16_mirror(kMirrorParams, nullptr, nullptr, 0);
}

}  // namespace
}  // namespace sftdp::test
