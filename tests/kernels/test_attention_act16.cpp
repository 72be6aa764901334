// tests/kernels/test_attention_act16.cpp — the act16 attention's CPU twins (cpu::act16::attention_{fwd,bwd},
// kernels/attention.h and kernels/act16.h): bf16 q|k|v, dO and O in, out and dqkv rounded to bf16 once, lse fp32.
// Against the float64 reference of the same bf16 values within bf16 tolerance, for head sizes on tensor cores and
// beside them (24, 160), GQA and MHA, with and without packed segments, T not a multiple of the 64-row tile; on
// tensor-core head sizes they are the bf16 table's CPU twin (cpu::attention_{fwd,bwd}_bf16) on the widened values
// with its fp32 outputs rounded once, bit for bit (D from the stored bf16 O); elsewhere its forward within one bf16
// ulp; the CPU Ops table carries them. Context parallelism's act16 twins (cpu::act16::attention_cp_*): each rank's
// out, lse and dq bit for bit the whole-row act16 twins' rows at its positions, the ranks' fp32 dk/dv summed and
// rounded once within one bf16 ulp of the whole rows'.
#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/attention.h"
#include "kernels/attention_act16_util.h"
#include "kernels/attention_reference.h"
#include "kernels/ops.h"
#include "kernels/test_cuda_util.h"

namespace sftdp::test {
namespace {

// The reference is fp64 attention of the same bf16 inputs: what remains is bf16 P and dS in the tensor-core GEMMs
// and the outputs' own rounding (2^-9). Measured on these cases: out ≤ 2.9e-3, lse ≤ 2.6e-7 (fp32 only), dqkv ≤ 3.6e-3
// of the largest value.
constexpr double kBf16Rel = 1e-2;
constexpr double kLseRel = 1e-6;

std::vector<float> f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

struct Inputs {
  std::vector<uint16_t> qkv, dout;
  std::vector<int32_t> seg;
};
Inputs inputs_for(const AttentionShape& c, uint64_t seed) {
  return {to_bf16(uniform(qkv_size(c), seed, -2.f, 2.f)), to_bf16(uniform(out_size(c), seed + 1)),
          packed_segments(c.B, c.T, seed + 2)};
}

const AttentionShape kShapes[] = {
    {1, 1, 2, 1, 16},    {2, 33, 4, 2, 16},  {1, 130, 4, 2, 64}, {1, 70, 2, 1, 128},  // tensor cores
    {2, 65, 4, 1, 48},   {1, 100, 2, 2, 112},                                          // odd n-tiles per half
    {1, 70, 2, 1, 24},   {1, 40, 4, 2, 160},                                           // CUDA-core head sizes
};

TEST(Act16Attention, MatchesTheFp64ReferenceOfItsBf16InputsWithinBf16Tolerance) {
  for (const AttentionShape& c : kShapes)
    for (const bool segments : {false, true}) {
      SCOPED_TRACE(shape_str(c) + (segments ? " segments" : ""));
      const Inputs in = inputs_for(c, 101);
      const int32_t* seg = segments ? in.seg.data() : nullptr;
      const Act16Outputs got = run_cpu_act16(in.qkv, in.dout, seg, c);
      const Ref ref = reference(to_f64(widen(in.qkv)), to_f64(widen(in.dout)), seg, c);
      EXPECT_LE(max_rel_diff(widen(got.out), f32(ref.out)), kBf16Rel);
      EXPECT_LE(max_rel_diff(got.lse, f32(ref.lse)), kLseRel);
      EXPECT_LE(max_rel_diff(widen(got.dqkv), f32(ref.dqkv)), kBf16Rel);
    }
}

// On tensor-core head sizes the act16 twins make exactly the bf16 table's arithmetic: its CPU twin on the widened
// values, out and dqkv rounded once from the fp32 values it stores, its backward fed the stored bf16 O.
TEST(Act16Attention, IsTheBf16TablesAttentionOnBf16ValuesRoundedOnce) {
  for (const AttentionShape& c : {AttentionShape{2, 33, 4, 2, 16}, AttentionShape{1, 130, 4, 2, 64},
                                  AttentionShape{1, 70, 2, 1, 128}}) {
    SCOPED_TRACE(shape_str(c));
    ASSERT_TRUE(attention_bf16::tensor_cores(c.HS));
    const Inputs in = inputs_for(c, 111);
    const Act16Outputs got = run_cpu_act16(in.qkv, in.dout, in.seg.data(), c);
    const std::vector<float> qkv = widen(in.qkv), dout = widen(in.dout), out16 = widen(got.out);
    std::vector<float> out(out_size(c)), lse(got.lse.size()), dqkv(qkv.size());
    cpu::attention_fwd_bf16(out.data(), lse.data(), qkv.data(), in.seg.data(), c.B, c.T, c.NH, c.KVH, c.HS);
    cpu::attention_bwd_bf16(dqkv.data(), dout.data(), qkv.data(), out16.data(), lse.data(), in.seg.data(), c.B, c.T,
                            c.NH, c.KVH, c.HS);
    EXPECT_EQ(got.out, to_bf16(out));
    EXPECT_TRUE(bitwise_equal(got.lse, lse));
    EXPECT_EQ(got.dqkv, to_bf16(dqkv));
  }
}

// Elsewhere the forward is the fp32 attention's (cpu::attention_fwd_bf16 there) up to fp32 summation order: out
// within one bf16 ulp, lse to fp32 rounding. (The backward's D is Σ dO·O of the stored bf16 O, as on the GPU, where
// the fp32 twin sums Σ P·dP: the reference test above holds it.)
TEST(Act16Attention, ForwardOnCudaCoreHeadSizesIsTheFp32AttentionRoundedOnce) {
  for (const AttentionShape& c : {AttentionShape{1, 70, 2, 1, 24}, AttentionShape{1, 40, 4, 2, 160}}) {
    SCOPED_TRACE(shape_str(c));
    ASSERT_FALSE(attention_bf16::tensor_cores(c.HS));
    const Inputs in = inputs_for(c, 121);
    std::vector<uint16_t> out16(out_size(c));
    std::vector<float> lse16(size_t(c.B) * c.NH * c.T), out(out_size(c)), lse(lse16.size());
    cpu::act16::attention_fwd(out16.data(), lse16.data(), in.qkv.data(), in.seg.data(), c.B, c.T, c.NH, c.KVH, c.HS);
    cpu::attention_fwd_bf16(out.data(), lse.data(), widen(in.qkv).data(), in.seg.data(), c.B, c.T, c.NH, c.KVH, c.HS);
    EXPECT_TRUE(within_bf16_ulps(out16, to_bf16(out), 1));
    EXPECT_TRUE(close_rel(lse16, lse, 1e-6));
  }
}

TEST(Act16Attention, ContextParallelRanksGetTheWholeRowsResults) {
  using Case = std::pair<AttentionShape, int>;  // the shape and the group's size
  for (const auto& [c, n] : {Case{{1, 200, 4, 2, 32}, 2}, Case{{2, 192, 2, 2, 16}, 3}}) {
    SCOPED_TRACE(shape_str(c) + " N=" + std::to_string(n));
    const Inputs in = inputs_for(c, 131);
    const Act16Outputs whole = run_cpu_act16(in.qkv, in.dout, in.seg.data(), c);
    const int QKV = (c.NH + 2 * c.KVH) * c.HS, KV = 2 * c.KVH * c.HS, OC = c.NH * c.HS;
    std::vector<uint16_t> kv(size_t(c.B) * c.T * KV);
    for (size_t r = 0; r < size_t(c.B) * c.T; ++r) std::copy_n(&in.qkv[r * QKV + OC], KV, &kv[r * KV]);
    std::vector<double> dkv_sum(kv.size(), 0.0);
    for (int rank = 0; rank < n; ++rank) {
      const int chunk = c.T / (2 * n);
      std::vector<int32_t> pos, seg_q;
      for (int part : {rank, 2 * n - 1 - rank})
        for (int i = 0; i < chunk; ++i) pos.push_back(part * chunk + i);
      const int Tq = static_cast<int>(pos.size());
      std::vector<uint16_t> q(size_t(c.B) * Tq * QKV), d(size_t(c.B) * Tq * OC), want_out, want_dq;
      std::vector<float> want_lse(size_t(c.B) * c.NH * Tq);
      for (int b = 0; b < c.B; ++b)
        for (int t = 0; t < Tq; ++t) {
          const size_t from = size_t(b) * c.T + pos[t], to = size_t(b) * Tq + t;
          std::copy_n(&in.qkv[from * QKV], QKV, &q[to * QKV]);
          std::copy_n(&in.dout[from * OC], OC, &d[to * OC]);
          want_out.insert(want_out.end(), &whole.out[from * OC], &whole.out[from * OC] + OC);
          want_dq.insert(want_dq.end(), &whole.dqkv[from * QKV], &whole.dqkv[from * QKV] + OC);
          for (int h = 0; h < c.NH; ++h)
            want_lse[(size_t(b) * c.NH + h) * Tq + t] = whole.lse[(size_t(b) * c.NH + h) * c.T + pos[t]];
          seg_q.push_back(in.seg[from]);
        }
      std::vector<uint16_t> out(d.size()), dqkv(q.size(), 0x7fc0);  // bf16 NaN: the k/v heads must keep it
      std::vector<float> lse(want_lse.size()), dkv(kv.size());
      cpu::act16::attention_cp_fwd(out.data(), lse.data(), q.data(), kv.data(), pos.data(), seg_q.data(),
                                   in.seg.data(), c.B, Tq, c.T, c.NH, c.KVH, c.HS);
      cpu::act16::attention_cp_bwd(dqkv.data(), dkv.data(), d.data(), q.data(), kv.data(), out.data(), lse.data(),
                                   pos.data(), seg_q.data(), in.seg.data(), c.B, Tq, c.T, c.NH, c.KVH, c.HS);
      EXPECT_EQ(out, want_out) << "rank " << rank;
      EXPECT_TRUE(bitwise_equal(lse, want_lse)) << "rank " << rank;
      std::vector<uint16_t> dq, kv_heads;
      for (size_t r = 0; r < size_t(c.B) * Tq; ++r) {
        dq.insert(dq.end(), &dqkv[r * QKV], &dqkv[r * QKV] + OC);
        kv_heads.insert(kv_heads.end(), &dqkv[r * QKV] + OC, &dqkv[r * QKV] + QKV);
      }
      EXPECT_EQ(dq, want_dq) << "rank " << rank;
      EXPECT_EQ(kv_heads, std::vector<uint16_t>(kv_heads.size(), 0x7fc0)) << "rank " << rank;
      for (size_t i = 0; i < dkv.size(); ++i) dkv_sum[i] += dkv[i];
    }
    std::vector<uint16_t> got_dkv(kv.size()), want_dkv;
    for (size_t i = 0; i < kv.size(); ++i) got_dkv[i] = act16::to_bf16(static_cast<float>(dkv_sum[i]));
    for (size_t r = 0; r < size_t(c.B) * c.T; ++r)
      want_dkv.insert(want_dkv.end(), &whole.dqkv[r * QKV + OC], &whole.dqkv[r * QKV] + QKV);
    EXPECT_TRUE(within_bf16_ulps(got_dkv, want_dkv, 1, 1e-6));
  }
}

TEST(Act16Attention, TheCpuTableCarriesTheTwins) {
  EXPECT_EQ(cpu_ops().act16.attention_fwd, &cpu::act16::attention_fwd);
  EXPECT_EQ(cpu_ops().act16.attention_bwd, &cpu::act16::attention_bwd);
  EXPECT_EQ(cpu_ops().act16.attention_cp_fwd, &cpu::act16::attention_cp_fwd);
  EXPECT_EQ(cpu_ops().act16.attention_cp_bwd, &cpu::act16::attention_cp_bwd);
}

}  // namespace
}  // namespace sftdp::test
