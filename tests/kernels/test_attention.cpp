// tests/kernels/test_attention.cpp — the CPU attention twin, which keeps only the output and each
// row's log-sum-exp (kernels/attention.h): a hand case; output, lse and every input gradient
// against a float64 reference of causal grouped-query attention with packed segments (≤ 1e-6 of
// the largest value), at T = 1, T not a multiple of the 128-row tile or the 256-key chunk, HS up to 256, segment
// boundaries inside tiles, and T = 8192; against the T×T attention it replaces; fp64 finite
// differences; exact segment isolation; tiles above the diagonal and before a tile's segments are
// never read (NaN there changes nothing); GQA equals multi-head attention on repeated k/v; the bits
// do not depend on the thread count; its scratch is linear in T.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/attention.h"
#include "kernels/attention_reference.h"
#include "kernels/test_cuda_util.h"

namespace sftdp::test {
namespace {

using Shape = AttentionShape;

struct Result {
  std::vector<float> out, lse, dqkv;
};
// Outputs start as garbage: every element is overwritten.
Result run(const std::vector<float>& qkv, const int32_t* seg, const std::vector<float>& dout, const Shape& c) {
  Result r{std::vector<float>(out_size(c), 7.f), std::vector<float>(size_t(c.B) * c.NH * c.T, 5.f),
           std::vector<float>(qkv.size(), 9.f)};
  cpu::attention_fwd(r.out.data(), r.lse.data(), qkv.data(), seg, c.B, c.T, c.NH, c.KVH, c.HS);
  cpu::attention_bwd(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), seg, c.B, c.T, c.NH, c.KVH,
                     c.HS);
  return r;
}

std::vector<float> rounded(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Whole-tensor: max |got − ref| / max |ref| for out, lse and dqkv.
void expect_matches_reference(const Shape& c, const int32_t* seg, double rel, uint64_t seed) {
  SCOPED_TRACE(shape_str(c) + (seg ? " segments" : " one sequence per row"));
  const auto qkv = uniform(qkv_size(c), seed, -2.f, 2.f);
  const auto dout = uniform(out_size(c), seed + 1);
  const Result r = run(qkv, seg, dout, c);
  const Ref ref = reference(to_f64(qkv), to_f64(dout), seg, c);
  EXPECT_LE(max_rel_diff(r.out, rounded(ref.out)), rel);
  EXPECT_LE(max_rel_diff(r.lse, rounded(ref.lse)), rel);
  EXPECT_LE(max_rel_diff(r.dqkv, rounded(ref.dqkv)), rel);
}

TEST(Attention, HandCase) {
  const float k1 = std::sqrt(2.f) * std::log(3.f);  // q1·k1/√2 = ln 3: probabilities 1/4, 3/4
  const std::vector<float> qkv = {0.3f, -0.2f, 0, 0, 4, 0,   // t=0: q0 k0 v0
                                  1, 0, k1, 0, 0, 8};        // t=1: q1 k1 v1
  std::vector<float> out(4), lse(2);
  cpu::attention_fwd(out.data(), lse.data(), qkv.data(), nullptr, 1, 2, 1, 1, 2);
  EXPECT_TRUE(allclose(to_f64(out), {4, 0, 1, 6}, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(to_f64(lse), {0, std::log(4.0)}, 1e-6, 1e-6));  // log(e^0 + e^ln3)
}

TEST(Attention, MatchesFp64ReferenceWithAndWithoutSegments) {
  for (const Shape& c :
       {Shape{2, 9, 3, 3, 4}, Shape{2, 9, 4, 2, 5}, Shape{1, 12, 6, 1, 7}, Shape{2, 6, 8, 2, 16}, Shape{3, 1, 2, 1, 8},
        Shape{2, 65, 2, 1, 8}, Shape{1, 130, 4, 2, 16}, Shape{1, 200, 2, 2, 256}, Shape{1, 300, 3, 1, 64}}) {
    const auto seg = packed_segments(c.B, c.T, 7);  // boundaries anywhere, padding 0 at the end
    expect_matches_reference(c, nullptr, 1e-6, 21);
    expect_matches_reference(c, seg.data(), 1e-6, 23);
  }
}

// Long rows: 8192 tokens, one run and a packed row (segments of 300..3000 tokens, boundaries inside
// tiles, a padding tail). Sums of thousands of terms, still within 1e-6 of fp64.
TEST(Attention, MatchesFp64ReferenceAtT8192) {
  const Shape c{1, 8192, 2, 1, 8};
  std::vector<int32_t> seg(c.T);
  const int cuts[] = {0, 300, 1331, 4000, 7001, 7900};
  for (int t = 0, s = 0; t < c.T; ++t) {
    while (s + 1 < 6 && t >= cuts[s + 1]) ++s;
    seg[t] = s == 5 ? 0 : s + 1;
  }
  expect_matches_reference(c, nullptr, 1e-6, 31);
  expect_matches_reference(c, seg.data(), 1e-6, 33);
}

// The T×T attention this twin replaced (probabilities kept, fp32 row softmax), in plain loops.
Result previous_attention(const std::vector<float>& qkv, const int32_t* seg, const std::vector<float>& dout,
                          const Shape& c) {
  const int G = c.NH / c.KVH, HS = c.HS, T = c.T;
  const size_t QKV = size_t(c.NH + 2 * c.KVH) * HS, OC = size_t(c.NH) * HS;
  const size_t ko = size_t(c.NH) * HS, vo = size_t(c.NH + c.KVH) * HS;
  const float scale = 1.f / std::sqrt(float(HS));
  Result r{std::vector<float>(out_size(c), 0.f), {}, std::vector<float>(qkv.size(), 0.f)};
  std::vector<float> att(size_t(T) * T), datt(size_t(T) * T);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.NH; ++h) {
      auto x = [&](int t, size_t off, int i) { return qkv[(size_t(b) * T + t) * QKV + off + i]; };
      const size_t qo = size_t(h) * HS, kvo = size_t(h / G) * HS;
      for (int t = 0; t < T; ++t) {
        float* a = &att[size_t(t) * T];
        float mx = -INFINITY, sum = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          float s = 0.f;
          for (int i = 0; i < HS; ++i) s += x(t, qo, i) * x(t2, ko + kvo, i);
          a[t2] = (!seg || seg[b * T + t2] == seg[b * T + t]) ? s * scale : -INFINITY;
          mx = std::max(mx, a[t2]);
        }
        for (int t2 = 0; t2 <= t; ++t2) sum += (a[t2] = std::exp(a[t2] - mx));
        for (int t2 = 0; t2 <= t; ++t2) {
          a[t2] /= sum;
          for (int i = 0; i < HS; ++i) r.out[(size_t(b) * T + t) * OC + qo + i] += a[t2] * x(t2, vo + kvo, i);
        }
      }
      for (int t = 0; t < T; ++t) {
        const float* g = &dout[(size_t(b) * T + t) * OC + qo];
        float dot = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          float d = 0.f;
          for (int i = 0; i < HS; ++i) d += g[i] * x(t2, vo + kvo, i);
          datt[size_t(t) * T + t2] = d;
          dot += att[size_t(t) * T + t2] * d;
        }
        for (int t2 = 0; t2 <= t; ++t2) {
          const float p = att[size_t(t) * T + t2], ds = p * (datt[size_t(t) * T + t2] - dot) * scale;
          for (int i = 0; i < HS; ++i) {
            r.dqkv[(size_t(b) * T + t) * QKV + qo + i] += ds * x(t2, ko + kvo, i);
            r.dqkv[(size_t(b) * T + t2) * QKV + ko + kvo + i] += ds * x(t, qo, i);
            r.dqkv[(size_t(b) * T + t2) * QKV + vo + kvo + i] += p * g[i];
          }
        }
      }
    }
  return r;
}

TEST(Attention, AgreesWithTheTxTAttentionItReplaced) {
  for (const Shape& c : {Shape{2, 70, 4, 4, 16}, Shape{2, 100, 6, 2, 12}}) {
    SCOPED_TRACE(shape_str(c));
    const auto qkv = uniform(qkv_size(c), 41, -2.f, 2.f);
    const auto dout = uniform(out_size(c), 42);
    const auto seg = packed_segments(c.B, c.T, 43);
    for (const int32_t* s : {static_cast<const int32_t*>(nullptr), seg.data()}) {
      const Result now = run(qkv, s, dout, c), before = previous_attention(qkv, s, dout, c);
      EXPECT_LE(max_rel_diff(now.out, before.out), 1e-6);
      EXPECT_LE(max_rel_diff(now.dqkv, before.dqkv), 1e-6);
    }
  }
}

void check_finite_differences(const Shape& c, const int32_t* seg) {
  SCOPED_TRACE(shape_str(c));
  const auto qkv = uniform(qkv_size(c), 131, -1.5f, 1.5f);
  const auto dout = uniform(out_size(c), 132);
  const Result r = run(qkv, seg, dout, c);
  auto qkv64 = to_f64(qkv);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, reference(qkv64, {}, seg, c).out); };
  EXPECT_TRUE(allclose(to_f64(r.dqkv), central_diff(qkv64, loss), 1e-5, 1e-4));
}
TEST(Attention, BackwardMatchesFiniteDifferences) {
  check_finite_differences({2, 5, 2, 2, 3}, nullptr);
  check_finite_differences({2, 5, 4, 2, 3}, nullptr);
  check_finite_differences({1, 6, 3, 1, 4}, nullptr);
  const std::vector<int32_t> seg = {1, 1, 2, 2, 2, 1, 2, 1, 2, 0};  // interleaved in row 1
  check_finite_differences({2, 5, 2, 2, 3}, seg.data());
  check_finite_differences({2, 5, 6, 3, 2}, seg.data());
}

// Row 0 packs segments 1 | 2 | padding 0. Loss only on segment 2: nothing of segment 1 or of the
// padding may receive gradient, and changing segment 1's q, k, v changes no bit of segment 2.
TEST(Attention, SegmentsAreIsolatedExactly) {
  const Shape c{1, 8, 2, 2, 4};
  const std::vector<int32_t> seg = {1, 1, 1, 2, 2, 2, 0, 0};
  const size_t QKV = 3 * 8;
  auto qkv = uniform(qkv_size(c), 101, -2.f, 2.f);
  std::vector<float> dout(out_size(c), 0.f);
  const auto noise = uniform(dout.size(), 102);
  for (int t = 3; t < 6; ++t)
    for (int i = 0; i < 8; ++i) dout[size_t(t) * 8 + i] = noise[size_t(t) * 8 + i];
  const Result r = run(qkv, seg.data(), dout, c);
  for (int t = 0; t < c.T; ++t) {
    if (seg[t] == 2) continue;
    for (size_t i = 0; i < QKV; ++i) EXPECT_EQ(r.dqkv[t * QKV + i], 0.f) << "t" << t << " i" << i;
  }
  for (int t = 0; t < 3; ++t)
    for (size_t i = 0; i < QKV; ++i) qkv[t * QKV + i] += 1.f;
  const Result moved = run(qkv, seg.data(), dout, c);
  for (int t = 3; t < 6; ++t)
    for (int i = 0; i < 8; ++i) EXPECT_EQ(moved.out[size_t(t) * 8 + i], r.out[size_t(t) * 8 + i]) << t;
}

// Tiles never read what they may not see: keys past their last row (the causal triangle) or before
// their rows' first visible position (earlier segments). NaN in segments 1 and 3 must not reach
// segment 2's outputs or gradients.
TEST(Attention, SkippedTilesAreNeverRead) {
  const Shape c{1, 320, 2, 1, 8};
  const size_t QKV = size_t(c.NH + 2 * c.KVH) * c.HS;
  auto qkv = uniform(qkv_size(c), 61, -2.f, 2.f);
  std::vector<int32_t> seg(c.T, 2);
  for (int t = 0; t < 128; ++t) seg[t] = 1;    // segment 1 is exactly the first 128-row tile
  for (int t = 256; t < c.T; ++t) seg[t] = 3;  // segment 3 exactly the last
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int t = 0; t < 128; ++t)  // NaN in all of segment 1, which no later tile may see
    for (size_t i = 0; i < QKV; ++i) qkv[t * QKV + i] = nan;
  for (int t = 256; t < c.T; ++t)  // and in the last tile, which no earlier tile may see
    for (size_t i = 0; i < QKV; ++i) qkv[t * QKV + i] = nan;
  const auto dout = uniform(out_size(c), 62);
  const Result r = run(qkv, seg.data(), dout, c);
  const int OC = c.NH * c.HS;
  for (int t = 128; t < 256; ++t) {
    for (int i = 0; i < OC; ++i) ASSERT_TRUE(std::isfinite(r.out[size_t(t) * OC + i])) << "out t" << t;
    for (int h = 0; h < c.NH; ++h) ASSERT_TRUE(std::isfinite(r.lse[size_t(h) * c.T + t])) << "lse t" << t;
    for (size_t i = 0; i < QKV; ++i) ASSERT_TRUE(std::isfinite(r.dqkv[t * QKV + i])) << "dqkv t" << t;
  }
}

// The kernel on GQA rows against the same kernel, as multi-head attention, on the rows with each
// k/v head repeated over its query heads: the forward, lse and dq are the same computation
// (bitwise); dk and dv are the sums of the repeated heads' gradients.
TEST(Attention, GroupedQueryEqualsMultiHeadOnRepeatedKeysAndValues) {
  const int B = 2, T = 77, NH = 6, KVH = 2, HS = 12, G = NH / KVH, C = NH * HS;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv = uniform(size_t(B) * T * QKV, 141, -2.f, 2.f);
  const auto dout = uniform(size_t(B) * T * C, 142);
  const auto seg = packed_segments(B, T, 143);
  std::vector<float> rep(size_t(B) * T * 3 * C);  // [q | k repeated | v repeated], exact copies
  for (int bt = 0; bt < B * T; ++bt)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < HS; ++i) {
        rep[size_t(bt) * 3 * C + h * HS + i] = qkv[bt * QKV + h * HS + i];
        rep[size_t(bt) * 3 * C + C + h * HS + i] = qkv[bt * QKV + C + (h / G) * HS + i];
        rep[size_t(bt) * 3 * C + 2 * C + h * HS + i] = qkv[bt * QKV + C + KVH * HS + (h / G) * HS + i];
      }
  const Result g = run(qkv, seg.data(), dout, {B, T, NH, KVH, HS});
  const Result m = run(rep, seg.data(), dout, {B, T, NH, NH, HS});
  EXPECT_TRUE(bitwise_equal(g.out, m.out));
  EXPECT_TRUE(bitwise_equal(g.lse, m.lse));
  std::vector<float> dq_g, dq_m, dkv_g, dkv_sum;
  for (int bt = 0; bt < B * T; ++bt) {
    dq_g.insert(dq_g.end(), &g.dqkv[bt * QKV], &g.dqkv[bt * QKV + C]);
    dq_m.insert(dq_m.end(), &m.dqkv[size_t(bt) * 3 * C], &m.dqkv[size_t(bt) * 3 * C + C]);
    for (int part = 1; part <= 2; ++part)  // k, then v
      for (int j = 0; j < KVH; ++j)
        for (int i = 0; i < HS; ++i) {
          dkv_g.push_back(g.dqkv[bt * QKV + C + size_t(part - 1) * KVH * HS + j * HS + i]);
          // repeat_kv's transpose: the first head's gradient, then the others added in increasing h
          float sum = m.dqkv[size_t(bt) * 3 * C + part * C + j * G * HS + i];
          for (int h = j * G + 1; h < (j + 1) * G; ++h) sum += m.dqkv[size_t(bt) * 3 * C + part * C + h * HS + i];
          dkv_sum.push_back(sum);
        }
  }
  EXPECT_TRUE(bitwise_equal(dq_g, dq_m));
  EXPECT_TRUE(bitwise_equal(dkv_g, dkv_sum));
}

TEST(Attention, IsBitwiseIdenticalForOneAndTwoThreads) {
  for (const Shape& c : {Shape{4, 150, 4, 4, 64}, Shape{2, 200, 8, 2, 32}}) {
    SCOPED_TRACE(shape_str(c));
    const auto qkv = uniform(qkv_size(c), 111);
    const auto dout = uniform(out_size(c), 112);
    const auto seg = packed_segments(c.B, c.T, 113);
    auto bits = [&](int threads) {
      Result r;
      with_threads(threads, [&] { r = run(qkv, seg.data(), dout, c); });
      r.out.insert(r.out.end(), r.lse.begin(), r.lse.end());
      r.out.insert(r.out.end(), r.dqkv.begin(), r.dqkv.end());
      return r.out;
    };
    EXPECT_TRUE(bitwise_equal(bits(1), bits(2)));
  }
}

TEST(Attention, ScratchIsLinearInT) {
  auto bytes = [](int T) { return cpu::attention_scratch_bytes(1, T, 9, 3, 64, 2); };
  EXPECT_GT(bytes(2048), bytes(1024));
  EXPECT_EQ(bytes(4096) - bytes(2048), 2 * (bytes(2048) - bytes(1024)));  // a + b·T: no T² term
  EXPECT_LT(bytes(1024), size_t(8) << 20);  // smollm2-135m's heads at 1k tokens: a few MiB, not T² per head
}

}  // namespace
}  // namespace sftdp::test
