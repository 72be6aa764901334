// tests/kernels/grad_check.h — helpers shared by the CPU kernel tests: fp32 <-> fp64 copies,
// central finite differences of an fp64 scalar function, and running code at a set OpenMP
// thread count (for the "bitwise identical for any thread count" checks).
#pragma once
#include <omp.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace sftdp::test {

inline std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// dL/dx_i ≈ (L(x + h·e_i) − L(x − h·e_i)) / 2h for every i. x is perturbed in place and
// restored; loss() must read x. With an fp64 loss and h = 1e-6 the error is ~1e-9.
inline std::vector<double> central_diff(std::vector<double>& x, const std::function<double()>& loss,
                                        double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

// got − before, elementwise in fp64: what a "+=" kernel added.
inline std::vector<double> added(const std::vector<float>& got, const std::vector<float>& before) {
  std::vector<double> d(got.size());
  for (size_t i = 0; i < got.size(); ++i) d[i] = double(got[i]) - double(before[i]);
  return d;
}

// Runs fn with OpenMP limited to n threads, then restores the previous setting.
inline void with_threads(int n, const std::function<void()>& fn) {
  const int previous = omp_get_max_threads();
  omp_set_num_threads(n);
  fn();
  omp_set_num_threads(previous);
}

}  // namespace sftdp::test
