// tests/kernels/test_cuda_attention_cp.cpp — context parallelism's CUDA twins (kernels/attention.h,
// kernels/gather.h) against their CPU twins through the two Ops tables: attention_cp_fwd / attention_cp_bwd
// for one rank of a group of n (its 2 chunks of T/(2n) at their global positions, against the T gathered
// keys) with Tq and Tk across the kernels' 128-row tiles, multi-head and grouped-query heads, HS 8, 64, 130
// and 256 (one and two head elements per thread), with segments crossing the chunk boundaries and without;
// outputs poisoned with NaN (every element written), dqkv's k/v heads left alone, two CUDA runs bitwise
// equal; output and gradients within 1e-5 of the largest magnitude. The bf16 table's twins against the CPU's the
// same way: on tensor cores for head sizes 16..128 by 16 (bit for bit on the simulator, 2e-3 on a GPU, as the
// whole-row tensor-core kernels against theirs), on CUDA cores with q, k, v and dO rounded as read elsewhere; and on
// tensor cores each query row's out, lse and dq bit for bit the whole-row kernels' row at its position (chunks on and
// off the 64-row tiles, segments across them). copy_strided_rows bit for bit, both sides listed by an index,
// neither, and strided. Skips without a GPU or the simulator.
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/attention.h"
#include "kernels/attention_act16_util.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

#ifdef SFTDP_CUDA_SIM
constexpr double kTensorCoreTwinRel = 0;  // close_rel(.., 0): every element equal
#else
constexpr double kTensorCoreTwinRel = 2e-3;  // test_cuda_attention_tc.cpp says why
#endif

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
  const bool tc = bf16 && attention_bf16::tensor_cores(s.HS);
  EXPECT_TRUE(close_rel(got[0], out, tc ? kTensorCoreTwinRel : 1e-5)) << "out";
  EXPECT_TRUE(close_rel(got[1], lse, tc ? kTensorCoreTwinRel : 1e-6)) << "lse";
  EXPECT_TRUE(close_rel(got[2], dqkv, tc ? kTensorCoreTwinRel : 1e-5)) << "dqkv (q heads; the k/v heads keep their 7s)";
  EXPECT_TRUE(close_rel(got[3], dkv, tc ? kTensorCoreTwinRel : 1e-5)) << "dkv";
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
// CUDA cores (HS 8: the rounding is per element read), and tensor cores with chunks of 68 (tiles across the chunk
// boundary), 64 (whole tiles) and 32 (rank 2 of 3, chunks 2 and 3: the last key tile none of its queries sees).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionCpBf16,
                         ::testing::Values(Shape{2, 24, 3, 1, 4, 2, 8, true}, Shape{1, 272, 2, 1, 4, 1, 64, true},
                                           Shape{2, 256, 2, 0, 4, 2, 16, false}, Shape{1, 192, 3, 2, 2, 2, 32, true}),
                         NameFromParam());

// The bf16 table's context-parallel attention on tensor cores gives each of its query rows the whole-row kernels'
// out, lse and dq at that position, bit for bit: the same key tiles, and a key tile with nothing visible to a row
// changes nothing of it.
TEST(CudaAttentionCpTensorCores, RowsAreTheWholeRowKernelsRowsBitForBit) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  const int B = 2, T = 200, n = 2, NH = 4, KVH = 2, HS = 32, QKV = (NH + 2 * KVH) * HS, KV = 2 * KVH * HS, OC = NH * HS;
  const auto qkv = uniform(size_t(B) * T * QKV, 61, -2.f, 2.f), dout = uniform(size_t(B) * T * OC, 62);
  std::vector<int32_t> seg;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) seg.push_back((t + 9 * b) / 41);
  std::vector<float> kv(size_t(B) * T * KV);
  for (size_t r = 0; r < size_t(B) * T; ++r) std::copy_n(&qkv[r * QKV + OC], KV, &kv[r * KV]);
  DeviceBuffer<float> d_qkv(*ops, qkv), d_dout(*ops, dout), d_out(*ops, size_t(B) * T * OC),
      d_lse(*ops, size_t(B) * NH * T), d_dqkv(*ops, qkv.size()), d_kv(*ops, kv);
  DeviceBuffer<int32_t> d_seg(*ops, seg);
  ops->attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), d_seg.get(), B, T, NH, KVH, HS);
  ops->attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), d_seg.get(), B, T, NH, KVH,
                     HS);
  const auto out = d_out.download(), lse = d_lse.download(), dqkv = d_dqkv.download();
  for (int rank = 0; rank < n; ++rank) {
    const int c = T / (2 * n);
    std::vector<int32_t> qpos, seg_q;
    for (int chunk : {rank, 2 * n - 1 - rank})
      for (int i = 0; i < c; ++i) qpos.push_back(chunk * c + i);
    const int Tq = static_cast<int>(qpos.size());
    std::vector<float> q(size_t(B) * Tq * QKV), d(size_t(B) * Tq * OC), want_out, want_lse(size_t(B) * NH * Tq),
        want_dq;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tq; ++t) {
        const size_t from = size_t(b) * T + qpos[t], to = size_t(b) * Tq + t;
        std::copy_n(&qkv[from * QKV], QKV, &q[to * QKV]);
        std::copy_n(&dout[from * OC], OC, &d[to * OC]);
        want_out.insert(want_out.end(), &out[from * OC], &out[from * OC] + OC);
        want_dq.insert(want_dq.end(), &dqkv[from * QKV], &dqkv[from * QKV] + OC);
        for (int h = 0; h < NH; ++h) want_lse[(size_t(b) * NH + h) * Tq + t] = lse[(size_t(b) * NH + h) * T + qpos[t]];
        seg_q.push_back(seg[from]);
      }
    DeviceBuffer<float> d_q(*ops, q), d_d(*ops, d), d_cp_out(*ops, want_out.size()), d_cp_lse(*ops, want_lse.size()),
        d_cp_dqkv(*ops, q.size()), d_dkv(*ops, kv.size());
    DeviceBuffer<int32_t> d_qpos(*ops, qpos), d_seg_q(*ops, seg_q);
    d_cp_out.poison(), d_cp_lse.poison(), d_cp_dqkv.poison();
    ops->attention_cp_fwd(d_cp_out.get(), d_cp_lse.get(), d_q.get(), d_kv.get(), d_qpos.get(), d_seg_q.get(),
                          d_seg.get(), B, Tq, T, NH, KVH, HS);
    ops->attention_cp_bwd(d_cp_dqkv.get(), d_dkv.get(), d_d.get(), d_q.get(), d_kv.get(), d_cp_out.get(),
                          d_cp_lse.get(), d_qpos.get(), d_seg_q.get(), d_seg.get(), B, Tq, T, NH, KVH, HS);
    const auto got_dqkv = d_cp_dqkv.download();
    std::vector<float> got_dq;
    for (size_t r = 0; r < size_t(B) * Tq; ++r)
      got_dq.insert(got_dq.end(), &got_dqkv[r * QKV], &got_dqkv[r * QKV] + OC);
    EXPECT_TRUE(bitwise_equal(d_cp_out.download(), want_out)) << "out, rank " << rank;
    EXPECT_TRUE(bitwise_equal(d_cp_lse.download(), want_lse)) << "lse, rank " << rank;
    EXPECT_TRUE(bitwise_equal(got_dq, want_dq)) << "dq, rank " << rank;
  }
}

// The act16 path's twins (bf16 q|k|v, gathered k|v, dO and O; out and dq rounded once, dkv fp32) against theirs.
TEST(CudaAttentionCpAct16, MatchesItsCpuTwin) {
  SFTDP_REQUIRE_CUDA_GEMM(ops, GemmInputs::kBf16);
  for (const Shape s : {Shape{2, 200, 2, 1, 4, 2, 32, true}, Shape{1, 192, 3, 2, 2, 2, 16, false}}) {
    SCOPED_TRACE(test_name(s));
    const int c = s.T / (2 * s.n);
    std::vector<int32_t> qpos, seg_k, seg_q;
    for (int chunk : {s.rank, 2 * s.n - 1 - s.rank})
      for (int i = 0; i < c; ++i) qpos.push_back(chunk * c + i);
    const int Tq = static_cast<int>(qpos.size()), Tk = s.T;
    const size_t QKV = size_t(s.NH + 2 * s.KVH) * s.HS, KV = 2 * size_t(s.KVH) * s.HS, A = size_t(s.NH) * s.HS;
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tk; ++t) seg_k.push_back(s.segments ? (t + 3 * b) / 37 : 0);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t) seg_q.push_back(seg_k[size_t(b) * Tk + qpos[t]]);
    const auto qkv = to_bf16(uniform(size_t(s.B) * Tq * QKV, 71, -2.f, 2.f));
    const auto kv = to_bf16(uniform(size_t(s.B) * Tk * KV, 72, -2.f, 2.f));
    const auto dout = to_bf16(uniform(size_t(s.B) * Tq * A, 73));
    const int32_t* sq = s.segments ? seg_q.data() : nullptr;
    const int32_t* sk = s.segments ? seg_k.data() : nullptr;
    std::vector<uint16_t> out(size_t(s.B) * Tq * A), dqkv(qkv.size(), 0x7fc0);
    std::vector<float> lse(size_t(s.B) * s.NH * Tq), dkv(kv.size());
    cpu::act16::attention_cp_fwd(out.data(), lse.data(), qkv.data(), kv.data(), qpos.data(), sq, sk, s.B, Tq, Tk,
                                 s.NH, s.KVH, s.HS);
    cpu::act16::attention_cp_bwd(dqkv.data(), dkv.data(), dout.data(), qkv.data(), kv.data(), out.data(), lse.data(),
                                 qpos.data(), sq, sk, s.B, Tq, Tk, s.NH, s.KVH, s.HS);
    DeviceBuffer<uint16_t> d_qkv(*ops, qkv), d_kv(*ops, kv), d_dout(*ops, dout), d_out(*ops, out.size()),
        d_dqkv(*ops, dqkv), d_out_ref(*ops, out);
    DeviceBuffer<float> d_lse(*ops, lse.size()), d_dkv(*ops, dkv.size()), d_lse_ref(*ops, lse);
    DeviceBuffer<int32_t> d_qpos(*ops, qpos), d_seg_q(*ops, seg_q), d_seg_k(*ops, seg_k);
    const int32_t* dsq = s.segments ? d_seg_q.get() : nullptr;
    const int32_t* dsk = s.segments ? d_seg_k.get() : nullptr;
    d_lse.poison(), d_dkv.poison();
    ops->act16.attention_cp_fwd(d_out.get(), d_lse.get(), d_qkv.get(), d_kv.get(), d_qpos.get(), dsq, dsk, s.B, Tq, Tk,
                                s.NH, s.KVH, s.HS);
    ops->act16.attention_cp_bwd(d_dqkv.get(), d_dkv.get(), d_dout.get(), d_qkv.get(), d_kv.get(), d_out_ref.get(),
                                d_lse_ref.get(), d_qpos.get(), dsq, dsk, s.B, Tq, Tk, s.NH, s.KVH, s.HS);
    EXPECT_TRUE(close_rel(widen(d_out.download()), widen(out), kTensorCoreTwinRel)) << "out";
    EXPECT_TRUE(close_rel(d_lse.download(), lse, kTensorCoreTwinRel)) << "lse";
    const auto got_dqkv = d_dqkv.download();
    std::vector<uint16_t> got_dq, want_dq, kv_heads;
    for (size_t r = 0; r < size_t(s.B) * Tq; ++r) {
      got_dq.insert(got_dq.end(), &got_dqkv[r * QKV], &got_dqkv[r * QKV] + A);
      want_dq.insert(want_dq.end(), &dqkv[r * QKV], &dqkv[r * QKV] + A);
      kv_heads.insert(kv_heads.end(), &got_dqkv[r * QKV] + A, &got_dqkv[r * QKV] + QKV);
    }
    EXPECT_TRUE(close_rel(widen(got_dq), widen(want_dq), kTensorCoreTwinRel)) << "dq";
    EXPECT_EQ(kv_heads, std::vector<uint16_t>(kv_heads.size(), 0x7fc0)) << "the k/v heads keep their NaNs";
    EXPECT_TRUE(close_rel(d_dkv.download(), dkv, kTensorCoreTwinRel)) << "dkv";
  }
}

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
    // the act16 path's bf16 rows
    const auto in16 = to_bf16(in);
    std::vector<uint16_t> want16(want.size(), 0xbf80);  // -1
    cpu_ops().act16.copy_strided_rows(want16.data(), ldo, ho, in16.data(), ldi, hi, n, C);
    DeviceBuffer<uint16_t> d_in16(*ops, in16), d_out16(*ops, std::vector<uint16_t>(want.size(), 0xbf80));
    ops->act16.copy_strided_rows(d_out16.get(), ldo, ho ? d_o.get() : nullptr, d_in16.get(), ldi,
                                 hi ? d_i.get() : nullptr, n, C);
    EXPECT_EQ(d_out16.download(), want16) << "bf16, input listed " << bool(hi) << ", output listed " << bool(ho);
  }
}

}  // namespace
}  // namespace sftdp::test
