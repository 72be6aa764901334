// tests/kernels/test_bf16.cpp — bf16 pack/unpack, CPU twin (kernels/bf16.h): pack rounds to the
// nearest bf16 with ties to even, against a reference that picks the nearer of the two bf16
// neighbours in double; hand cases (ties both ways, overflow to infinity, negative zero, subnormals,
// every NaN to 0x7fff); unpack is exact and pack(unpack(b)) == b for every non-NaN pattern.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "kernels/bf16.h"

namespace sftdp::test {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The nearest bf16 by value (double arithmetic), ties to the even pattern; infinity past the top.
uint16_t reference_pack(float x) {
  if (std::isnan(x)) return 0x7fff;
  const uint32_t u = bits_of(x);
  const uint16_t down = static_cast<uint16_t>(u >> 16), up = static_cast<uint16_t>(down + 1);  // same sign
  if ((u & 0xffffu) == 0) return down;
  // Past the largest finite bf16 the next value up is 2^128, where IEEE's rounding overflows to inf.
  const double lo = from_bits(uint32_t{down} << 16);
  const double hi = (up & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), x)
                                              : static_cast<double>(from_bits(uint32_t{up} << 16));
  const double dl = std::fabs(x - lo), dh = std::fabs(hi - x);
  if (dl != dh) return dl < dh ? down : up;
  return (down & 1u) ? up : down;
}

uint16_t pack_one(float x) {
  uint16_t b = 0;
  cpu::bf16_pack(&b, &x, 1);
  return b;
}

TEST(Bf16, HandCases) {
  EXPECT_EQ(pack_one(1.0f), 0x3f80);
  EXPECT_EQ(pack_one(1.00390625f), 0x3f80);            // exactly between 0x3f80 and 0x3f81: to even
  EXPECT_EQ(pack_one(1.01171875f), 0x3f82);            // between 0x3f81 and 0x3f82: to even (up)
  EXPECT_EQ(pack_one(from_bits(0x3f808001)), 0x3f81);  // just past the tie: up
  EXPECT_EQ(pack_one(-2.5f), 0xc020);
  EXPECT_EQ(pack_one(-0.0f), 0x8000);
  EXPECT_EQ(pack_one(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to +inf
  EXPECT_EQ(pack_one(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(pack_one(from_bits(0x00018000)), 0x0002);  // subnormal tie, odd -> even (up)
  EXPECT_EQ(pack_one(std::numeric_limits<float>::quiet_NaN()), 0x7fff);
  EXPECT_EQ(pack_one(from_bits(0xff800001)), 0x7fff);  // a negative signalling NaN too
}

TEST(Bf16, PackIsNearestEvenOnRandomBitsAndUnpackIsExact) {
  const auto r = uniform_int(200000, 77, 1 << 30);
  std::vector<float> x(r.size());
  for (size_t i = 0; i < r.size(); ++i) x[i] = from_bits(static_cast<uint32_t>(r[i]) * 4u + (i % 4));  // every exponent
  std::vector<uint16_t> packed(x.size());
  cpu::bf16_pack(packed.data(), x.data(), x.size());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += packed[i] != reference_pack(x[i]);
  EXPECT_EQ(bad, 0u);
  // Every 16-bit pattern: unpack is the pattern shifted up, and packs back to itself (NaNs aside).
  std::vector<uint16_t> all(65536), again(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<uint16_t>(b);
  std::vector<float> wide(65536);
  cpu::bf16_unpack(wide.data(), all.data(), all.size());
  cpu::bf16_pack(again.data(), wide.data(), wide.size());
  for (uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(bits_of(wide[b]), b << 16) << b;
    if (!std::isnan(wide[b])) {
      ASSERT_EQ(again[b], b) << b;
    }
  }
}

}  // namespace
}  // namespace sftdp::test
