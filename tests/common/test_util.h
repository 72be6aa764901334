// tests/common/test_util.h — shared test helpers: seeded inputs, tolerance checks that list the
// first mismatches, temp dirs, running the built binaries.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sftdp/check.h"

// Expects `haystack` (a std::string) to contain `needle`; prints the haystack when it does not.
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "in: " << (haystack)

namespace sftdp::test {

// n floats uniform in [lo, hi), deterministic in seed.
std::vector<float> uniform(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
// n ints uniform in [0, hi).
std::vector<int32_t> uniform_int(size_t n, uint64_t seed, int32_t hi);

// |got - ref| <= atol + rtol*|ref| elementwise; on failure lists the first few misses.
::testing::AssertionResult allclose(const std::vector<float>& got, const std::vector<float>& ref,
                                    double atol, double rtol);
::testing::AssertionResult allclose(const std::vector<double>& got, const std::vector<double>& ref,
                                    double atol, double rtol);
::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);
// max_i |a-b| / max(max_i |b|, tiny): one number for whole-tensor comparisons.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b);

bool has_cuda_device();

// The message of the UserError that f throws; a test failure (and "") when it throws none.
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const sftdp::UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError, got none";
  return "";
}

// A fresh directory under $TMPDIR, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // the process's exit status (128+sig if killed)
  std::string output;  // stdout and stderr together
};
// Runs a shell command, capturing its output.
CommandResult run_command(const std::string& cmd);
// Path of a built executable (sft_train, sft_prepare) in the build directory.
std::string binary(const std::string& name);
std::string source_path(const std::string& rel);
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);
bool file_exists(const std::string& path);
// Every regular file below dir (recursive), sorted.
std::vector<std::string> list_files(const std::string& dir);

}  // namespace sftdp::test
