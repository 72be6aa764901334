// tests/kernels/act16_test_util.h — shared by the tests of the act16 twins (kernels/act16.h): bf16 tensors
// as their 16-bit patterns (rounded to nearest even from fp32, widened back exactly), a bit-for-bit
// comparison of them that lists the first mismatches, and the CUDA-vs-CPU comparison of a bf16 output
// (equal or one bf16 step apart, or as close as the fp32 values behind them are allowed to be).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "kernels/act16.h"

namespace sftdp::test {

inline std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = act16::to_bf16(v[i]);
  return out;
}
inline std::vector<float> widened(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = act16::to_float(v[i]);
  return out;
}
// fp32 values that are exactly bf16 ones: what a bf16 input holds, as the fp32 twins read it.
inline std::vector<float> bf16_rounded(const std::vector<float>& v) { return widened(bf16_of(v)); }

inline ::testing::AssertionResult same_bits(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  std::ostringstream misses;
  size_t n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == ref[i]) continue;
    if (n_bad++ < 8) misses << "\n  [" << i << "] ref 0x" << std::hex << ref[i] << " got 0x" << got[i] << std::dec;
  }
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n_bad << " of " << got.size() << " bf16 values differ:" << misses.str();
}

// A bf16 output of a CUDA twin against the CPU twin's: each value equal or one bf16 step from it (the fp32
// value behind it landed on the other side of a rounding boundary), or within fp32_rel·max|ref| (an fp32
// value near 0, where the twins' allowed fp32 difference is more than one step of its bf16). Counts the
// values that are not equal in `differing` when given.
inline ::testing::AssertionResult bf16_close(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref,
                                             double fp32_rel, size_t* differing = nullptr) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  double scale = 0;
  for (uint16_t r : ref) scale = std::max(scale, std::fabs(static_cast<double>(act16::to_float(r))));
  std::ostringstream misses;
  size_t n_bad = 0, n_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == ref[i]) continue;
    ++n_diff;
    const bool same_sign = (got[i] >> 15) == (ref[i] >> 15);
    const double g = act16::to_float(got[i]), r = act16::to_float(ref[i]);
    if ((same_sign && std::abs(static_cast<int>(got[i]) - static_cast<int>(ref[i])) == 1) ||
        std::fabs(g - r) <= fp32_rel * scale)
      continue;
    if (n_bad++ < 8) misses << "\n  [" << i << "] ref " << r << " got " << g;
  }
  if (differing) *differing = n_diff;
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n_bad << " of " << got.size()
                                       << " bf16 values more than one step apart:" << misses.str();
}

}  // namespace sftdp::test
