// tests/common/test_util.cpp — see test_util.h.
#include "common/test_util.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kernels/ops.h"

namespace fs = std::filesystem;

namespace sftdp::test {

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> uniform_int(size_t n, uint64_t seed, int32_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <class T>
static ::testing::AssertionResult allclose_impl(const std::vector<T>& got, const std::vector<T>& ref,
                                                double atol, double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  std::ostringstream misses;
  size_t n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    const bool ok = std::isfinite(g) && std::fabs(g - r) <= atol + rtol * std::fabs(r);
    if (!ok && n_bad++ < 8) misses << "\n  [" << i << "] ref " << r << " got " << g;
  }
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n_bad << " of " << got.size()
                                       << " elements outside atol " << atol << " + rtol " << rtol
                                       << "·|ref|:" << misses.str();
}

::testing::AssertionResult allclose(const std::vector<float>& got, const std::vector<float>& ref,
                                    double atol, double rtol) {
  return allclose_impl(got, ref, atol, rtol);
}
::testing::AssertionResult allclose(const std::vector<double>& got, const std::vector<double>& ref,
                                    double atol, double rtol) {
  return allclose_impl(got, ref, atol, rtol);
}

::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " != " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / den;
}

bool has_cuda_device() { return sftdp::cuda_device_available(); }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/sftdp_test_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}
TempDir::~TempDir() {
  std::error_code ec;
  if (!std::getenv("SFTDP_KEEP_TMP")) fs::remove_all(path_, ec);
}

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

std::string binary(const std::string& name) { return std::string(SFTDP_BUILD_DIR) + "/" + name; }
std::string source_path(const std::string& rel) { return std::string(SFTDP_SOURCE_DIR) + "/" + rel; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}
bool file_exists(const std::string& path) { return fs::exists(path); }

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sftdp::test
