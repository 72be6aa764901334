// tests/kernels/test_attention.cpp — CPU attention twin: a hand case, the forward against an
// fp64 reference (with and without packed segments), the backward against fp64 finite
// differences, that a cross-segment pair has exactly zero probability and passes exactly zero
// gradient, and bitwise determinism across thread counts; for grouped-query attention (KVH < NH,
// any HS) the same against a reference that repeats each k/v head over its query heads (as HF's
// repeat_kv) and runs the multi-head reference, and that KVH == NH is multi-head attention.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/attention.h"
#include "kernels/test_cuda_util.h"

namespace sftdp::test {
namespace {

// fp64 reference: qkv rows are [q | k | v], head h is the HS-slice h of each.
std::vector<double> attention_ref(const std::vector<double>& qkv, const int32_t* seg, int B,
                                  int T, int C, int NH) {
  const int HS = C / NH;
  std::vector<double> out(size_t(B) * T * C, 0.0), p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[(size_t(b) * T + t) * 3 * C + h * HS];
        double max = -1e300, sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const bool visible = !seg || seg[b * T + t2] == seg[b * T + t];
          const double* k = &qkv[(size_t(b) * T + t2) * 3 * C + C + h * HS];
          double s = 0;
          for (int i = 0; i < HS; ++i) s += q[i] * k[i];
          p[t2] = visible ? s / std::sqrt(double(HS)) : -INFINITY;
          max = std::max(max, p[t2]);
        }
        for (int t2 = 0; t2 <= t; ++t2) sum += (p[t2] = std::exp(p[t2] - max));
        for (int t2 = 0; t2 <= t; ++t2) {
          const double* v = &qkv[(size_t(b) * T + t2) * 3 * C + 2 * C + h * HS];
          for (int i = 0; i < HS; ++i) out[(size_t(b) * T + t) * C + h * HS + i] += p[t2] / sum * v[i];
        }
      }
  return out;
}

// GQA qkv rows [q (NH·HS) | k (KVH·HS) | v (KVH·HS)] -> multi-head rows [q | k | v], each
// NH·HS wide, k/v head j repeated for query heads j·G .. j·G+G-1 (G = NH/KVH).
std::vector<double> repeat_kv(const std::vector<double>& qkv, int BT, int NH, int KVH, int HS) {
  const int G = NH / KVH, C = NH * HS;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  std::vector<double> mha(size_t(BT) * 3 * C);
  for (int bt = 0; bt < BT; ++bt) {
    const double* src = &qkv[bt * QKV];
    double* dst = &mha[size_t(bt) * 3 * C];
    for (int c = 0; c < C; ++c) dst[c] = src[c];
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < HS; ++i) {
        dst[C + h * HS + i] = src[C + (h / G) * HS + i];
        dst[2 * C + h * HS + i] = src[C + KVH * HS + (h / G) * HS + i];
      }
  }
  return mha;
}
std::vector<double> gqa_ref(const std::vector<double>& qkv, const int32_t* seg, int B, int T, int NH,
                            int KVH, int HS) {
  return attention_ref(repeat_kv(qkv, B * T, NH, KVH, HS), seg, B, T, NH * HS, NH);
}

struct Result {
  std::vector<float> out, att, dqkv;
};
Result run_gqa(const std::vector<float>& qkv, const int32_t* seg, const std::vector<float>& dout,
               int B, int T, int NH, int KVH, int HS) {
  Result r{std::vector<float>(size_t(B) * T * NH * HS, 7.f), std::vector<float>(size_t(B) * NH * T * T, 5.f),
           std::vector<float>(qkv.size(), 9.f)};  // outputs start as garbage: all are overwritten
  std::vector<float> datt(r.att.size());
  cpu::attention_fwd(r.out.data(), r.att.data(), qkv.data(), seg, B, T, NH, KVH, HS);
  cpu::attention_bwd(r.dqkv.data(), datt.data(), dout.data(), qkv.data(), r.att.data(), B, T, NH, KVH, HS);
  return r;
}
// Multi-head attention (GPT-2): KVH = NH, HS = C/NH.
Result run_cpu(const std::vector<float>& qkv, const int32_t* seg, const std::vector<float>& dout,
               int B, int T, int C, int NH) {
  return run_gqa(qkv, seg, dout, B, T, NH, NH, C / NH);
}

TEST(Attention, HandCase) {
  const float k1 = std::sqrt(2.f) * std::log(3.f);  // q1·k1/√2 = ln 3: probabilities 1/4, 3/4
  const std::vector<float> qkv = {0.3f, -0.2f, 0, 0, 4, 0,   // t=0: q0 k0 v0
                                  1, 0, k1, 0, 0, 8};        // t=1: q1 k1 v1
  std::vector<float> out(4), att(4);
  cpu::attention_fwd(out.data(), att.data(), qkv.data(), nullptr, 1, 2, 1, 1, 2);
  EXPECT_TRUE(allclose(to_f64(att), {1, 0, 0.25, 0.75}, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(to_f64(out), {4, 0, 1, 6}, 1e-5, 1e-6));
}

TEST(Attention, ForwardMatchesFp64Reference) {
  const int B = 2, T = 9, C = 12, NH = 3;
  const auto qkv = uniform(size_t(B) * T * 3 * C, 81, -2.f, 2.f);
  const std::vector<int32_t> seg = {1, 1, 1, 2, 2, 3, 3, 3, 0,  0, 1, 1, 1, 1, 2, 2, 0, 0};
  for (const int32_t* s : {static_cast<const int32_t*>(nullptr), seg.data()}) {
    std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T, 5.f);
    cpu::attention_fwd(out.data(), att.data(), qkv.data(), s, B, T, NH, NH, C / NH);
    EXPECT_TRUE(allclose(to_f64(out), attention_ref(to_f64(qkv), s, B, T, C, NH), 1e-5, 1e-5))
        << (s ? "segments" : "no segments");
    for (int bh = 0; bh < B * NH; ++bh)  // above the diagonal: exactly 0
      for (int t = 0; t < T; ++t)
        for (int t2 = t + 1; t2 < T; ++t2) ASSERT_EQ(att[(size_t(bh) * T + t) * T + t2], 0.f);
  }
}

void check_backward(const int32_t* seg) {
  const int B = 2, T = 5, C = 6, NH = 2;
  const auto qkv = uniform(size_t(B) * T * 3 * C, 91, -1.5f, 1.5f);
  const auto dout = uniform(size_t(B) * T * C, 92);
  const Result r = run_cpu(qkv, seg, dout, B, T, C, NH);
  auto qkv64 = to_f64(qkv);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, attention_ref(qkv64, seg, B, T, C, NH)); };
  EXPECT_TRUE(allclose(to_f64(r.dqkv), central_diff(qkv64, loss), 1e-5, 1e-4));
}
TEST(Attention, BackwardMatchesFiniteDifferences) { check_backward(nullptr); }
TEST(Attention, BackwardWithSegmentsMatchesFiniteDifferences) {
  const std::vector<int32_t> seg = {1, 1, 2, 2, 2, 1, 2, 1, 2, 0};  // interleaved in row 1
  check_backward(seg.data());
}

// Row 0 packs segments 1 | 2 | padding 0. Loss only on segment 2: nothing of segment 1 or of
// the padding may receive gradient, and no probability may cross segments.
TEST(Attention, SegmentsBlockProbabilityAndGradientExactly) {
  const int B = 1, T = 8, C = 8, NH = 2;
  const std::vector<int32_t> seg = {1, 1, 1, 2, 2, 2, 0, 0};
  const auto qkv = uniform(size_t(T) * 3 * C, 101, -2.f, 2.f);
  std::vector<float> dout(size_t(T) * C, 0.f);
  const auto noise = uniform(dout.size(), 102);
  for (int t = 3; t < 6; ++t)
    for (int c = 0; c < C; ++c) dout[size_t(t) * C + c] = noise[size_t(t) * C + c];
  const Result r = run_cpu(qkv, seg.data(), dout, B, T, C, NH);
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t)
      for (int t2 = 0; t2 <= t; ++t2) {
        const float a = r.att[(size_t(h) * T + t) * T + t2];
        if (seg[t2] != seg[t]) EXPECT_EQ(a, 0.f) << "h" << h << " t" << t << " t2" << t2;
        else EXPECT_GT(a, 0.f);
      }
  for (int t = 0; t < T; ++t) {
    if (seg[t] == 2) continue;
    for (int c = 0; c < 3 * C; ++c) EXPECT_EQ(r.dqkv[size_t(t) * 3 * C + c], 0.f) << "t" << t << " c" << c;
  }
}

TEST(Attention, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int B = 4, T = 64, C = 256, NH = 4;
  const auto qkv = uniform(size_t(B) * T * 3 * C, 111);
  const auto dout = uniform(size_t(B) * T * C, 112);
  std::vector<int32_t> seg(B * T);
  for (int i = 0; i < B * T; ++i) seg[i] = (i % T) / 20;  // segments of 20 tokens
  auto run = [&](int threads) {
    Result r;
    with_threads(threads, [&] { r = run_cpu(qkv, seg.data(), dout, B, T, C, NH); });
    r.out.insert(r.out.end(), r.att.begin(), r.att.end());
    r.out.insert(r.out.end(), r.dqkv.begin(), r.dqkv.end());
    return r.out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

// Softmax probabilities of the float qkv in fp64, rounded once: (B,NH,T,T), masked entries 0.
std::vector<float> probabilities_fp64(const std::vector<float>& qkv, const int32_t* seg, int B, int T, int C,
                                      int NH) {
  const int HS = C / NH;
  std::vector<float> att(size_t(B) * NH * T * T, 0.f);
  std::vector<double> s(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const float* q = &qkv[(size_t(b) * T + t) * 3 * C + h * HS];
        double max = -INFINITY, sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* k = &qkv[(size_t(b) * T + t2) * 3 * C + C + h * HS];
          double dot = 0;
          for (int i = 0; i < HS; ++i) dot += double(q[i]) * k[i];
          const bool visible = !seg || seg[b * T + t2] == seg[b * T + t];
          s[t2] = visible ? dot / std::sqrt(double(HS)) : -INFINITY;
          max = std::max(max, s[t2]);
        }
        for (int t2 = 0; t2 <= t; ++t2) sum += std::exp(s[t2] - max);
        float* row = &att[((size_t(b) * NH + h) * T + t) * T];
        for (int t2 = 0; t2 <= t; ++t2) row[t2] = static_cast<float>(std::exp(s[t2] - max) / sum);
      }
  return att;
}

// The CUDA test's probability comparison (test_cuda_gemm_vs_cpu.cpp: element-wise, atol kSoftmaxAtol
// + rtol kSoftmaxRtol) is sound: on that test's own inputs this twin (fp32 dots over HS, a
// sequential fp32 sum over <= T terms) stays within half of it of fp64, leaving the other half for
// the CUDA twin (fp32 cuBLASLt dots, never TF32; warp-tree sums).
TEST(Attention, CudaTestToleranceIsSound) {
  struct Shape {
    int B, T, C, NH;
    bool segments;
  };
  for (const Shape& c : {Shape{1, 1, 8, 2, false}, Shape{2, 7, 12, 3, true}, Shape{2, 64, 64, 4, true},
                         Shape{1, 130, 96, 2, false}, Shape{3, 33, 48, 4, true}}) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " C=" + std::to_string(c.C));
    const size_t BTC = size_t(c.B) * c.T * c.C;
    const auto qkv = uniform(3 * BTC, 71);
    const auto seg = packed_segments(c.B, c.T, 73);
    const int32_t* s = c.segments ? seg.data() : nullptr;
    std::vector<float> out(BTC), att(size_t(c.B) * c.NH * c.T * c.T);
    cpu::attention_fwd(out.data(), att.data(), qkv.data(), s, c.B, c.T, c.NH, c.NH, c.C / c.NH);
    EXPECT_TRUE(allclose(att, probabilities_fp64(qkv, s, c.B, c.T, c.C, c.NH), kSoftmaxAtol / 2, kSoftmaxRtol / 2));
  }
}

// ---- grouped-query attention (KVH < NH; HS free, not C/NH) ----

struct GqaShape {
  int B, T, NH, KVH, HS;
};
std::string shape_str(const GqaShape& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " NH=" + std::to_string(c.NH) +
         " KVH=" + std::to_string(c.KVH) + " HS=" + std::to_string(c.HS);
}
size_t qkv_size(const GqaShape& c) { return size_t(c.B) * c.T * (c.NH + 2 * c.KVH) * c.HS; }

TEST(Attention, GroupedQueryForwardMatchesFp64Reference) {
  for (const GqaShape& c : {GqaShape{2, 9, 4, 2, 5}, GqaShape{1, 12, 6, 1, 7}, GqaShape{2, 6, 8, 2, 16}}) {
    SCOPED_TRACE(shape_str(c));
    const auto qkv = uniform(qkv_size(c), 121, -2.f, 2.f);
    const auto seg = packed_segments(c.B, c.T, 122);
    for (const int32_t* s : {static_cast<const int32_t*>(nullptr), seg.data()}) {
      const Result r = run_gqa(qkv, s, std::vector<float>(size_t(c.B) * c.T * c.NH * c.HS, 0.f), c.B, c.T,
                               c.NH, c.KVH, c.HS);
      EXPECT_TRUE(allclose(to_f64(r.out), gqa_ref(to_f64(qkv), s, c.B, c.T, c.NH, c.KVH, c.HS), 1e-5, 1e-5))
          << (s ? "segments" : "no segments");
      for (int bh = 0; bh < c.B * c.NH; ++bh)  // above the diagonal: exactly 0
        for (int t = 0; t < c.T; ++t)
          for (int t2 = t + 1; t2 < c.T; ++t2) ASSERT_EQ(r.att[(size_t(bh) * c.T + t) * c.T + t2], 0.f);
    }
  }
}

// dqkv starts as garbage (overwritten); a k/v head's gradient sums those of its query heads.
void check_gqa_backward(const GqaShape& c, const int32_t* seg) {
  SCOPED_TRACE(shape_str(c));
  const auto qkv = uniform(qkv_size(c), 131, -1.5f, 1.5f);
  const auto dout = uniform(size_t(c.B) * c.T * c.NH * c.HS, 132);
  const Result r = run_gqa(qkv, seg, dout, c.B, c.T, c.NH, c.KVH, c.HS);
  auto qkv64 = to_f64(qkv);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, gqa_ref(qkv64, seg, c.B, c.T, c.NH, c.KVH, c.HS)); };
  EXPECT_TRUE(allclose(to_f64(r.dqkv), central_diff(qkv64, loss), 1e-5, 1e-4));
}
TEST(Attention, GroupedQueryBackwardMatchesFiniteDifferences) {
  check_gqa_backward({2, 5, 4, 2, 3}, nullptr);
  check_gqa_backward({1, 6, 3, 1, 4}, nullptr);
}
TEST(Attention, GroupedQueryBackwardWithSegmentsMatchesFiniteDifferences) {
  const std::vector<int32_t> seg = {1, 1, 2, 2, 2, 1, 2, 1, 2, 0};  // interleaved in row 1
  check_gqa_backward({2, 5, 4, 2, 3}, seg.data());
  check_gqa_backward({2, 5, 6, 3, 2}, seg.data());
}

// The kernel on GQA rows against the same kernel, as multi-head attention, on the rows with each
// k/v head repeated over its query heads: the forward and dq are the same computation (bitwise);
// dk and dv are the sums of the repeated heads' gradients.
TEST(Attention, GroupedQueryEqualsMultiHeadOnRepeatedKeysAndValues) {
  const int B = 2, T = 17, NH = 6, KVH = 2, HS = 12, G = NH / KVH, C = NH * HS;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv = uniform(size_t(B) * T * QKV, 141, -2.f, 2.f);
  const auto dout = uniform(size_t(B) * T * C, 142);
  const auto seg = packed_segments(B, T, 143);
  const auto rep64 = repeat_kv(to_f64(qkv), B * T, NH, KVH, HS);
  const std::vector<float> rep(rep64.begin(), rep64.end());  // exact: copies of floats
  const Result g = run_gqa(qkv, seg.data(), dout, B, T, NH, KVH, HS);
  const Result m = run_gqa(rep, seg.data(), dout, B, T, NH, NH, HS);
  EXPECT_TRUE(bitwise_equal(g.out, m.out));
  EXPECT_TRUE(bitwise_equal(g.att, m.att));
  std::vector<float> dq_g, dq_m;
  std::vector<double> dkv_g, dkv_sum;
  for (int bt = 0; bt < B * T; ++bt) {
    dq_g.insert(dq_g.end(), &g.dqkv[bt * QKV], &g.dqkv[bt * QKV + C]);
    dq_m.insert(dq_m.end(), &m.dqkv[size_t(bt) * 3 * C], &m.dqkv[size_t(bt) * 3 * C + C]);
    for (int part = 1; part <= 2; ++part)  // k, then v
      for (int j = 0; j < KVH; ++j)
        for (int i = 0; i < HS; ++i) {
          dkv_g.push_back(g.dqkv[bt * QKV + C + size_t(part - 1) * KVH * HS + j * HS + i]);
          double sum = 0;
          for (int h = j * G; h < (j + 1) * G; ++h) sum += m.dqkv[size_t(bt) * 3 * C + part * C + h * HS + i];
          dkv_sum.push_back(sum);
        }
  }
  EXPECT_TRUE(bitwise_equal(dq_g, dq_m));
  EXPECT_TRUE(allclose(dkv_g, dkv_sum, 1e-6, 1e-5));
}

TEST(Attention, GroupedQueryIsBitwiseIdenticalForOneAndTwoThreads) {
  const int B = 2, T = 64, NH = 8, KVH = 2, HS = 32;
  const auto qkv = uniform(size_t(B) * T * (NH + 2 * KVH) * HS, 151);
  const auto dout = uniform(size_t(B) * T * NH * HS, 152);
  const auto seg = packed_segments(B, T, 153);
  auto run = [&](int threads) {
    Result r;
    with_threads(threads, [&] { r = run_gqa(qkv, seg.data(), dout, B, T, NH, KVH, HS); });
    r.out.insert(r.out.end(), r.att.begin(), r.att.end());
    r.out.insert(r.out.end(), r.dqkv.begin(), r.dqkv.end());
    return r.out;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
