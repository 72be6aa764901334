// tests/kernels/test_cuda_act16_norms.cpp — the act16 norms on the GPU (kernels/act16.h; LayerNorm, RMSNorm
// and Qwen3's q/k RMSNorm, forward and backward) against their CPU twins through the two Ops tables'
// act16 entries: fp32 outputs within 1e-5 of the largest value (the twins differ in fp32 summation order
// only), bf16 outputs equal or one bf16 step apart (or within that fp32 tolerance, near 0), dres16
// bitwise the bf16 of the GPU's own dres, and v heads copied bit for bit. Shapes reach the 16-byte vector
// path (C % 8 == 0, aligned), the scalar path (C odd, or a misaligned pointer), groups narrower than a warp
// and whole-warp groups, many blocks (N over several 128-row chunks) and C = 4096; the backwards in every
// arrangement of their optional arguments (dres_in null, given or in place, no dres16, frozen weights,
// dres_in_sum). Each comparison runs the CUDA kernels twice and wants the same bits (the simulator also
// runs every launch in two block and thread orders and compares them bitwise: the determinism of the
// last block's column sums), and on the simulator its record mode counts the launches: one per op.
// Skips without a GPU or the simulator.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "act16_test_util.h"
#include "common/test_util.h"
#include "test_cuda_util.h"
#ifdef SFTDP_CUDA_SIM
#include "cudasim/record.h"
#endif

namespace sftdp::test {
namespace {

using Outputs = std::vector<std::vector<float>>;
using Bf16Outputs = std::vector<std::vector<uint16_t>>;
constexpr double kFp32Rel = 1e-5;
constexpr float kEps = 1e-6f;  // Llama/Qwen rms_norm_eps
constexpr uint16_t kBf16Poison = 0x7fc1;  // a NaN: a bf16 output nobody wrote shows

void poison_bf16(DeviceBuffer<uint16_t>& b) { b.upload(std::vector<uint16_t>(b.size(), kBf16Poison)); }

// Runs `launch` twice (each poisons or resets its outputs first) and expects the same bits: fp32 outputs
// as floats, bf16 outputs as their 16 bits. Returns the first run's.
template <class Launch>
std::pair<Outputs, Bf16Outputs> run_twice(Launch&& launch) {
  auto first = launch(), second = launch();
  for (size_t i = 0; i < first.first.size(); ++i)
    EXPECT_TRUE(bitwise_equal(second.first[i], first.first[i])) << "fp32 output " << i << " differs between runs";
  for (size_t i = 0; i < first.second.size(); ++i)
    EXPECT_TRUE(same_bits(second.second[i], first.second[i])) << "bf16 output " << i << " differs between runs";
  return first;
}

// Which of the backward's optional arguments a call passes (layernorm and rmsnorm; the latter has no
// bias and no dres_in_sum).
struct Arrangement {
  const char* name;
  bool dres_in;      // an incoming residual gradient
  bool in_place;     // dres == dres_in
  bool dres16;       // the bf16 copy is written
  bool frozen;       // dweight (and dbias) null
  bool dres_in_sum;  // layernorm: dres_in_sum given
};
constexpr Arrangement kArrangements[] = {
    {"no dres_in", false, false, true, false, true}, {"dres_in", true, false, true, false, true},
    {"in place", true, true, true, false, true},      {"no dres16", true, false, false, false, false},
    {"frozen", true, true, true, true, true},         {"frozen, no sums", false, false, true, true, false},
};

// ---- LayerNorm and RMSNorm -------------------------------------------------------------------------
struct NormCase {
  int N, C;
  bool misaligned;  // every row pointer one float (or bf16) past an allocation's start: the scalar path
};
std::string test_name(const NormCase& c) {
  return shape_name({{"N", c.N}, {"C", c.C}}) + (c.misaligned ? "_misaligned" : "");
}
void PrintTo(const NormCase& c, std::ostream* os) { *os << test_name(c); }

// N·C elements of T in device memory, starting one element into their allocation when misaligned.
template <class T>
struct Rows {
  Rows(const Ops& ops, size_t n, bool misaligned) : buf(ops, n + misaligned), shift(misaligned) {}
  T* get() const { return buf.get() + shift; }
  void upload(const std::vector<T>& v) {
    std::vector<T> all(buf.size(), T{});
    std::copy(v.begin(), v.end(), all.begin() + shift);
    buf.upload(all);
  }
  std::vector<T> download() const {
    const auto all = buf.download();
    return std::vector<T>(all.begin() + shift, all.end());
  }
  void poison() {
    if constexpr (std::is_same_v<T, uint16_t>) upload(std::vector<uint16_t>(buf.size() - shift, kBf16Poison));
    else upload(std::vector<T>(buf.size() - shift, std::numeric_limits<T>::quiet_NaN()));
  }
  DeviceBuffer<T> buf;
  size_t shift;
};

class CudaLayerNormAct16 : public ::testing::TestWithParam<NormCase> {};

TEST_P(CudaLayerNormAct16, ForwardAndBackwardMatchCpuInEveryArrangement) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const NormCase p = GetParam();
  const int N = p.N, C = p.C;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto inp = uniform(NC, 201, -2.f, 3.f), w = uniform(C, 202, 0.5f, 1.5f), b = uniform(C, 203);
  const auto dout = bf16_of(uniform(NC, 204));
  const auto dres_in0 = uniform(NC, 205), dw0 = uniform(C, 206), db0 = uniform(C, 207), dsum0 = uniform(C, 208);

  std::vector<uint16_t> out(NC);
  std::vector<float> mean(N), rstd(N);
  cpu_ops().act16.layernorm_fwd(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  Rows<float> d_inp(*ops, NC, p.misaligned), d_dres(*ops, NC, p.misaligned), d_dres_in(*ops, NC, p.misaligned);
  Rows<uint16_t> d_out(*ops, NC, p.misaligned), d_dout(*ops, NC, p.misaligned), d_dres16(*ops, NC, p.misaligned);
  d_inp.upload(inp);
  d_dout.upload(dout);
  DeviceBuffer<float> d_w(*ops, w), d_b(*ops, b), d_mean(*ops, N), d_rstd(*ops, N), d_dw(*ops, C), d_db(*ops, C),
      d_dsum(*ops, C);
  const auto fwd = run_twice([&] {
    d_out.poison(), d_mean.poison(), d_rstd.poison();
    ops->act16.layernorm_fwd(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C);
    return std::pair{Outputs{d_mean.download(), d_rstd.download()}, Bf16Outputs{d_out.download()}};
  });
  EXPECT_TRUE(close_rel(fwd.first[0], mean, kFp32Rel));
  EXPECT_TRUE(close_rel(fwd.first[1], rstd, kFp32Rel));
  size_t differing = 0;
  EXPECT_TRUE(bf16_close(fwd.second[0], out, kFp32Rel, &differing));
  RecordProperty("out_bf16_differing", static_cast<int>(differing));

  for (const Arrangement& a : kArrangements) {
    SCOPED_TRACE(a.name);
    std::vector<float> dres(NC, 7.f), dw = dw0, db = db0, dsum = dsum0;
    std::vector<uint16_t> dres16(NC, kBf16Poison);
    if (a.dres_in) dres = dres_in0;  // in place, or the separate dres_in's values (dres is overwritten)
    const std::vector<float> dres_in_cpu = dres_in0;
    cpu_ops().act16.layernorm_bwd(dres.data(), a.dres16 ? dres16.data() : nullptr, a.frozen ? nullptr : dw.data(),
                                  a.frozen ? nullptr : db.data(), a.dres_in_sum ? dsum.data() : nullptr,
                                  a.dres_in ? dres_in_cpu.data() : nullptr, dout.data(), inp.data(), w.data(),
                                  mean.data(), rstd.data(), N, C);
    const auto got = run_twice([&] {
      if (a.in_place) d_dres.upload(dres_in0);
      else d_dres.poison();
      d_dres_in.upload(dres_in0);
      d_dres16.poison();
      d_dw.upload(dw0), d_db.upload(db0), d_dsum.upload(dsum0);
      d_mean.upload(mean), d_rstd.upload(rstd);  // the CPU twin's statistics: the backwards see the same inputs
      const float* dres_in_arg = !a.dres_in ? nullptr : a.in_place ? d_dres.get() : d_dres_in.get();
      ops->act16.layernorm_bwd(d_dres.get(), a.dres16 ? d_dres16.get() : nullptr, a.frozen ? nullptr : d_dw.get(),
                               a.frozen ? nullptr : d_db.get(), a.dres_in_sum ? d_dsum.get() : nullptr, dres_in_arg,
                               d_dout.get(), d_inp.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C);
      return std::pair{Outputs{d_dres.download(), d_dw.download(), d_db.download(), d_dsum.download()},
                       Bf16Outputs{d_dres16.download()}};
    });
    EXPECT_TRUE(close_rel(got.first[0], dres, kFp32Rel));
    EXPECT_TRUE(close_rel(got.first[1], dw, kFp32Rel));
    EXPECT_TRUE(close_rel(got.first[2], db, kFp32Rel));
    EXPECT_TRUE(close_rel(got.first[3], dsum, kFp32Rel));
    if (a.dres16) {
      EXPECT_TRUE(same_bits(got.second[0], bf16_of(got.first[0])));  // rounded once, from the GPU's own dres
    } else {
      EXPECT_TRUE(same_bits(got.second[0], std::vector<uint16_t>(NC, kBf16Poison))) << "dres16 null: not written";
    }
  }
}
// Vector path (C % 8 == 0): whole-warp groups (C 768: 96 threads a row; 4096: 512), groups of 8 lanes
// (C 64) over 1030 rows (9 row chunks: 9 blocks' partials), one lane a row (C 8). Scalar path: C odd
// (257: 64 threads a row; 33, 5: narrower groups), and C 768 with every row pointer misaligned.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaLayerNormAct16,
                         ::testing::Values(NormCase{300, 768, false}, NormCase{130, 4096, false},
                                           NormCase{1030, 64, false}, NormCase{40, 8, false},
                                           NormCase{7, 257, false}, NormCase{260, 33, false}, NormCase{3, 5, false},
                                           NormCase{129, 768, true}),
                         NameFromParam());

class CudaRmsNormAct16 : public ::testing::TestWithParam<NormCase> {};

TEST_P(CudaRmsNormAct16, ForwardAndBackwardMatchCpuInEveryArrangement) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const NormCase p = GetParam();
  const int N = p.N, C = p.C;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto inp = uniform(NC, 211, -2.f, 3.f), w = uniform(C, 212, 0.5f, 1.5f);
  const auto dout = bf16_of(uniform(NC, 214));
  const auto dres_in0 = uniform(NC, 215), dw0 = uniform(C, 216);

  std::vector<uint16_t> out(NC);
  std::vector<float> rstd(N);
  cpu_ops().act16.rmsnorm_fwd(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
  Rows<float> d_inp(*ops, NC, p.misaligned), d_dres(*ops, NC, p.misaligned), d_dres_in(*ops, NC, p.misaligned);
  Rows<uint16_t> d_out(*ops, NC, p.misaligned), d_dout(*ops, NC, p.misaligned), d_dres16(*ops, NC, p.misaligned);
  d_inp.upload(inp);
  d_dout.upload(dout);
  DeviceBuffer<float> d_w(*ops, w), d_rstd(*ops, N), d_dw(*ops, C);
  const auto fwd = run_twice([&] {
    d_out.poison(), d_rstd.poison();
    ops->act16.rmsnorm_fwd(d_out.get(), d_rstd.get(), d_inp.get(), d_w.get(), N, C, kEps);
    return std::pair{Outputs{d_rstd.download()}, Bf16Outputs{d_out.download()}};
  });
  EXPECT_TRUE(close_rel(fwd.first[0], rstd, kFp32Rel));
  EXPECT_TRUE(bf16_close(fwd.second[0], out, kFp32Rel));

  for (const Arrangement& a : kArrangements) {
    SCOPED_TRACE(a.name);
    std::vector<float> dres(NC, 7.f), dw = dw0;
    std::vector<uint16_t> dres16(NC, kBf16Poison);
    if (a.dres_in) dres = dres_in0;
    cpu_ops().act16.rmsnorm_bwd(dres.data(), a.dres16 ? dres16.data() : nullptr, a.frozen ? nullptr : dw.data(),
                                a.dres_in ? dres_in0.data() : nullptr, dout.data(), inp.data(), w.data(),
                                rstd.data(), N, C);
    const auto got = run_twice([&] {
      if (a.in_place) d_dres.upload(dres_in0);
      else d_dres.poison();
      d_dres_in.upload(dres_in0);
      d_dres16.poison();
      d_dw.upload(dw0);
      d_rstd.upload(rstd);
      const float* dres_in_arg = !a.dres_in ? nullptr : a.in_place ? d_dres.get() : d_dres_in.get();
      ops->act16.rmsnorm_bwd(d_dres.get(), a.dres16 ? d_dres16.get() : nullptr, a.frozen ? nullptr : d_dw.get(),
                             dres_in_arg, d_dout.get(), d_inp.get(), d_w.get(), d_rstd.get(), N, C);
      return std::pair{Outputs{d_dres.download(), d_dw.download()}, Bf16Outputs{d_dres16.download()}};
    });
    EXPECT_TRUE(close_rel(got.first[0], dres, kFp32Rel));
    EXPECT_TRUE(close_rel(got.first[1], dw, kFp32Rel));
    if (a.dres16) {
      EXPECT_TRUE(same_bits(got.second[0], bf16_of(got.first[0])));
    } else {
      EXPECT_TRUE(same_bits(got.second[0], std::vector<uint16_t>(NC, kBf16Poison))) << "dres16 null: not written";
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaRmsNormAct16,
                         ::testing::Values(NormCase{300, 1024, false}, NormCase{130, 4096, false},
                                           NormCase{1030, 64, false}, NormCase{7, 257, false},
                                           NormCase{260, 33, false}, NormCase{129, 1024, true}),
                         NameFromParam());

// ---- Qwen3's q/k RMSNorm -----------------------------------------------------------------------------
struct HeadCase {
  int N, NH, KVH, HS;
};
std::string test_name(const HeadCase& c) {
  return shape_name({{"N", c.N}, {"NH", c.NH}, {"KVH", c.KVH}, {"HS", c.HS}});
}
void PrintTo(const HeadCase& c, std::ostream* os) { *os << test_name(c); }

// Columns [c0, c1) of every row of an (N, W) tensor.
std::vector<uint16_t> columns(const std::vector<uint16_t>& x, size_t W, size_t c0, size_t c1) {
  std::vector<uint16_t> out;
  for (size_t r = 0; r < x.size() / W; ++r) out.insert(out.end(), x.begin() + r * W + c0, x.begin() + r * W + c1);
  return out;
}

class CudaQkRmsNormAct16 : public ::testing::TestWithParam<HeadCase> {};

TEST_P(CudaQkRmsNormAct16, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const HeadCase c = GetParam();
  const int N = c.N, NH = c.NH, KVH = c.KVH, HS = c.HS;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, n = N * QKV, nr = static_cast<size_t>(N) * (NH + KVH);
  const auto qkv = bf16_of(uniform(n, 221, -2.f, 3.f)), dout = bf16_of(uniform(n, 222));
  const auto qw = uniform(HS, 223, 0.5f, 1.5f), kw = uniform(HS, 224, 0.5f, 1.5f);
  const auto dqw0 = uniform(HS, 225), dkw0 = uniform(HS, 226);
  std::vector<uint16_t> out(n), dqkv(n);
  std::vector<float> rstd(nr), dqw = dqw0, dkw = dkw0;
  cpu_ops().act16.qk_rmsnorm_fwd(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), N, NH, KVH, HS, kEps);
  cpu_ops().act16.qk_rmsnorm_bwd(dqkv.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(), qw.data(), kw.data(),
                                 rstd.data(), N, NH, KVH, HS);

  DeviceBuffer<uint16_t> d_qkv(*ops, qkv), d_dout(*ops, dout), d_out(*ops, n), d_dqkv(*ops, n);
  DeviceBuffer<float> d_qw(*ops, qw), d_kw(*ops, kw), d_rstd(*ops, nr), d_dqw(*ops, HS), d_dkw(*ops, HS);
  for (bool frozen : {false, true}) {
    SCOPED_TRACE(frozen ? "frozen" : "weights");
    const auto got = run_twice([&] {
      poison_bf16(d_out), poison_bf16(d_dqkv), d_rstd.poison();
      d_dqw.upload(dqw0), d_dkw.upload(dkw0);
      ops->act16.qk_rmsnorm_fwd(d_out.get(), d_rstd.get(), d_qkv.get(), d_qw.get(), d_kw.get(), N, NH, KVH, HS,
                                kEps);
      ops->act16.qk_rmsnorm_bwd(d_dqkv.get(), frozen ? nullptr : d_dqw.get(), frozen ? nullptr : d_dkw.get(),
                                d_dout.get(), d_qkv.get(), d_qw.get(), d_kw.get(), d_rstd.get(), N, NH, KVH, HS);
      return std::pair{Outputs{d_rstd.download(), d_dqw.download(), d_dkw.download()},
                       Bf16Outputs{d_out.download(), d_dqkv.download()}};
    });
    EXPECT_TRUE(close_rel(got.first[0], rstd, kFp32Rel));
    EXPECT_TRUE(bf16_close(got.second[0], out, kFp32Rel));
    EXPECT_TRUE(bf16_close(got.second[1], dqkv, kFp32Rel));
    EXPECT_TRUE(close_rel(got.first[1], frozen ? dqw0 : dqw, kFp32Rel));
    EXPECT_TRUE(close_rel(got.first[2], frozen ? dkw0 : dkw, kFp32Rel));
    const size_t v0 = static_cast<size_t>(NH + KVH) * HS;  // the v heads pass through bit for bit
    EXPECT_TRUE(same_bits(columns(got.second[0], QKV, v0, QKV), columns(qkv, QKV, v0, QKV)));
    EXPECT_TRUE(same_bits(columns(got.second[1], QKV, v0, QKV), columns(dout, QKV, v0, QKV)));
  }
}
// HS 128 (16 lanes a head) over 300 rows (3 row chunks), 64 (8 lanes), 256 (a warp), GQA and MHA; HS 9 and
// 20 take the scalar path.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaQkRmsNormAct16,
                         ::testing::Values(HeadCase{300, 4, 2, 128}, HeadCase{10, 3, 3, 64}, HeadCase{5, 2, 1, 256},
                                           HeadCase{7, 3, 1, 9}, HeadCase{140, 2, 1, 20}),
                         NameFromParam());

// ---- launches ------------------------------------------------------------------------------------------
#ifdef SFTDP_CUDA_SIM
// The kernel names the simulator records (one JSON line per launch) while `run` queues its work.
template <class Run>
std::vector<std::string> launches_of(const Ops& ops, const TempDir& dir, Run&& run) {
  run();  // first: the scratch partials and the blocks-done counter are allocated (and zeroed) once
  ops.synchronize();
  const std::string path = dir / "record.jsonl";
  std::remove(path.c_str());
  sim::set_record(path, /*only=*/false);
  run();
  ops.synchronize();
  sim::set_record("", false);
  std::vector<std::string> kernels;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"op\":\"start\"") != std::string::npos) continue;
    const size_t at = line.find("\"name\":\"");
    EXPECT_NE(line.find("\"op\":\"kernel\""), std::string::npos) << "not a kernel launch: " << line;
    if (at != std::string::npos) kernels.push_back(line.substr(at + 8, line.find('"', at + 8) - at - 8));
  }
  return kernels;
}
#endif

TEST(CudaAct16Norms, EachOpIsOneKernelLaunch) {
#ifndef SFTDP_CUDA_SIM
  GTEST_SKIP() << "launches are counted in the simulator's record mode";
#else
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const int N = 300, C = 768, NH = 4, KVH = 2, HS = 64;  // 3 row chunks: 3 blocks' partials to add
  const size_t NC = static_cast<size_t>(N) * C, n = static_cast<size_t>(N) * (NH + 2 * KVH) * HS;
  const size_t nr = static_cast<size_t>(N) * (NH + KVH);
  DeviceBuffer<float> inp(*ops, uniform(NC, 231)), w(*ops, uniform(C, 232)), b(*ops, uniform(C, 233));
  DeviceBuffer<float> mean(*ops, N), rstd(*ops, N), dres(*ops, uniform(NC, 234)), dw(*ops, C), db(*ops, C),
      dsum(*ops, C), qw(*ops, uniform(HS, 235)), kw(*ops, uniform(HS, 236)), qk_rstd(*ops, nr), dqw(*ops, HS),
      dkw(*ops, HS);
  DeviceBuffer<uint16_t> out(*ops, NC), dout(*ops, bf16_of(uniform(NC, 237))), dres16(*ops, NC),
      qkv(*ops, bf16_of(uniform(n, 238))), qk_out(*ops, n), dqkv(*ops, n), qk_dout(*ops, bf16_of(uniform(n, 239)));
  TempDir dir;
  using Names = std::vector<std::string>;
  EXPECT_EQ(launches_of(*ops, dir, [&] {
              ops->act16.layernorm_fwd(out.get(), mean.get(), rstd.get(), inp.get(), w.get(), b.get(), N, C);
            }),
            Names{"layernorm_act16_fwd_kernel<true>"});
  EXPECT_EQ(launches_of(*ops, dir, [&] {
              ops->act16.layernorm_bwd(dres.get(), dres16.get(), dw.get(), db.get(), dsum.get(), dres.get(),
                                       dout.get(), inp.get(), w.get(), mean.get(), rstd.get(), N, C);
            }),
            Names{"layernorm_act16_bwd_kernel<true>"});
  EXPECT_EQ(launches_of(*ops, dir, [&] {
              ops->act16.rmsnorm_fwd(out.get(), rstd.get(), inp.get(), w.get(), N, C, kEps);
            }),
            Names{"rmsnorm_act16_fwd_kernel<true>"});
  EXPECT_EQ(launches_of(*ops, dir, [&] {
              ops->act16.rmsnorm_bwd(dres.get(), dres16.get(), dw.get(), dres.get(), dout.get(), inp.get(), w.get(),
                                     rstd.get(), N, C);
            }),
            Names{"rmsnorm_act16_bwd_kernel<true>"});
  EXPECT_EQ(launches_of(*ops, dir, [&] {
              ops->act16.qk_rmsnorm_fwd(qk_out.get(), qk_rstd.get(), qkv.get(), qw.get(), kw.get(), N, NH, KVH, HS,
                                        kEps);
            }),
            Names{"qk_rmsnorm_act16_fwd_kernel<true>"});
  EXPECT_EQ(launches_of(*ops, dir, [&] {
              ops->act16.qk_rmsnorm_bwd(dqkv.get(), dqw.get(), dkw.get(), qk_dout.get(), qkv.get(), qw.get(),
                                        kw.get(), qk_rstd.get(), N, NH, KVH, HS);
            }),
            Names{"qk_rmsnorm_act16_bwd_kernel<true>"});
#endif
}

}  // namespace
}  // namespace sftdp::test
