// tests/kernels/test_lora.cpp — the LoRA adapter kernels (kernels/lora.h) on the CPU: forward and
// every gradient against a float64 reference of out += s·(x Aᵀ) Bᵀ on a column slice of a wider
// output (row stride ldo > OC, columns outside the slice untouched); gradients against central
// finite differences of a scalar loss; the dropout mask's rate, scale, determinism and dependence
// on (key, row, position, channel) only. The CUDA twins: test_cuda_lora.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"

namespace sftdp::test {
namespace {

struct Shape {
  int N, IC, r, OC, col, ldo;
};

// out(N, ldo)[:, col:col+OC] += s · x Aᵀ Bᵀ in float64.
std::vector<double> reference_out(const Shape& s, const std::vector<float>& out0, const std::vector<float>& x,
                                  const std::vector<float>& A, const std::vector<float>& B, double scale) {
  std::vector<double> out(out0.begin(), out0.end());
  for (int n = 0; n < s.N; ++n)
    for (int o = 0; o < s.OC; ++o) {
      double acc = 0;
      for (int k = 0; k < s.r; ++k) {
        double u = 0;
        for (int i = 0; i < s.IC; ++i) u += double(x[size_t(n) * s.IC + i]) * A[size_t(k) * s.IC + i];
        acc += u * B[size_t(o) * s.r + k];
      }
      out[size_t(n) * s.ldo + s.col + o] += scale * acc;
    }
  return out;
}

// L = Σ dout ⊙ out over the slice: dL/dx, dL/dA, dL/dB in float64.
void reference_grads(const Shape& s, const std::vector<float>& dout, const std::vector<float>& x,
                     const std::vector<float>& A, const std::vector<float>& B, double scale, std::vector<double>& dx,
                     std::vector<double>& dA, std::vector<double>& dB) {
  dx.assign(size_t(s.N) * s.IC, 0), dA.assign(A.size(), 0), dB.assign(B.size(), 0);
  for (int n = 0; n < s.N; ++n) {
    std::vector<double> u(s.r, 0), du(s.r, 0);
    for (int k = 0; k < s.r; ++k)
      for (int i = 0; i < s.IC; ++i) u[k] += double(x[size_t(n) * s.IC + i]) * A[size_t(k) * s.IC + i];
    for (int o = 0; o < s.OC; ++o) {
      const double g = dout[size_t(n) * s.ldo + s.col + o];
      for (int k = 0; k < s.r; ++k) {
        dB[size_t(o) * s.r + k] += scale * g * u[k];
        du[k] += scale * g * B[size_t(o) * s.r + k];
      }
    }
    for (int k = 0; k < s.r; ++k)
      for (int i = 0; i < s.IC; ++i) {
        dA[size_t(k) * s.IC + i] += du[k] * x[size_t(n) * s.IC + i];
        dx[size_t(n) * s.IC + i] += du[k] * A[size_t(k) * s.IC + i];
      }
  }
}

std::vector<float> as_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

const Shape kShapes[] = {{1, 8, 1, 4, 0, 4}, {37, 24, 4, 10, 6, 30}, {300, 64, 16, 48, 16, 96}, {5, 3, 2, 7, 0, 7}};

TEST(Lora, ForwardAddsScaledAdapterOnlyToItsColumns) {
  for (const Shape& s : kShapes) {
    const auto x = uniform(size_t(s.N) * s.IC, 1), A = uniform(size_t(s.r) * s.IC, 2),
               B = uniform(size_t(s.OC) * s.r, 3);
    const auto out0 = uniform(size_t(s.N) * s.ldo, 4);
    auto out = out0;
    std::vector<float> u(size_t(s.N) * s.r);
    const float scale = 2.5f;
    cpu::lora_fwd(out.data() + s.col, s.ldo, u.data(), x.data(), A.data(), B.data(), scale, s.N, s.IC, s.r, s.OC);
    const auto want = as_float(reference_out(s, out0, x, A, B, scale));
    EXPECT_TRUE(allclose(out, want, 1e-5, 1e-5)) << "N=" << s.N << " OC=" << s.OC;
    for (int n = 0; n < s.N; ++n)  // outside [col, col+OC): the very same bits
      for (int c = 0; c < s.ldo; ++c)
        if (c < s.col || c >= s.col + s.OC) {
          ASSERT_EQ(out[size_t(n) * s.ldo + c], out0[size_t(n) * s.ldo + c]);
        }
  }
}

TEST(Lora, BackwardMatchesFp64ReferenceAndAccumulates) {
  for (const Shape& s : kShapes) {
    const auto x = uniform(size_t(s.N) * s.IC, 5), A = uniform(size_t(s.r) * s.IC, 6),
               B = uniform(size_t(s.OC) * s.r, 7);
    const auto dout = uniform(size_t(s.N) * s.ldo, 8);
    const float scale = 0.75f;
    std::vector<float> u(size_t(s.N) * s.r), du(u.size()), out(size_t(s.N) * s.ldo);
    cpu::lora_fwd(out.data() + s.col, s.ldo, u.data(), x.data(), A.data(), B.data(), scale, s.N, s.IC, s.r, s.OC);
    // Start from nonzero sums: every output accumulates.
    const auto dx0 = uniform(x.size(), 9), dA0 = uniform(A.size(), 10), dB0 = uniform(B.size(), 11);
    auto dx = dx0, dA = dA0, dB = dB0;
    cpu::lora_bwd(dx.data(), dA.data(), dB.data(), du.data(), dout.data() + s.col, s.ldo, x.data(), u.data(), A.data(),
                  B.data(), scale, s.N, s.IC, s.r, s.OC);
    std::vector<double> rdx, rdA, rdB;
    reference_grads(s, dout, x, A, B, scale, rdx, rdA, rdB);
    for (size_t i = 0; i < rdx.size(); ++i) rdx[i] += dx0[i];
    for (size_t i = 0; i < rdA.size(); ++i) rdA[i] += dA0[i];
    for (size_t i = 0; i < rdB.size(); ++i) rdB[i] += dB0[i];
    EXPECT_TRUE(allclose(dx, as_float(rdx), 1e-5, 1e-5)) << "dx N=" << s.N;
    EXPECT_TRUE(allclose(dA, as_float(rdA), 1e-4, 1e-5)) << "dA N=" << s.N;
    EXPECT_TRUE(allclose(dB, as_float(rdB), 1e-4, 1e-5)) << "dB N=" << s.N;
  }
}

// The reference itself against central differences of L = Σ dout ⊙ out (float64 throughout).
TEST(Lora, ReferenceGradientsMatchFiniteDifferences) {
  const Shape s{4, 5, 2, 3, 1, 6};
  const auto x = uniform(size_t(s.N) * s.IC, 12), A = uniform(size_t(s.r) * s.IC, 13),
             B = uniform(size_t(s.OC) * s.r, 14);
  const auto dout = uniform(size_t(s.N) * s.ldo, 15);
  const double scale = 1.5;
  std::vector<double> dx, dA, dB;
  reference_grads(s, dout, x, A, B, scale, dx, dA, dB);
  const std::vector<float> zero(size_t(s.N) * s.ldo, 0.0f);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& AA, const std::vector<float>& BB) {
    const auto out = reference_out(s, zero, xx, AA, BB, scale);
    double L = 0;
    for (size_t i = 0; i < out.size(); ++i) L += out[i] * dout[i];
    return L;
  };
  const float h = 1e-2f;
  auto check = [&](std::vector<float> v, const std::vector<double>& g, int which) {
    for (size_t i = 0; i < v.size(); ++i) {
      const float keep = v[i];
      v[i] = keep + h;
      const double up = which == 0 ? loss(v, A, B) : which == 1 ? loss(x, v, B) : loss(x, A, v);
      v[i] = keep - h;
      const double down = which == 0 ? loss(v, A, B) : which == 1 ? loss(x, v, B) : loss(x, A, v);
      v[i] = keep;
      const double fd = (up - down) / (double(keep + h) - double(keep - h));
      EXPECT_NEAR(g[i], fd, 1e-4 + 1e-3 * std::fabs(fd)) << "input " << which << " element " << i;
    }
  };
  check(x, dx, 0), check(A, dA, 1), check(B, dB, 2);
}

// The masks' keys, read through a pointer as the kernels read them (from device memory on the GPU).
constexpr uint64_t kKey42 = 42, kKey43 = 43, kKey7 = 7;

TEST(LoraDropout, KeepsAboutOneMinusPScaledAndDependsOnlyOnWhere) {
  const int B = 3, T = 50, C = 40, N = B * T;
  const auto x = uniform(size_t(N) * C, 16, 0.5f, 1.0f);  // never 0: a zero output means dropped
  const std::vector<int64_t> rows = {7, 1000000007, 3};
  const float p = 0.3f, keep_scale = 1.0f / (1.0f - p);
  std::vector<float> y(x.size());
  cpu::lora_dropout(y.data(), x.data(), rows.data(), nullptr, &kKey42, p, keep_scale, N, T, C);
  size_t kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) continue;
    ++kept;
    ASSERT_EQ(y[i], x[i] * keep_scale);
  }
  const double rate = double(kept) / y.size();  // 6000 draws: 5 sigma is 0.03
  EXPECT_NEAR(rate, 1.0 - p, 0.03);
  // The same row at another batch slot, and the same key: the same mask. Another key, another mask.
  const std::vector<int64_t> moved = {3, 7, 1000000007};
  std::vector<float> y2(x.size()), y3(x.size());
  cpu::lora_dropout(y2.data(), x.data(), moved.data(), nullptr, &kKey42, p, keep_scale, N, T, C);
  cpu::lora_dropout(y3.data(), x.data(), rows.data(), nullptr, &kKey43, p, keep_scale, N, T, C);
  size_t same_key_differs = 0, other_key_differs = 0;
  for (int b = 0; b < B; ++b) {
    const int b2 = (b + 1) % B;  // rows[b] sits at slot b2 of moved
    for (size_t i = 0; i < size_t(T) * C; ++i) {
      const bool kept1 = y[size_t(b) * T * C + i] != 0.0f, kept2 = y2[size_t(b2) * T * C + i] != 0.0f;
      same_key_differs += kept1 != kept2;
      other_key_differs += kept1 != (y3[size_t(b) * T * C + i] != 0.0f);
    }
  }
  EXPECT_EQ(same_key_differs, 0u);
  EXPECT_GT(other_key_differs, y.size() / 5);
  // In place, and p = 0 keeps everything unscaled.
  auto z = x;
  cpu::lora_dropout(z.data(), z.data(), rows.data(), nullptr, &kKey42, p, keep_scale, N, T, C);
  EXPECT_TRUE(bitwise_equal(z, y));
  cpu::lora_dropout(z.data(), x.data(), rows.data(), nullptr, &kKey42, 0.0f, 1.0f, N, T, C);
  EXPECT_TRUE(bitwise_equal(z, x));
}

// Context parallelism (issue 43): a rank holding some of every row's positions (index: where each of its T
// local positions sits in the whole row) draws exactly the whole row's mask at those positions.
TEST(LoraDropout, ARanksPositionsDrawTheWholeRowsMaskThere) {
  const int B = 2, T = 16, C = 24, n = 4;  // the whole rows, and 2n chunks of them
  const auto x = uniform(size_t(B) * T * C, 21, 0.5f, 1.0f);
  const std::vector<int64_t> rows = {11, 5};
  const float p = 0.3f, keep_scale = 1.0f / (1.0f - p);
  std::vector<float> whole(x.size());
  cpu::lora_dropout(whole.data(), x.data(), rows.data(), nullptr, &kKey7, p, keep_scale, B * T, T, C);
  for (int i = 0; i < n; ++i) {  // rank i: chunks i and 2n − 1 − i, as model::context_split lays them out
    const int chunk = T / (2 * n), Tl = 2 * chunk;
    std::vector<int32_t> index;
    for (int c : {i, 2 * n - 1 - i})
      for (int t = 0; t < chunk; ++t) index.push_back(c * chunk + t);
    std::vector<float> mine(size_t(B) * Tl * C), got(mine.size());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t)
        for (int c = 0; c < C; ++c)
          mine[(size_t(b) * Tl + t) * C + c] = x[(size_t(b) * T + index[t]) * C + c];
    cpu::lora_dropout(got.data(), mine.data(), rows.data(), index.data(), &kKey7, p, keep_scale, B * Tl, Tl, C);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t)
        for (int c = 0; c < C; ++c)
          ASSERT_EQ(got[(size_t(b) * Tl + t) * C + c], whole[(size_t(b) * T + index[t]) * C + c])
              << "rank " << i << " row " << b << " local position " << t;
  }
}

}  // namespace
}  // namespace sftdp::test
