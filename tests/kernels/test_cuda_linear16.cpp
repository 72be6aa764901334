// tests/kernels/test_cuda_linear16.cpp — the act16 path's Linear layer (kernels/matmul.h: act16::linear_fwd,
// act16::linear_bwd; kernels/act16.h): the CPU twin against a float64 reference of its contract (bf16 inputs,
// the weight and a bf16 output's bias rounded to bf16, GELU and its derivative, the residual added in fp32, one
// rounding per stored value), then the CUDA twin against the CPU twin on the same inputs, through cuBLASLt's
// epilogues (BIAS, GELU_AUX_BIAS, DGELU, BGRADB) where the shapes allow them and through gemm.cu's epilogue kernel
// where they do not (an aux leading dimension that is not a multiple of 8, a bias that is only 4-byte aligned): the
// record of each call says which. Both twins: bf16 values within one bf16 ulp, fp32 values within fp32 summation
// order. Two CUDA runs bitwise equal. Skips without a device or the simulator.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/act16.h"
#include "test_cuda_util.h"

#ifdef SFTDP_CUDA_SIM
#include "cudasim/record.h"
#endif

namespace sftdp::test {
namespace {

using act16::LinearOut;
using act16::to_bf16;
using act16::to_float;

std::vector<uint16_t> bf16_values(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  const auto f = uniform(n, seed, lo, hi);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(f[i]);
  return out;
}

double gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
double rounded(float w) { return to_float(to_bf16(w)); }
std::vector<float> as_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// |got − want| within one bf16 ulp of want (2⁻⁸ relative; the two sides may round a near-tie differently) plus a
// small absolute part for values that cancel to near zero.
void expect_bf16_near(const std::vector<uint16_t>& got, const std::vector<double>& want, size_t ld, size_t cols,
                      const char* what) {
  const size_t rows = want.size() / cols;
  int bad = 0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const double g = to_float(got[r * ld + c]), w = want[r * cols + c];
      if (!(std::fabs(g - w) <= std::ldexp(std::fabs(w), -8) + 1e-6) && bad++ < 5)
        ADD_FAILURE() << what << "[" << r << "," << c << "] = " << g << ", want " << w;
    }
  EXPECT_EQ(bad, 0) << what;
}

// Two bf16 results of the same contract (the CUDA twin and the CPU twin): equal, or one ulp apart where their fp32
// sums differ in the last bits around a rounding tie.
void expect_bf16_twins(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int diff = std::abs(static_cast<int>(got[i]) - static_cast<int>(want[i]));
    if (diff > 1 && bad++ < 5) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", CPU twin " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

struct LinearCase {
  int N, IC, OC;
  int ld_pad = 0;       // dout / out rows this many elements wider than OC (the LM head's padded logits)
  int bias_offset = 0;  // bias this many floats past a 256-byte-aligned start
};
std::string test_name(const LinearCase& c) {
  return shape_name({{"N", c.N}, {"IC", c.IC}, {"OC", c.OC}, {"pad", c.ld_pad}, {"biasoff", c.bias_offset}});
}
void PrintTo(const LinearCase& c, std::ostream* os) { *os << test_name(c); }

// The float64 contract of linear_fwd and linear_bwd (kernels/matmul.h).
struct Reference {
  std::vector<double> z, gelu_z, residual_out, dinp, dinp_gelu, dweight, dbias;
};
Reference reference(const LinearCase& c, const std::vector<uint16_t>& x, const std::vector<float>& w,
                    const std::vector<float>& bias, const std::vector<float>& residual, const std::vector<uint16_t>& g,
                    const std::vector<uint16_t>& pre, const std::vector<float>& dweight0,
                    const std::vector<float>& dbias0) {
  const size_t N = c.N, IC = c.IC, OC = c.OC, ld = OC + c.ld_pad;
  Reference r;
  r.z.resize(N * OC), r.gelu_z.resize(N * OC), r.residual_out.resize(N * OC);
  for (size_t n = 0; n < N; ++n)
    for (size_t o = 0; o < OC; ++o) {
      double acc = 0;
      for (size_t i = 0; i < IC; ++i) acc += to_float(x[n * IC + i]) * rounded(w[o * IC + i]);
      r.z[n * OC + o] = acc + rounded(bias[o]);  // a bf16 D takes a bf16 bias
      r.gelu_z[n * OC + o] = gelu(static_cast<float>(r.z[n * OC + o]));
      r.residual_out[n * OC + o] = acc + residual[n * ld + o] + bias[o];
    }
  r.dinp.resize(N * IC), r.dinp_gelu.resize(N * IC);
  for (size_t n = 0; n < N; ++n)
    for (size_t i = 0; i < IC; ++i) {
      double acc = 0;
      for (size_t o = 0; o < OC; ++o) acc += to_float(g[n * ld + o]) * rounded(w[o * IC + i]);
      r.dinp[n * IC + i] = acc;
      r.dinp_gelu[n * IC + i] = acc * gelu_grad(to_float(pre[n * IC + i]));
    }
  r.dweight.assign(dweight0.begin(), dweight0.end());
  r.dbias.assign(dbias0.begin(), dbias0.end());
  for (size_t o = 0; o < OC; ++o) {
    for (size_t n = 0; n < N; ++n) r.dbias[o] += to_float(g[n * ld + o]);
    for (size_t i = 0; i < IC; ++i)
      for (size_t n = 0; n < N; ++n) r.dweight[o * IC + i] += to_float(g[n * ld + o]) * to_float(x[n * IC + i]);
  }
  return r;
}

class Linear16 : public ::testing::TestWithParam<LinearCase> {
 protected:
  void SetUp() override {
    const LinearCase c = GetParam();
    const size_t N = c.N, IC = c.IC, OC = c.OC, ld = OC + c.ld_pad;
    x = bf16_values(N * IC, 71), g = bf16_values(N * ld, 72), pre = bf16_values(N * IC, 73, -3.f, 3.f);
    w = uniform(OC * IC, 74, -0.2f, 0.2f), bias = uniform(OC, 75), residual = uniform(N * ld, 76);
    dweight0 = uniform(OC * IC, 77), dbias0 = uniform(OC, 78);
    ref = reference(c, x, w, bias, residual, g, pre, dweight0, dbias0);
  }
  std::vector<uint16_t> x, g, pre;
  std::vector<float> w, bias, residual, dweight0, dbias0;
  Reference ref;
};

// What both twins compute, from one set of inputs: every output of the forward's three kinds and the backward
// with and without GELU.
struct Outputs {
  std::vector<uint16_t> z, gelu_z, pre_gelu, dinp, dinp_gelu;
  std::vector<float> residual_out, dweight, dbias;
};

Outputs run_twin(const Ops& o, const LinearCase& c, const std::vector<uint16_t>& x,
                 const std::vector<float>& w, const std::vector<float>& bias, const std::vector<float>& residual,
                 const std::vector<uint16_t>& g, const std::vector<uint16_t>& pre, const std::vector<float>& dweight0,
                 const std::vector<float>& dbias0) {
  const size_t N = c.N, IC = c.IC, OC = c.OC, ld = OC + c.ld_pad;
  DeviceBuffer<uint16_t> dx(o, x), dg(o, g), dpre(o, pre), z(o, N * ld), gz(o, N * ld), pz(o, N * OC);
  DeviceBuffer<uint16_t> dinp(o, N * IC), dinp_g(o, N * IC);
  DeviceBuffer<float> dw(o, w), res(o, residual), dwt(o, dweight0), db(o, dbias0);
  std::vector<float> padded_bias(c.bias_offset + OC);
  std::copy(bias.begin(), bias.end(), padded_bias.begin() + c.bias_offset);
  DeviceBuffer<float> dbias_buf(o, padded_bias);
  const float* b = dbias_buf.get() + c.bias_offset;
  const int ldo = static_cast<int>(ld);
  o.act16.linear_fwd(z.get(), ldo, nullptr, nullptr, dx.get(), dw.get(), b, c.N, c.IC, c.OC, LinearOut::kBf16);
  o.act16.linear_fwd(gz.get(), ldo, pz.get(), nullptr, dx.get(), dw.get(), b, c.N, c.IC, c.OC, LinearOut::kBf16Gelu);
  o.act16.linear_fwd(res.get(), ldo, nullptr, res.get(), dx.get(), dw.get(), b, c.N, c.IC, c.OC,
                     LinearOut::kFp32Residual);
  o.act16.linear_bwd(dinp.get(), nullptr, dwt.get(), db.get(), dg.get(), ldo, dx.get(), dw.get(), c.N, c.IC, c.OC);
  o.act16.linear_bwd(dinp_g.get(), dpre.get(), nullptr, nullptr, dg.get(), ldo, dx.get(), dw.get(), c.N, c.IC, c.OC);
  o.synchronize();
  Outputs out;
  auto rows = [&](const std::vector<uint16_t>& v) {  // the OC written columns of each padded row
    std::vector<uint16_t> r(N * OC);
    for (size_t n = 0; n < N; ++n) std::copy(v.begin() + n * ld, v.begin() + n * ld + OC, r.begin() + n * OC);
    return r;
  };
  out.z = rows(z.download()), out.gelu_z = rows(gz.download()), out.pre_gelu = pz.download();
  out.dinp = dinp.download(), out.dinp_gelu = dinp_g.download();
  const auto r = res.download();
  out.residual_out.resize(N * OC);
  for (size_t n = 0; n < N; ++n) std::copy(r.begin() + n * ld, r.begin() + n * ld + OC, out.residual_out.begin() + n * OC);
  out.dweight = dwt.download(), out.dbias = db.download();
  return out;
}

TEST_P(Linear16, CpuTwinMatchesTheFloat64Contract) {
  const LinearCase c = GetParam();
  const Outputs o = run_twin(cpu_ops(), c, x, w, bias, residual, g, pre, dweight0, dbias0);
  expect_bf16_near(o.z, ref.z, c.OC, c.OC, "z");
  expect_bf16_near(o.pre_gelu, ref.z, c.OC, c.OC, "pre_gelu");
  expect_bf16_near(o.gelu_z, ref.gelu_z, c.OC, c.OC, "gelu(z)");
  expect_bf16_near(o.dinp, ref.dinp, c.IC, c.IC, "dinp");
  expect_bf16_near(o.dinp_gelu, ref.dinp_gelu, c.IC, c.IC, "dinp with GELU'");
  EXPECT_TRUE(close_rel(o.residual_out, as_float(ref.residual_out), 1e-5)) << "residual + z";
  EXPECT_TRUE(close_rel(o.dweight, as_float(ref.dweight), 1e-5)) << "dweight";
  EXPECT_TRUE(close_rel(o.dbias, as_float(ref.dbias), 1e-5)) << "dbias";
}

TEST_P(Linear16, CudaTwinMatchesTheCpuTwin) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const LinearCase c = GetParam();
  const Outputs want = run_twin(cpu_ops(), c, x, w, bias, residual, g, pre, dweight0, dbias0);
  const Outputs got = run_twin(*ops, c, x, w, bias, residual, g, pre, dweight0, dbias0);
  expect_bf16_twins(got.z, want.z, "z");
  expect_bf16_twins(got.pre_gelu, want.pre_gelu, "pre_gelu");
  expect_bf16_twins(got.gelu_z, want.gelu_z, "gelu(z)");
  expect_bf16_twins(got.dinp, want.dinp, "dinp");
  expect_bf16_twins(got.dinp_gelu, want.dinp_gelu, "dinp with GELU'");
  EXPECT_TRUE(close_rel(got.residual_out, want.residual_out, 1e-6)) << "residual + z";
  EXPECT_TRUE(close_rel(got.dweight, want.dweight, 1e-6)) << "dweight";
  EXPECT_TRUE(close_rel(got.dbias, want.dbias, 1e-6)) << "dbias";
  const Outputs again = run_twin(*ops, c, x, w, bias, residual, g, pre, dweight0, dbias0);
  EXPECT_EQ(again.z, got.z);
  EXPECT_EQ(again.gelu_z, got.gelu_z);
  EXPECT_EQ(again.dinp_gelu, got.dinp_gelu);
  EXPECT_EQ(again.residual_out, got.residual_out);
  EXPECT_EQ(again.dweight, got.dweight);
  EXPECT_EQ(again.dbias, got.dbias);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Linear16,
                         ::testing::Values(LinearCase{7, 64, 96},                   // every epilogue in cuBLASLt
                                           LinearCase{5, 24, 20},                   // aux ld 20: the epilogue kernel
                                           LinearCase{6, 32, 40, 0, 1},             // a 4-byte-aligned bias
                                           LinearCase{9, 48, 50, 14}),              // padded rows (the LM head)
                         NameFromParam());

#ifdef SFTDP_CUDA_SIM
// Which path each call took, from the simulator's record: the GEMM's epilogue, or the epilogue kernel after it.
std::vector<std::string> recorded(const std::string& path, const std::string& key) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"" + key + "\":\"");
    if (at != std::string::npos) out.push_back(line.substr(at + key.size() + 4, line.find('"', at + key.size() + 4) -
                                                                                  (at + key.size() + 4)));
  }
  return out;
}

TEST(Linear16Paths, EpiloguesRunInTheGemmWhereTheShapeAllowsAndInAKernelWhereNot) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const std::string path = ::testing::TempDir() + "linear16_paths.jsonl";
  for (const LinearCase c : {LinearCase{7, 64, 96}, LinearCase{5, 24, 20}}) {
    std::remove(path.c_str());
    const size_t N = c.N, IC = c.IC, OC = c.OC;
    DeviceBuffer<uint16_t> x(*ops, bf16_values(N * IC, 1)), out(*ops, N * OC), pre(*ops, N * OC), dinp(*ops, N * IC);
    DeviceBuffer<float> w(*ops, uniform(OC * IC, 2)), b(*ops, uniform(OC, 3)), dw(*ops, OC * IC), db(*ops, OC);
    sim::set_record(path, false);
    ops->act16.linear_fwd(out.get(), c.OC, pre.get(), nullptr, x.get(), w.get(), b.get(), c.N, c.IC, c.OC,
                          LinearOut::kBf16Gelu);
    ops->act16.linear_bwd(dinp.get(), x.get(), dw.get(), db.get(), out.get(), c.OC, x.get(), w.get(), c.N, c.IC, c.OC);
    ops->synchronize();
    sim::set_record("", false);
    const auto epilogues = recorded(path, "epilogue");
    const auto kernels = recorded(path, "name");
    const bool fused = c.OC % 8 == 0;
    ASSERT_EQ(epilogues.size(), 3u) << "forward, dinp, dweight";
    EXPECT_EQ(epilogues[0], fused ? "gelu_aux_bias" : "default");
    EXPECT_EQ(epilogues[1], "dgelu") << "IC = " << c.IC << " is a multiple of 8";
    EXPECT_EQ(epilogues[2], "bgradb");
    EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "epilogue_bf16_kernel"), fused ? 0 : 1);
  }
}
#endif

}  // namespace
}  // namespace sftdp::test
