// tests/kernels/test_cuda_llama_ops.cpp — the Llama/Qwen-family CUDA kernels against their CPU
// twins through the two Ops tables: RMSNorm and Qwen3's per-head q/k RMSNorm (forward and
// backward), RoPE (rotate_half, with and without explicit positions), SwiGLU and the encoder
// without a position table (grouped-query attention: test_cuda_attention.cpp).
// Odd sizes (rows not a multiple of a block, C = 257, HS = 9/18/64/128), outputs poisoned with NaN
// before each launch (or, for += outputs, preset to random values), two CUDA runs bitwise equal.
// Besides the CPU twin, independent checks where one is cheap: v columns copied bit for bit,
// rope_bwd ∘ rope_fwd = identity, positions 0..T-1 given explicitly = positions null, encoder
// output = the wte rows, RoPE's cos and sin at angles up to 2^31 the float roundings of the true
// ones. fp32 within 1e-5 relative. Skips without a GPU.
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

using Outputs = std::vector<std::vector<float>>;
constexpr double kFp32Rel = 1e-5;
constexpr float kEps = 1e-6f;  // Llama/Qwen rms_norm_eps

// Columns [c0, c1) of every row of an (N, W) tensor.
std::vector<float> columns(const std::vector<float>& x, int W, int c0, int c1) {
  std::vector<float> out;
  for (size_t r = 0; r < x.size() / W; ++r)
    out.insert(out.end(), x.begin() + r * W + c0, x.begin() + r * W + c1);
  return out;
}

// ---- RMSNorm -----------------------------------------------------------------------------------
struct NC {
  int N, C;
};
std::string test_name(const NC& s) { return shape_name({{"N", s.N}, {"C", s.C}}); }
void PrintTo(const NC& s, std::ostream* os) { *os << test_name(s); }
class CudaRmsNorm : public ::testing::TestWithParam<NC> {};

TEST_P(CudaRmsNorm, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto [N_, C_] = GetParam();
  // named copies: lambdas below capture them (clang 14 cannot capture structured bindings)
  const auto N = N_;
  const auto C = C_;
  const size_t NC_ = static_cast<size_t>(N) * C;
  const auto inp = uniform(NC_, 101, -2.f, 3.f), w = uniform(C, 102, 0.5f, 1.5f);
  const auto dout = uniform(NC_, 103), dinp0 = uniform(NC_, 104), dw0 = uniform(C, 105);
  std::vector<float> out(NC_), rstd(N), dinp = dinp0, dw = dw0;
  cpu_ops().rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
  cpu_ops().rmsnorm_bwd(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);

  DeviceBuffer<float> d_inp(*ops, inp), d_w(*ops, w), d_dout(*ops, dout), d_out(*ops, NC_), d_rstd(*ops, N),
      d_dinp(*ops, NC_), d_dw(*ops, C);
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_rstd.poison();
    d_dinp.upload(dinp0); d_dw.upload(dw0);  // += outputs start from known values
    ops->rmsnorm_fwd(d_out.get(), d_rstd.get(), d_inp.get(), d_w.get(), N, C, kEps);
    ops->rmsnorm_bwd(d_dinp.get(), d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(), d_rstd.get(), N, C);
    return Outputs{d_out.download(), d_rstd.download(), d_dinp.download(), d_dw.download()};
  });
  EXPECT_TRUE(close_rel(got[0], out, kFp32Rel));
  EXPECT_TRUE(close_rel(got[1], rstd, kFp32Rel));
  EXPECT_TRUE(close_rel(got[2], dinp, kFp32Rel));
  EXPECT_TRUE(close_rel(got[3], dw, kFp32Rel));
}
// N > 128 spans several row chunks of the dweight reduction; C not a multiple of 32.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaRmsNorm,
                         ::testing::Values(NC{1, 768}, NC{7, 257}, NC{300, 64}, NC{1030, 33}, NC{129, 1000}),
                         NameFromParam());

// ---- Shapes with heads: q/k RMSNorm, RoPE, attention ---------------------------------------------
struct HeadCase {
  int B, T, NH, KVH, HS;
  bool positions;  // rope: explicit positions; attention: packed segments
};
std::string test_name(const HeadCase& c) {
  std::string name = shape_name({{"B", c.B}, {"T", c.T}, {"NH", c.NH}, {"KVH", c.KVH}, {"HS", c.HS}});
  if (c.positions) name += "_packed";
  return name;
}
void PrintTo(const HeadCase& c, std::ostream* os) { *os << test_name(c); }
size_t qkv_width(const HeadCase& c) { return static_cast<size_t>(c.NH + 2 * c.KVH) * c.HS; }

class CudaQkRmsNorm : public ::testing::TestWithParam<HeadCase> {};

TEST_P(CudaQkRmsNorm, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const HeadCase c = GetParam();
  const int N = c.B * c.T, NH = c.NH, KVH = c.KVH, HS = c.HS, QKV = static_cast<int>(qkv_width(c));
  const size_t n = static_cast<size_t>(N) * QKV, nr = static_cast<size_t>(N) * (NH + KVH);
  const auto qkv = uniform(n, 111, -2.f, 3.f), dout = uniform(n, 112);
  const auto qw = uniform(HS, 113, 0.5f, 1.5f), kw = uniform(HS, 114, 0.5f, 1.5f);
  const auto dqw0 = uniform(HS, 115), dkw0 = uniform(HS, 116);
  std::vector<float> out(n), rstd(nr), dqkv(n), dqw = dqw0, dkw = dkw0;
  cpu_ops().qk_rmsnorm_fwd(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, kEps);
  cpu_ops().qk_rmsnorm_bwd(dqkv.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(), qw.data(), kw.data(),
                           rstd.data(), N, NH, KVH, HS);

  DeviceBuffer<float> d_qkv(*ops, qkv), d_dout(*ops, dout), d_qw(*ops, qw), d_kw(*ops, kw), d_out(*ops, n),
      d_rstd(*ops, nr), d_dqkv(*ops, n), d_dqw(*ops, HS), d_dkw(*ops, HS);
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_rstd.poison(); d_dqkv.poison();  // dqkv is overwritten, v columns included
    d_dqw.upload(dqw0); d_dkw.upload(dkw0);
    ops->qk_rmsnorm_fwd(d_out.get(), d_rstd.get(), d_qkv.get(), d_qw.get(), d_kw.get(), N, NH, KVH, HS, kEps);
    ops->qk_rmsnorm_bwd(d_dqkv.get(), d_dqw.get(), d_dkw.get(), d_dout.get(), d_qkv.get(), d_qw.get(), d_kw.get(),
                        d_rstd.get(), N, NH, KVH, HS);
    return Outputs{d_out.download(), d_rstd.download(), d_dqkv.download(), d_dqw.download(), d_dkw.download()};
  });
  EXPECT_TRUE(close_rel(got[0], out, kFp32Rel));
  EXPECT_TRUE(close_rel(got[1], rstd, kFp32Rel));
  EXPECT_TRUE(close_rel(got[2], dqkv, kFp32Rel));
  EXPECT_TRUE(close_rel(got[3], dqw, kFp32Rel));
  EXPECT_TRUE(close_rel(got[4], dkw, kFp32Rel));
  // The v heads pass through unchanged: out copies qkv, dqkv copies dout.
  const int v0 = (NH + KVH) * HS;
  EXPECT_TRUE(bitwise_equal(columns(got[0], QKV, v0, QKV), columns(qkv, QKV, v0, QKV)));
  EXPECT_TRUE(bitwise_equal(columns(got[2], QKV, v0, QKV), columns(dout, QKV, v0, QKV)));
}
// N·NH > 128: several row chunks of the dq/dk weight reductions; HS odd (9), 18, 64, 128.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaQkRmsNorm,
                         ::testing::Values(HeadCase{1, 1, 1, 1, 64, false}, HeadCase{1, 7, 4, 2, 128, false},
                                           HeadCase{3, 100, 3, 1, 18, false}, HeadCase{2, 131, 8, 2, 64, false},
                                           HeadCase{1, 37, 6, 3, 9, false}),
                         NameFromParam());

// ---- RoPE ----------------------------------------------------------------------------------------
// Llama's inverse frequencies theta^(−2i/HS), i < HS/2, rounded to float.
std::vector<float> inv_freq_of(int HS, double theta) {
  std::vector<float> f(HS / 2);
  for (int i = 0; i < HS / 2; ++i) f[i] = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / HS));
  return f;
}
// Positions of packed rows: restart at 0 where the segment id changes (large T: large angles).
std::vector<int32_t> packed_positions(int B, int T, uint64_t seed) {
  const auto seg = packed_segments(B, T, seed);
  std::vector<int32_t> pos(seg.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b) * T + t;
      pos[i] = t > 0 && seg[i] == seg[i - 1] ? pos[i - 1] + 1 : 0;
    }
  return pos;
}

class CudaRope : public ::testing::TestWithParam<HeadCase> {};

TEST_P(CudaRope, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const HeadCase c = GetParam();
  const int B = c.B, T = c.T, NH = c.NH, KVH = c.KVH, HS = c.HS, QKV = static_cast<int>(qkv_width(c));
  const size_t n = static_cast<size_t>(B) * T * QKV;
  const auto qkv = uniform(n, 121, -2.f, 2.f), dqkv0 = uniform(n, 122);
  const auto inv_freq = inv_freq_of(HS, 500000.0);
  const auto pos = packed_positions(B, T, 123);
  std::vector<int32_t> pos_t(static_cast<size_t>(B) * T);  // 0..T-1 spelled out
  for (size_t i = 0; i < pos_t.size(); ++i) pos_t[i] = static_cast<int32_t>(i % T);
  const int32_t* pos_host = c.positions ? pos.data() : nullptr;
  std::vector<float> rot = qkv, drot = dqkv0;
  cpu_ops().rope_fwd(rot.data(), pos_host, inv_freq.data(), B, T, NH, KVH, HS);
  cpu_ops().rope_bwd(drot.data(), pos_host, inv_freq.data(), B, T, NH, KVH, HS);

  DeviceBuffer<float> d_x(*ops, n), d_dx(*ops, n), d_inv(*ops, inv_freq);
  DeviceBuffer<int32_t> d_pos(*ops, pos), d_pos_t(*ops, pos_t);
  const int32_t* pos_dev = c.positions ? d_pos.get() : nullptr;
  const Outputs got = run_twice_same_bits([&] {
    d_x.upload(qkv); d_dx.upload(dqkv0);  // in place
    ops->rope_fwd(d_x.get(), pos_dev, d_inv.get(), B, T, NH, KVH, HS);
    ops->rope_bwd(d_dx.get(), pos_dev, d_inv.get(), B, T, NH, KVH, HS);
    const auto fwd = d_x.download(), bwd = d_dx.download();
    ops->rope_bwd(d_x.get(), pos_dev, d_inv.get(), B, T, NH, KVH, HS);  // undo the forward rotation
    return Outputs{fwd, bwd, d_x.download()};
  });
  EXPECT_TRUE(close_rel(got[0], rot, kFp32Rel));
  EXPECT_TRUE(close_rel(got[1], drot, kFp32Rel));
  EXPECT_TRUE(close_rel(got[2], qkv, 1e-6));  // the transpose of a rotation is its inverse
  const int v0 = (NH + KVH) * HS;             // v heads untouched, bit for bit
  EXPECT_TRUE(bitwise_equal(columns(got[0], QKV, v0, QKV), columns(qkv, QKV, v0, QKV)));
  EXPECT_TRUE(bitwise_equal(columns(got[1], QKV, v0, QKV), columns(dqkv0, QKV, v0, QKV)));
  if (!c.positions) {  // positions null means 0..T-1: the same bits as spelling them out
    d_x.upload(qkv);
    ops->rope_fwd(d_x.get(), d_pos_t.get(), d_inv.get(), B, T, NH, KVH, HS);
    EXPECT_TRUE(bitwise_equal(d_x.download(), got[0]));
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaRope,
                         ::testing::Values(HeadCase{1, 1, 1, 1, 2, false}, HeadCase{2, 7, 4, 2, 18, true},
                                           HeadCase{2, 7, 4, 2, 18, false}, HeadCase{3, 33, 4, 1, 64, false},
                                           HeadCase{2, 600, 8, 2, 128, true}, HeadCase{1, 1100, 2, 1, 64, false}),
                         NameFromParam());

// The cos and sin themselves, at angles up to 2^31: q and k heads with x[i] = 1, x[i + HS/2] = 0 rotate
// to (cos a, sin a) exactly (1·c − 0·s = c), and rope_bwd to (cos a, −sin a). Each must be cos a or
// sin a of the double angle pos·inv_freq rounded to float: within half a float ulp of the long-double
// value (plus 2^-50 for the double's own error). A reduction modulo π/2 with π/2 as one double (off
// by up to 1e-7 at 2^31), or in float, fails this; the 1e-5 tolerance above does not see it.
TEST(CudaRopeAngles, AreTheRoundedCosAndSinOfTheDoubleAngleUpToTwoToThe31) {
  SFTDP_REQUIRE_CUDA(ops);
  const std::vector<int32_t> pos = {0,       1,        2,         3,         100,        4095,       65535,
                                    1000003, 16777217, 123456789, 536870911, 1073741831, 2147483646, 2147483647};
  const std::vector<float> inv_freq = {1.f, 0.5f, 0.1234567f, 0.7853982f, 1.5707964f, 3.1415927e-3f, 1e-4f, 2.5e-7f};
  const int B = 1, T = static_cast<int>(pos.size()), NH = 1, KVH = 1, HS = 2 * static_cast<int>(inv_freq.size());
  const int QKV = (NH + 2 * KVH) * HS, half = HS / 2;
  std::vector<float> qkv(static_cast<size_t>(T) * QKV, 0.f);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < NH + KVH; ++j)
      for (int i = 0; i < half; ++i) qkv[static_cast<size_t>(t) * QKV + j * HS + i] = 1.f;
  DeviceBuffer<float> d_x(*ops, qkv), d_dx(*ops, qkv), d_inv(*ops, inv_freq);
  DeviceBuffer<int32_t> d_pos(*ops, pos);
  ops->rope_fwd(d_x.get(), d_pos.get(), d_inv.get(), B, T, NH, KVH, HS);
  ops->rope_bwd(d_dx.get(), d_pos.get(), d_inv.get(), B, T, NH, KVH, HS);
  const auto fwd = d_x.download(), bwd = d_dx.download();
  int misses = 0;
  auto check = [&](float got, long double ref, const char* what, int t, int i) {
    const long double ulp = std::nextafter(std::fabs(static_cast<float>(ref)), INFINITY) -
                            std::fabs(static_cast<float>(ref));  // the float spacing at |ref|
    if (std::fabs(static_cast<long double>(got) - ref) <= ulp / 2 + std::ldexp(1.0L, -50)) return;
    if (++misses <= 5)
      ADD_FAILURE() << what << " at pos " << pos[t] << ", inv_freq " << inv_freq[i] << ": got " << got << ", want "
                    << static_cast<double>(ref) << " (float " << static_cast<float>(ref) << ")";
  };
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const long double a = static_cast<double>(pos[t]) * static_cast<double>(inv_freq[i]);  // the double angle
      const long double c = std::cos(a), s = std::sin(a);
      for (int j = 0; j < NH + KVH; ++j) {
        const size_t at = static_cast<size_t>(t) * QKV + j * HS + i;
        check(fwd[at], c, "rope_fwd cos", t, i);
        check(fwd[at + half], s, "rope_fwd sin", t, i);
        check(bwd[at], c, "rope_bwd cos", t, i);
        check(bwd[at + half], -s, "rope_bwd -sin", t, i);
      }
    }
  EXPECT_EQ(misses, 0);
}

// ---- SwiGLU ------------------------------------------------------------------------------------
struct NF {
  int N, F;
};
std::string test_name(const NF& s) { return shape_name({{"N", s.N}, {"F", s.F}}); }
void PrintTo(const NF& s, std::ostream* os) { *os << test_name(s); }
class CudaSwiglu : public ::testing::TestWithParam<NF> {};

TEST_P(CudaSwiglu, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto [N_, F_] = GetParam();
  // named copies: lambdas below capture them (clang 14 cannot capture structured bindings)
  const auto N = N_;
  const auto F = F_;
  const size_t NF_ = static_cast<size_t>(N) * F;
  const auto inp = uniform(2 * NF_, 131, -8.f, 8.f), dout = uniform(NF_, 132);
  std::vector<float> out(NF_), dinp(2 * NF_);
  cpu_ops().swiglu_fwd(out.data(), inp.data(), N, F);
  cpu_ops().swiglu_bwd(dinp.data(), inp.data(), dout.data(), N, F);

  DeviceBuffer<float> d_inp(*ops, inp), d_dout(*ops, dout), d_out(*ops, NF_), d_dinp(*ops, 2 * NF_);
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_dinp.poison();  // dinp overwritten, both halves
    ops->swiglu_fwd(d_out.get(), d_inp.get(), N, F);
    ops->swiglu_bwd(d_dinp.get(), d_inp.get(), d_dout.get(), N, F);
    return Outputs{d_out.download(), d_dinp.download()};
  });
  // Each entry is a product of a few accurately rounded factors: element-wise, as GELU's test.
  EXPECT_TRUE(allclose(got[0], out, 1e-6, kFp32Rel));
  EXPECT_TRUE(allclose(got[1], dinp, 1e-6, kFp32Rel));
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaSwiglu,
                         ::testing::Values(NF{1, 1}, NF{7, 257}, NF{300, 64}, NF{33, 1000}, NF{5, 65537}),
                         NameFromParam());

// ---- Encoder without a position table --------------------------------------------------------------
struct EncoderShape {
  int B, T, C, V;
};
std::string test_name(const EncoderShape& s) {
  return shape_name({{"B", s.B}, {"T", s.T}, {"C", s.C}, {"V", s.V}});
}
void PrintTo(const EncoderShape& s, std::ostream* os) { *os << test_name(s); }
class CudaEncoderNoWpe : public ::testing::TestWithParam<EncoderShape> {};

TEST_P(CudaEncoderNoWpe, TokenEmbeddingsOnlyMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto [B_, T_, C_, V_] = GetParam();
  // named copies: lambdas below capture them (clang 14 cannot capture structured bindings)
  const auto B = B_;
  const auto T = T_;
  const auto C = C_;
  const auto V = V_;
  const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
  const auto inp = uniform_int(BT, 151, V);  // small V: many repeated ids per bucket
  const auto pos = uniform_int(BT, 152, T);  // given, and ignored without wpe
  const auto wte = uniform(static_cast<size_t>(V) * C, 153), dout = uniform(BTC, 154);
  const auto dwte0 = uniform(wte.size(), 155);
  std::vector<float> out(BTC), dwte = dwte0;
  cpu_ops().encoder_fwd(out.data(), inp.data(), nullptr, wte.data(), nullptr, B, T, C);
  cpu_ops().encoder_bwd(dwte.data(), nullptr, dout.data(), inp.data(), nullptr, nullptr, B, T, C);

  DeviceBuffer<int32_t> d_inp(*ops, inp), d_pos(*ops, pos);
  DeviceBuffer<float> d_wte(*ops, wte), d_dout(*ops, dout), d_out(*ops, BTC), d_dwte(*ops, wte.size());
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison(); d_dwte.upload(dwte0);
    ops->encoder_fwd(d_out.get(), d_inp.get(), d_pos.get(), d_wte.get(), nullptr, B, T, C);
    ops->encoder_bwd(d_dwte.get(), nullptr, d_dout.get(), d_inp.get(), d_pos.get(), nullptr, B, T, C);
    return Outputs{d_out.download(), d_dwte.download()};
  });
  std::vector<float> rows;  // out is the token rows of wte, bit for bit
  for (size_t i = 0; i < BT; ++i)
    rows.insert(rows.end(), wte.begin() + static_cast<size_t>(inp[i]) * C, wte.begin() + (inp[i] + 1) * C);
  EXPECT_TRUE(bitwise_equal(got[0], rows));
  EXPECT_TRUE(bitwise_equal(got[0], out));
  EXPECT_TRUE(close_rel(got[1], dwte, kFp32Rel));
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaEncoderNoWpe,
                         ::testing::Values(EncoderShape{2, 5, 7, 11}, EncoderShape{4, 33, 257, 5003},
                                           EncoderShape{1, 300, 300, 3}),
                         NameFromParam());

}  // namespace
}  // namespace sftdp::test
