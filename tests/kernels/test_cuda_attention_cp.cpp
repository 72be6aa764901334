// tests/kernels/test_cuda_attention_cp.cpp — context parallelism's CUDA twins (kernels/attention.h,
// kernels/gather.h) against their CPU twins through the two Ops tables: attention_cp_fwd / attention_cp_bwd
// for one rank of a group of n (its 2 chunks of T/(2n) at their global positions, against the T gathered
// keys) with Tq and Tk across the kernels' 128-row tiles, multi-head and grouped-query heads, HS 8, 64, 130
// and 256 (one and two head elements per thread), with segments crossing the chunk boundaries and without;
// outputs poisoned with NaN (every element written), dqkv's k/v heads left alone, two CUDA runs bitwise
// equal; output and gradients within 1e-5 of the largest magnitude. The bf16 table's twins (q, k, v and dO
// rounded to bf16 as read) against the CPU's rounding twins the same way. copy_strided_rows bit for bit, both
// sides listed by an index, neither, and strided. Skips without a GPU or the simulator.
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/attention.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

struct Shape {
  int B, T, n, rank, NH, KVH, HS;
  bool segments;
};
std::string test_name(const Shape& s) {
  return shape_name({{"B", s.B}, {"T", s.T}, {"n", s.n}, {"rank", s.rank}, {"NH", s.NH}, {"KVH", s.KVH}, {"HS", s.HS},
                     {"seg", s.segments}});
}
void PrintTo(const Shape& s, std::ostream* os) { *os << test_name(s); }
class CudaAttentionCp : public ::testing::TestWithParam<Shape> {};
class CudaAttentionCpBf16 : public ::testing::TestWithParam<Shape> {};

// The fp32 table against cpu::attention_cp_*, or the bf16 table (q, k, v, dO rounded to bf16 as read) against
// cpu::attention_cp_*_bf16.
void expect_matches_cpu(const Ops* ops, const Shape& s, bool bf16) {
  const auto cpu_fwd = bf16 ? cpu::attention_cp_fwd_bf16 : cpu::attention_cp_fwd;
  const auto cpu_bwd = bf16 ? cpu::attention_cp_bwd_bf16 : cpu::attention_cp_bwd;
  const int c = s.T / (2 * s.n);
  std::vector<int32_t> qpos;
  for (int chunk : {s.rank, 2 * s.n - 1 - s.rank})
    for (int i = 0; i < c; ++i) qpos.push_back(chunk * c + i);
  const int Tq = static_cast<int>(qpos.size()), Tk = s.T;
  const size_t QKV = size_t(s.NH + 2 * s.KVH) * s.HS, KV = 2 * size_t(s.KVH) * s.HS, A = size_t(s.NH) * s.HS;
  std::vector<int32_t> seg_k, seg_q;
  if (s.segments) {
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tk; ++t) seg_k.push_back((t + 3 * b) / 37);  // segments of 37: across the chunks
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t) seg_q.push_back(seg_k[size_t(b) * Tk + qpos[t]]);
  }
  const auto qkv = uniform(size_t(s.B) * Tq * QKV, 31, -2.f, 2.f), kv = uniform(size_t(s.B) * Tk * KV, 32, -2.f, 2.f);
  const auto dout = uniform(size_t(s.B) * Tq * A, 33);
  const int32_t* sq = s.segments ? seg_q.data() : nullptr;
  const int32_t* sk = s.segments ? seg_k.data() : nullptr;
  std::vector<float> out(size_t(s.B) * Tq * A), lse(size_t(s.B) * s.NH * Tq), dqkv(qkv.size(), 7.0f), dkv(kv.size());
  cpu_fwd(out.data(), lse.data(), qkv.data(), kv.data(), qpos.data(), sq, sk, s.B, Tq, Tk, s.NH, s.KVH, s.HS);
  cpu_bwd(dqkv.data(), dkv.data(), dout.data(), qkv.data(), kv.data(), out.data(), lse.data(), qpos.data(), sq, sk, s.B,
          Tq, Tk, s.NH, s.KVH, s.HS);

  DeviceBuffer<float> d_qkv(*ops, qkv), d_kv(*ops, kv), d_dout(*ops, dout), d_out(*ops, out.size()),
      d_lse(*ops, lse.size()), d_dqkv(*ops, dqkv.size()), d_dkv(*ops, dkv.size()), d_out_ref(*ops, out),
      d_lse_ref(*ops, lse);
  DeviceBuffer<int32_t> d_qpos(*ops, qpos), d_seg_q(*ops, s.segments ? seg_q : std::vector<int32_t>{0}),
      d_seg_k(*ops, s.segments ? seg_k : std::vector<int32_t>{0});
  const int32_t* dsq = s.segments ? d_seg_q.get() : nullptr;
  const int32_t* dsk = s.segments ? d_seg_k.get() : nullptr;
  const auto got = run_twice_same_bits([&] {
    d_out.poison(), d_lse.poison(), d_dkv.poison();
    d_dqkv.upload(std::vector<float>(dqkv.size(), 7.0f));  // the k/v heads must keep their 7s
    ops->attention_cp_fwd(d_out.get(), d_lse.get(), d_qkv.get(), d_kv.get(), d_qpos.get(), dsq, dsk, s.B, Tq, Tk, s.NH,
                          s.KVH, s.HS);
    // The backward from the CPU forward's out and lse, so that it is compared on the same inputs.
    ops->attention_cp_bwd(d_dqkv.get(), d_dkv.get(), d_dout.get(), d_qkv.get(), d_kv.get(), d_out_ref.get(),
                          d_lse_ref.get(), d_qpos.get(), dsq, dsk, s.B, Tq, Tk, s.NH, s.KVH, s.HS);
    return std::vector<std::vector<float>>{d_out.download(), d_lse.download(), d_dqkv.download(), d_dkv.download()};
  });
  EXPECT_TRUE(close_rel(got[0], out, 1e-5)) << "out";
  EXPECT_TRUE(close_rel(got[1], lse, 1e-6)) << "lse";
  EXPECT_TRUE(close_rel(got[2], dqkv, 1e-5)) << "dqkv (q heads; the k/v heads keep their 7s)";
  EXPECT_TRUE(close_rel(got[3], dkv, 1e-5)) << "dkv";
}

TEST_P(CudaAttentionCp, ForwardAndBackwardMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  expect_matches_cpu(ops, GetParam(), /*bf16=*/false);
}

TEST_P(CudaAttentionCpBf16, Bf16TableMatchesItsCpuTwin) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  expect_matches_cpu(ops, GetParam(), /*bf16=*/true);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionCp,
                         ::testing::Values(Shape{1, 16, 2, 0, 2, 2, 8, false}, Shape{2, 24, 3, 1, 4, 2, 8, true},
                                           Shape{1, 272, 2, 1, 4, 1, 64, true}, Shape{2, 264, 2, 0, 2, 2, 130, false},
                                           Shape{1, 320, 4, 3, 6, 3, 256, true}),
                         NameFromParam());
// The rounding is per element read: the small shapes and one across the key tiles suffice.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionCpBf16,
                         ::testing::Values(Shape{2, 24, 3, 1, 4, 2, 8, true}, Shape{1, 272, 2, 1, 4, 1, 64, true}),
                         NameFromParam());

TEST(CudaCopyStridedRows, CopiesTheListedRowsBitForBit) {
  SFTDP_REQUIRE_CUDA(ops);
  const int n = 37, C = 19, ldi = 23, ldo = 29, rows_in = 41, rows_out = 43;
  const auto in = uniform(size_t(rows_in) * ldi, 51);
  std::vector<int32_t> iidx(n), oidx(n);
  for (int i = 0; i < n; ++i) iidx[i] = (i * 7 + 3) % rows_in, oidx[i] = (i * 11 + 5) % rows_out;
  for (int listed = 0; listed < 4; ++listed) {
    const int32_t* hi = listed & 1 ? iidx.data() : nullptr;
    const int32_t* ho = listed & 2 ? oidx.data() : nullptr;
    std::vector<float> want(size_t(rows_out) * ldo, -1.0f);
    cpu_ops().copy_strided_rows(want.data(), ldo, ho, in.data(), ldi, hi, n, C);
    DeviceBuffer<float> d_in(*ops, in), d_out(*ops, want.size());
    DeviceBuffer<int32_t> d_i(*ops, iidx), d_o(*ops, oidx);
    d_out.upload(std::vector<float>(want.size(), -1.0f));
    ops->copy_strided_rows(d_out.get(), ldo, ho ? d_o.get() : nullptr, d_in.get(), ldi, hi ? d_i.get() : nullptr, n,
                           C);
    EXPECT_TRUE(bitwise_equal(d_out.download(), want)) << "input listed " << bool(hi) << ", output listed " << bool(ho);
  }
}

}  // namespace
}  // namespace sftdp::test
