// bench/harness.cpp — see harness.h.
#include "harness.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace sftdp::bench {

double median_ms(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms(static_cast<size_t>(std::max(reps, 1)));
  for (auto& m : ms) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(ms.begin(), ms.end());
  return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

data::Batch random_batch(int B, int T, int V, int prompt) {
  if (prompt < 0) prompt = T / 4;
  data::Batch b;
  b.B = B, b.T = T;
  b.inputs = random_ints(size_t(B) * T, 1, V);
  b.targets = random_ints(size_t(B) * T, 2, V);
  b.loss_weights.assign(size_t(B) * T, 1.0f);
  for (int r = 0; r < B; ++r)
    for (int t = 0; t < std::min(prompt, T); ++t) b.loss_weights[size_t(r) * T + t] = 0.0f;
  return b;
}

double sgemm_gflops(int M, int N, int K, int reps) {
  const auto a = random_floats(static_cast<size_t>(M) * K, 1), b = random_floats(static_cast<size_t>(N) * K, 2);
  std::vector<float> c(static_cast<size_t>(M) * N);
  const int previous_threads = openblas_get_num_threads();
  openblas_set_num_threads(omp_get_max_threads());
  const double ms = median_ms(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(),
                    K, 0.0f, c.data(), N);
      },
      reps, 1);
  openblas_set_num_threads(previous_threads);
  return 2.0 * M * N * K / (ms * 1e6);
}

double triad_gbytes_per_s(size_t n, int reps) {
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);  // touched once here, so no page faults timed
  const long long m = static_cast<long long>(n);
  const double ms = median_ms(
      [&] {
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < m; ++i) a[i] = b[i] + 0.5f * c[i];
      },
      reps, 1);
  if (a[n / 2] != 2.0f) std::fprintf(stderr, "triad: wrong result\n");
  return 3.0 * sizeof(float) * n / (ms * 1e6);
}

bool check(const std::string& what, double max_abs_err, double tol) {
  const bool ok = std::isfinite(max_abs_err) && max_abs_err <= tol;
  std::printf("check %s: max |err| %.3g (tolerance %.3g) %s\n", what.c_str(), max_abs_err, tol,
              ok ? "OK" : "FAILED");
  return ok;
}

std::string fmt(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

void Table::print(std::FILE* out) const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      const int w = static_cast<int>(width[i]);
      std::fprintf(out, i == 0 ? "%-*s" : "  %*s", w, cell.c_str());
    }
    std::fprintf(out, "\n");
  };
  line(header_);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  std::fprintf(out, "%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
  for (const auto& r : rows_) line(r);
}

}  // namespace sftdp::bench
