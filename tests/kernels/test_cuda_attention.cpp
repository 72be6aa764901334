// tests/kernels/test_cuda_attention.cpp — the CUDA attention twin (tiled, online softmax, no T×T:
// kernels/cuda/attention/cuda_cores.cu) against the CPU twin through the Ops tables: output, log-sum-exp and
// every input gradient, for multi-head (GPT-2) and grouped-query (KVH < NH) attention, HS from 8 to
// 256, T = 1 and T not a multiple of a 32-row tile, with and without packed segments; a masked key
// never matters (NaN in a segment no tile may see, and in another segment's rows of a visited tile);
// GQA equals MHA on k/v heads repeated by hand, bit for bit (dk/dv summed over the repeats in
// increasing h); two runs bitwise equal. fp32 within 1e-5 of each tensor's largest value (1e-4 for
// dqkv: sums over T keys in different orders). With dtype bfloat16: the fp32 attention of
// bf16-rounded q, k, v and dO, bit for bit. Skips without a GPU or the CUDA simulator.
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/bf16.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

using Outputs = std::vector<std::vector<float>>;

struct HeadCase {
  int B, T, NH, KVH, HS;
  bool segments;  // packed rows: nondecreasing segment ids, padding (0) at the end
};
std::string test_name(const HeadCase& c) {
  std::string name = shape_name({{"B", c.B}, {"T", c.T}, {"NH", c.NH}, {"KVH", c.KVH}, {"HS", c.HS}});
  return c.segments ? name + "_seg" : name;
}
void PrintTo(const HeadCase& c, std::ostream* os) { *os << test_name(c); }
size_t qkv_width(const HeadCase& c) { return static_cast<size_t>(c.NH + 2 * c.KVH) * c.HS; }

// qkv of the same attention as multi-head attention: each k/v head repeated for its query heads.
std::vector<float> repeat_kv(const std::vector<float>& qkv, const HeadCase& c) {
  const int G = c.NH / c.KVH, HS = c.HS, QKV = static_cast<int>(qkv_width(c)), C = c.NH * HS;
  std::vector<float> out;
  for (size_t r = 0; r < qkv.size() / QKV; ++r) {
    const float* row = qkv.data() + r * QKV;
    out.insert(out.end(), row, row + C);  // q
    for (int part = 0; part < 2; ++part)  // k, then v
      for (int h = 0; h < c.NH; ++h) {
        const float* src = row + C + (part * c.KVH + h / G) * HS;
        out.insert(out.end(), src, src + HS);
      }
  }
  return out;
}
// The transpose of repeat_kv on a gradient: a k/v head's entry sums its G query heads, h ascending.
std::vector<float> sum_repeats(const std::vector<float>& dmha, const HeadCase& c) {
  const int G = c.NH / c.KVH, HS = c.HS, C = c.NH * HS;
  std::vector<float> out;
  for (size_t r = 0; r < dmha.size() / (3 * C); ++r) {
    const float* row = dmha.data() + r * 3 * C;
    out.insert(out.end(), row, row + C);  // dq
    for (int part = 0; part < 2; ++part)
      for (int kv = 0; kv < c.KVH; ++kv)
        for (int d = 0; d < HS; ++d) {
          float acc = row[C + part * C + (kv * G) * HS + d];
          for (int g = 1; g < G; ++g) acc += row[C + part * C + (kv * G + g) * HS + d];
          out.push_back(acc);
        }
  }
  return out;
}

class CudaAttention : public ::testing::TestWithParam<HeadCase> {};

TEST_P(CudaAttention, MatchesCpuAndRepeatedKvMha) {
  SFTDP_REQUIRE_CUDA(ops);
  const HeadCase c = GetParam();
  const int B = c.B, T = c.T, NH = c.NH, KVH = c.KVH, HS = c.HS;
  const size_t BT = static_cast<size_t>(B) * T, nqkv = BT * qkv_width(c), nout = BT * NH * HS;
  const size_t nlse = static_cast<size_t>(B) * NH * T;
  const auto qkv = uniform(nqkv, 141, -2.f, 2.f), dout = uniform(nout, 142);
  const auto seg = packed_segments(B, T, 143);
  const int32_t* seg_host = c.segments ? seg.data() : nullptr;
  std::vector<float> out(nout), lse(nlse), dqkv(nqkv);
  cpu_ops().attention_fwd(out.data(), lse.data(), qkv.data(), seg_host, B, T, NH, KVH, HS);
  cpu_ops().attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), seg_host, B, T, NH, KVH, HS);

  DeviceBuffer<float> d_qkv(*ops, qkv), d_dout(*ops, dout), d_out(*ops, nout), d_lse(*ops, nlse), d_dqkv(*ops, nqkv);
  DeviceBuffer<int32_t> d_seg(*ops, seg);
  const int32_t* seg_dev = c.segments ? d_seg.get() : nullptr;
  const Outputs got = run_twice_same_bits([&] {
    d_out.poison();
    d_lse.poison();
    d_dqkv.poison();
    ops->attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), seg_dev, B, T, NH, KVH, HS);
    ops->attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), seg_dev, B, T, NH, KVH, HS);
    return Outputs{d_out.download(), d_lse.download(), d_dqkv.download()};
  });
  EXPECT_TRUE(close_rel(got[0], out, 1e-5));
  EXPECT_TRUE(close_rel(got[1], lse, 1e-5));
  EXPECT_TRUE(close_rel(got[2], dqkv, 1e-4));

  // The same attention as MHA (KVH = NH) on k/v repeated by hand: the same per-head computation,
  // bit for bit (the k/v gradients summed here as the GQA kernel sums them).
  const auto qkv_mha = repeat_kv(qkv, c);
  DeviceBuffer<float> m_qkv(*ops, qkv_mha), m_out(*ops, nout), m_lse(*ops, nlse), m_dqkv(*ops, qkv_mha.size());
  m_out.poison();
  m_lse.poison();
  m_dqkv.poison();
  ops->attention_fwd(m_out.get(), m_lse.get(), m_qkv.get(), seg_dev, B, T, NH, NH, HS);
  ops->attention_bwd(m_dqkv.get(), d_dout.get(), m_qkv.get(), m_out.get(), m_lse.get(), seg_dev, B, T, NH, NH, HS);
  EXPECT_TRUE(bitwise_equal(got[0], m_out.download()));
  EXPECT_TRUE(bitwise_equal(got[1], m_lse.download()));
  EXPECT_TRUE(bitwise_equal(got[2], sum_repeats(m_dqkv.download(), c)));
}
// HS 8..256: 1, 2, 4 and 8 slices of 32 columns (HS 9 and 18 partial ones), groups of 1 (MHA), 2, 3, 4,
// 8; T = 1 and 7 (a block of fewer warps), 65 and 130 (past a tile of 32 keys).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(HeadCase{1, 1, 2, 1, 8, false}, HeadCase{2, 7, 4, 2, 18, true},
                                           HeadCase{2, 64, 4, 4, 16, true}, HeadCase{2, 65, 8, 2, 64, true},
                                           HeadCase{1, 130, 4, 1, 128, false}, HeadCase{3, 33, 6, 2, 9, true},
                                           HeadCase{2, 17, 3, 3, 18, true}, HeadCase{1, 45, 8, 1, 64, true},
                                           HeadCase{1, 40, 2, 1, 256, true}),
                         NameFromParam());

// NaN in every q/k/v row of a first segment that fills whole tiles (rows 0..63), and in a last
// segment that does too (256..319): rows in between (segment 2) may see neither, so no output, lse or
// gradient of theirs may be NaN (key tiles before their segment, and past the diagonal, are never read).
TEST(CudaAttentionTiles, KeysNoTileMaySeeAreNeverRead) {
  SFTDP_REQUIRE_CUDA(ops);
  const int B = 1, T = 320, NH = 2, KVH = 1, HS = 8, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  auto qkv = uniform(static_cast<size_t>(T) * QKV, 61, -2.f, 2.f);
  std::vector<int32_t> seg(T, 2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int t = 0; t < T; ++t) {
    if (t < 64) seg[t] = 1;
    if (t >= 256) seg[t] = 3;
    if (t < 64 || t >= 256)
      for (int i = 0; i < QKV; ++i) qkv[static_cast<size_t>(t) * QKV + i] = nan;
  }
  const auto dout = uniform(static_cast<size_t>(T) * OC, 62);
  DeviceBuffer<float> d_qkv(*ops, qkv), d_dout(*ops, dout), d_out(*ops, static_cast<size_t>(T) * OC),
      d_lse(*ops, static_cast<size_t>(NH) * T), d_dqkv(*ops, qkv.size());
  DeviceBuffer<int32_t> d_seg(*ops, seg);
  ops->attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), d_seg.get(), B, T, NH, KVH, HS);
  ops->attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), d_seg.get(), B, T, NH, KVH, HS);
  const auto out = d_out.download(), lse = d_lse.download(), dqkv = d_dqkv.download();
  for (int t = 64; t < 256; ++t) {
    for (int i = 0; i < OC; ++i) ASSERT_TRUE(std::isfinite(out[static_cast<size_t>(t) * OC + i])) << t;
    for (int h = 0; h < NH; ++h) ASSERT_TRUE(std::isfinite(lse[static_cast<size_t>(h) * T + t])) << t;
    for (int i = 0; i < QKV; ++i) ASSERT_TRUE(std::isfinite(dqkv[static_cast<size_t>(t) * QKV + i])) << t;
  }
}

// A segment boundary inside a tile (rows 0..b-1 segment 1, the rest segment 2): the tiles holding
// the boundary are visited, and their segment-1 keys must still never enter a segment-2 row's sums.
// Segment 2's out, lse and dqkv rows are bitwise the same whether segment 1 holds random values or
// NaN (q, k, v and dO): a kernel that adds P·v with P = 0 for a masked key gets NaN (0·NaN). Head
// sizes 40 (a partial 32-column slice) and 200 (k and v, or q and dO, one tile at a time).
TEST(CudaAttentionTiles, KeysOfAnotherSegmentInAVisitedTileNeverMatter) {
  SFTDP_REQUIRE_CUDA(ops);
  struct Case {
    int T, NH, KVH, HS, boundary;
  };
  for (const Case c : {Case{100, 4, 2, 40, 41}, Case{70, 2, 1, 200, 37}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " HS=" + std::to_string(c.HS));
    const int B = 1, T = c.T, NH = c.NH, KVH = c.KVH, HS = c.HS, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
    std::vector<int32_t> seg(T);
    for (int t = 0; t < T; ++t) seg[t] = t < c.boundary ? 1 : 2;
    const auto qkv = uniform(static_cast<size_t>(T) * QKV, 71, -2.f, 2.f);
    const auto dout = uniform(static_cast<size_t>(T) * OC, 72);
    auto qkv_nan = qkv, dout_nan = dout;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < static_cast<size_t>(c.boundary) * QKV; ++i) qkv_nan[i] = nan;
    for (size_t i = 0; i < static_cast<size_t>(c.boundary) * OC; ++i) dout_nan[i] = nan;
    DeviceBuffer<int32_t> d_seg(*ops, seg);
    auto run = [&](const std::vector<float>& x, const std::vector<float>& g) {
      DeviceBuffer<float> d_qkv(*ops, x), d_dout(*ops, g), d_out(*ops, static_cast<size_t>(T) * OC),
          d_lse(*ops, static_cast<size_t>(NH) * T), d_dqkv(*ops, x.size());
      d_out.poison(), d_lse.poison(), d_dqkv.poison();
      ops->attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), d_seg.get(), B, T, NH, KVH, HS);
      ops->attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), d_seg.get(), B, T, NH, KVH,
                         HS);
      const auto out = d_out.download(), lse = d_lse.download(), dqkv = d_dqkv.download();
      Outputs seg2(3);  // segment 2's rows only
      seg2[0].assign(out.begin() + static_cast<size_t>(c.boundary) * OC, out.end());
      for (int h = 0; h < NH; ++h)
        seg2[1].insert(seg2[1].end(), lse.begin() + static_cast<size_t>(h) * T + c.boundary,
                       lse.begin() + static_cast<size_t>(h + 1) * T);
      seg2[2].assign(dqkv.begin() + static_cast<size_t>(c.boundary) * QKV, dqkv.end());
      return seg2;
    };
    const Outputs finite = run(qkv, dout), masked_nan = run(qkv_nan, dout_nan);
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(bitwise_equal(masked_nan[k], finite[k])) << "tensor " << k;
      for (const float x : finite[k]) ASSERT_TRUE(std::isfinite(x)) << "tensor " << k;
    }
  }
}

// dtype: bfloat16 (the cuda-bf16 table) at head sizes without tensor-core kernels (not 16..128 in
// steps of 16: those are test_cuda_attention_tc.cpp's): attention reads q, k, v and dO rounded to
// bf16, nothing else — bit for bit the fp32 table's attention on inputs rounded on the host
// (cpu::bf16_pack, to nearest even), within fp32 tolerance of the CPU twin on them, and not the fp32
// attention of the unrounded inputs (the rounding happens).
TEST(CudaAttentionBf16, IsTheFp32AttentionOfBf16RoundedInputs) {
  SFTDP_REQUIRE_CUDA(fp32);
  const Ops* bf16 = cuda_ops(GemmInputs::kBf16);
  ASSERT_NE(bf16, nullptr);
  for (const HeadCase c : {HeadCase{2, 65, 8, 2, 72, true}, HeadCase{1, 40, 2, 1, 256, false}}) {
    SCOPED_TRACE(test_name(c));
    const int B = c.B, T = c.T, NH = c.NH, KVH = c.KVH, HS = c.HS;
    const size_t BT = static_cast<size_t>(B) * T, nqkv = BT * qkv_width(c), nout = BT * NH * HS;
    const size_t nlse = static_cast<size_t>(B) * NH * T;
    const auto qkv = uniform(nqkv, 151, -2.f, 2.f), dout = uniform(nout, 152);
    const auto seg = packed_segments(B, T, 153);
    auto rounded = [](const std::vector<float>& x) {
      std::vector<uint16_t> bits(x.size());
      std::vector<float> r(x.size());
      cpu::bf16_pack(bits.data(), x.data(), x.size());
      cpu::bf16_unpack(r.data(), bits.data(), x.size());
      return r;
    };
    const auto qkv16 = rounded(qkv), dout16 = rounded(dout);
    DeviceBuffer<int32_t> d_seg(*fp32, seg);
    const int32_t* seg_dev = c.segments ? d_seg.get() : nullptr;
    auto run = [&](const Ops& ops, const std::vector<float>& q, const std::vector<float>& g) {
      DeviceBuffer<float> d_qkv(ops, q), d_dout(ops, g), d_out(ops, nout), d_lse(ops, nlse), d_dqkv(ops, nqkv);
      d_out.poison(), d_lse.poison(), d_dqkv.poison();
      ops.attention_fwd(d_out.get(), d_lse.get(), d_qkv.get(), seg_dev, B, T, NH, KVH, HS);
      ops.attention_bwd(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), seg_dev, B, T, NH, KVH, HS);
      return Outputs{d_out.download(), d_lse.download(), d_dqkv.download()};
    };
    const Outputs got = run(*bf16, qkv, dout), want = run(*fp32, qkv16, dout16), unrounded = run(*fp32, qkv, dout);
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(bitwise_equal(got[k], want[k])) << "tensor " << k;
      EXPECT_FALSE(close_rel(got[k], unrounded[k], 1e-4)) << "tensor " << k << ": inputs not rounded";
    }
    std::vector<float> out(nout), lse(nlse), dqkv(nqkv);
    const int32_t* seg_host = c.segments ? seg.data() : nullptr;
    cpu_ops().attention_fwd(out.data(), lse.data(), qkv16.data(), seg_host, B, T, NH, KVH, HS);
    cpu_ops().attention_bwd(dqkv.data(), dout16.data(), qkv16.data(), out.data(), lse.data(), seg_host, B, T, NH, KVH,
                            HS);
    EXPECT_TRUE(close_rel(got[0], out, 1e-5));
    EXPECT_TRUE(close_rel(got[1], lse, 1e-5));
    EXPECT_TRUE(close_rel(got[2], dqkv, 1e-4));
  }
}

}  // namespace
}  // namespace sftdp::test
