// tests/kernels/test_attention.cpp — CPU attention twin: a hand case, the forward against an
// fp64 reference (with and without packed segments), the backward against fp64 finite
// differences, that a cross-segment pair has exactly zero probability and passes exactly zero
// gradient, and bitwise determinism across thread counts.
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

struct Result {
  std::vector<float> out, att, dqkv;
};
Result run_cpu(const std::vector<float>& qkv, const int32_t* seg, const std::vector<float>& dout,
               int B, int T, int C, int NH) {
  Result r{std::vector<float>(size_t(B) * T * C), std::vector<float>(size_t(B) * NH * T * T),
           std::vector<float>(qkv.size(), 9.f)};  // dqkv starts as garbage: it is overwritten
  std::vector<float> datt(r.att.size());
  cpu::attention_fwd(r.out.data(), r.att.data(), qkv.data(), seg, B, T, C, NH);
  cpu::attention_bwd(r.dqkv.data(), datt.data(), dout.data(), qkv.data(), r.att.data(), B, T, C, NH);
  return r;
}

TEST(Attention, HandCase) {
  const float k1 = std::sqrt(2.f) * std::log(3.f);  // q1·k1/√2 = ln 3: probabilities 1/4, 3/4
  const std::vector<float> qkv = {0.3f, -0.2f, 0, 0, 4, 0,   // t=0: q0 k0 v0
                                  1, 0, k1, 0, 0, 8};        // t=1: q1 k1 v1
  std::vector<float> out(4), att(4);
  cpu::attention_fwd(out.data(), att.data(), qkv.data(), nullptr, 1, 2, 2, 1);
  EXPECT_TRUE(allclose(to_f64(att), {1, 0, 0.25, 0.75}, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(to_f64(out), {4, 0, 1, 6}, 1e-5, 1e-6));
}

TEST(Attention, ForwardMatchesFp64Reference) {
  const int B = 2, T = 9, C = 12, NH = 3;
  const auto qkv = uniform(size_t(B) * T * 3 * C, 81, -2.f, 2.f);
  const std::vector<int32_t> seg = {1, 1, 1, 2, 2, 3, 3, 3, 0,  0, 1, 1, 1, 1, 2, 2, 0, 0};
  for (const int32_t* s : {static_cast<const int32_t*>(nullptr), seg.data()}) {
    std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T, 5.f);
    cpu::attention_fwd(out.data(), att.data(), qkv.data(), s, B, T, C, NH);
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
    cpu::attention_fwd(out.data(), att.data(), qkv.data(), s, c.B, c.T, c.C, c.NH);
    EXPECT_TRUE(allclose(att, probabilities_fp64(qkv, s, c.B, c.T, c.C, c.NH), kSoftmaxAtol / 2, kSoftmaxRtol / 2));
  }
}

}  // namespace
}  // namespace sftdp::test
