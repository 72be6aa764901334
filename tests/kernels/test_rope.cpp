// tests/kernels/test_rope.cpp — CPU rotary-embedding twin: a hand case, the forward against an
// fp64 reference (rotate_half layout, explicit and default positions, angles of large positions),
// v left bit-for-bit untouched, null positions meaning 0..T-1, the backward against fp64 finite
// differences, forward-then-backward being the identity, and bitwise determinism across
// thread counts.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/rope.h"

namespace sftdp::test {
namespace {

// fp64 reference: for each q and k head x of row (b,t), i < HS/2, a = pos·inv_freq[i]:
// x'[i] = x[i]·cos a − x[i+HS/2]·sin a, x'[i+HS/2] = x[i+HS/2]·cos a + x[i]·sin a.
std::vector<double> rope_ref(const std::vector<double>& qkv, const int32_t* positions,
                             const std::vector<float>& inv_freq, int B, int T, int NH, int KVH, int HS) {
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const int half = HS / 2;
  std::vector<double> out(qkv);
  for (int bt = 0; bt < B * T; ++bt) {
    const double pos = positions ? positions[bt] : bt % T;
    for (int h = 0; h < NH + KVH; ++h)
      for (int i = 0; i < half; ++i) {
        const size_t o = bt * QKV + size_t(h) * HS + i;
        const double a = pos * double(inv_freq[i]), x = qkv[o], y = qkv[o + half];
        out[o] = x * std::cos(a) - y * std::sin(a);
        out[o + half] = y * std::cos(a) + x * std::sin(a);
      }
  }
  return out;
}

// HF's default frequencies: theta^(−2i/HS).
std::vector<float> default_inv_freq(int HS, double theta = 10000.0) {
  std::vector<float> f(HS / 2);
  for (int i = 0; i < HS / 2; ++i) f[i] = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / HS));
  return f;
}

TEST(Rope, HandCaseRotatesTheTwoHalvesOfAHead) {
  // one row, NH = 1, KVH = 1, HS = 2: q = (1, 0), k = (0, 2), v = (5, 6); angle 3 · 0.5 = 1.5
  std::vector<float> qkv = {1, 0, 0, 2, 5, 6};
  const std::vector<int32_t> pos = {3};
  const std::vector<float> inv_freq = {0.5f};
  cpu::rope_fwd(qkv.data(), pos.data(), inv_freq.data(), 1, 1, 1, 1, 2);
  const double c = std::cos(1.5), s = std::sin(1.5);
  EXPECT_TRUE(allclose(to_f64(qkv), {c, s, -2 * s, 2 * c, 5, 6}, 1e-7, 1e-7));
}

TEST(Rope, ForwardMatchesFp64ReferenceAndLeavesVUntouched) {
  const int B = 2, T = 7, NH = 4, KVH = 2, HS = 16;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv0 = uniform(size_t(B) * T * QKV, 71, -2.f, 2.f);
  const auto inv_freq = default_inv_freq(HS);
  const std::vector<int32_t> pos = {0, 1, 2, 0, 1, 2, 3, 5, 0, 1, 0, 1, 2, 3};  // packed segments
  for (const int32_t* p : {static_cast<const int32_t*>(nullptr), pos.data()}) {
    std::vector<float> qkv = qkv0;
    cpu::rope_fwd(qkv.data(), p, inv_freq.data(), B, T, NH, KVH, HS);
    EXPECT_TRUE(allclose(to_f64(qkv), rope_ref(to_f64(qkv0), p, inv_freq, B, T, NH, KVH, HS), 1e-6, 1e-6))
        << (p ? "explicit positions" : "default positions");
    for (int bt = 0; bt < B * T; ++bt)
      for (size_t c = size_t(NH + KVH) * HS; c < QKV; ++c) ASSERT_EQ(qkv[bt * QKV + c], qkv0[bt * QKV + c]);
  }
}

// At position 100000 with inv_freq 1 a float angle would be off by ~4e-3 rad; the double angle
// of the header's contract keeps the rotated values within float rounding of fp64.
TEST(Rope, AnglesOfLargePositionsAreFormedInDoublePrecision) {
  const int B = 1, T = 3, NH = 1, KVH = 1, HS = 4;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv0 = uniform(size_t(T) * QKV, 72, -1.f, 1.f);
  const std::vector<float> inv_freq = {1.0f, 0.7310585f};
  const std::vector<int32_t> pos = {100003, 131071, 99991};
  std::vector<float> qkv = qkv0;
  cpu::rope_fwd(qkv.data(), pos.data(), inv_freq.data(), B, T, NH, KVH, HS);
  EXPECT_TRUE(allclose(to_f64(qkv), rope_ref(to_f64(qkv0), pos.data(), inv_freq, B, T, NH, KVH, HS), 1e-6, 1e-6));
}

TEST(Rope, NullPositionsEqualPositionsZeroToTMinusOne) {
  const int B = 3, T = 11, NH = 2, KVH = 2, HS = 8;
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv0 = uniform(size_t(B) * T * QKV, 73);
  const auto inv_freq = default_inv_freq(HS);
  std::vector<int32_t> pos(B * T);
  for (int bt = 0; bt < B * T; ++bt) pos[bt] = bt % T;
  std::vector<float> a = qkv0, b = qkv0;
  cpu::rope_fwd(a.data(), nullptr, inv_freq.data(), B, T, NH, KVH, HS);
  cpu::rope_fwd(b.data(), pos.data(), inv_freq.data(), B, T, NH, KVH, HS);
  EXPECT_TRUE(bitwise_equal(a, b));
  a = qkv0, b = qkv0;
  cpu::rope_bwd(a.data(), nullptr, inv_freq.data(), B, T, NH, KVH, HS);
  cpu::rope_bwd(b.data(), pos.data(), inv_freq.data(), B, T, NH, KVH, HS);
  EXPECT_TRUE(bitwise_equal(a, b));
}

// rope_bwd(dout) = ∂(dout·rope(qkv))/∂qkv: the transpose rotation on q and k, dout on v.
// HS = 260 spans more than one of the kernel's 64-frequency chunks.
void check_backward(const int32_t* pos, int B, int T, int NH, int KVH, int HS) {
  const size_t QKV = size_t(NH + 2 * KVH) * HS;
  const auto qkv = uniform(size_t(B) * T * QKV, 81, -2.f, 2.f);
  const auto dout = uniform(qkv.size(), 82);
  const auto inv_freq = default_inv_freq(HS, 500000.0);
  std::vector<float> dqkv = dout;
  cpu::rope_bwd(dqkv.data(), pos, inv_freq.data(), B, T, NH, KVH, HS);
  auto x64 = to_f64(qkv);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, rope_ref(x64, pos, inv_freq, B, T, NH, KVH, HS)); };
  EXPECT_TRUE(allclose(to_f64(dqkv), central_diff(x64, loss), 1e-6, 1e-5));
}
TEST(Rope, BackwardMatchesFiniteDifferences) { check_backward(nullptr, 2, 3, 3, 1, 6); }
TEST(Rope, BackwardWithPositionsAndWideHeadsMatchesFiniteDifferences) {
  const std::vector<int32_t> pos = {7, 0, 1};
  check_backward(pos.data(), 1, 3, 1, 1, 260);
}

TEST(Rope, ForwardThenBackwardIsTheIdentity) {
  const int B = 2, T = 33, NH = 8, KVH = 2, HS = 128;
  const auto qkv0 = uniform(size_t(B) * T * (NH + 2 * KVH) * HS, 91, -3.f, 3.f);
  const auto inv_freq = default_inv_freq(HS);
  std::vector<float> qkv = qkv0;
  cpu::rope_fwd(qkv.data(), nullptr, inv_freq.data(), B, T, NH, KVH, HS);
  cpu::rope_bwd(qkv.data(), nullptr, inv_freq.data(), B, T, NH, KVH, HS);
  EXPECT_TRUE(allclose(qkv, qkv0, 1e-6, 1e-6));
}

TEST(Rope, IsBitwiseIdenticalForOneAndTwoThreads) {
  const int B = 4, T = 64, NH = 4, KVH = 2, HS = 64;
  const auto qkv0 = uniform(size_t(B) * T * (NH + 2 * KVH) * HS, 101);
  const auto inv_freq = default_inv_freq(HS);
  auto run = [&](int threads) {
    std::vector<float> a = qkv0, b = qkv0;
    with_threads(threads, [&] {
      cpu::rope_fwd(a.data(), nullptr, inv_freq.data(), B, T, NH, KVH, HS);
      cpu::rope_bwd(b.data(), nullptr, inv_freq.data(), B, T, NH, KVH, HS);
    });
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

}  // namespace
}  // namespace sftdp::test
