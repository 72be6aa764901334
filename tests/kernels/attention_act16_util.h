// tests/kernels/attention_act16_util.h — what the act16 attention tests share (kernels/act16.h: a bf16 value is its
// 16 bits): fp32 tensors rounded to bf16 storage and widened back, both twins' outputs for one case, and a comparison
// in bf16 units in the last place.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "kernels/act16.h"
#include "kernels/attention.h"
#include "kernels/attention_reference.h"

namespace sftdp::test {

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = act16::to_bf16(x[i]);
  return r;
}
inline std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = act16::to_float(x[i]);
  return r;
}

// A bf16 value's place on the number line in units in the last place (+0 and −0 both 0), so that two values are n
// ulps apart when their places differ by n.
inline int bf16_place(uint16_t h) { return h & 0x8000 ? -(h & 0x7fff) : h; }

// Every element of got within `ulps` bf16 units in the last place of want, or within `atol` of it (for values that
// cancel to near zero, where fp32 summation-order differences are many ulps of a tiny value); NaN never passes.
inline ::testing::AssertionResult within_bf16_ulps(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                                   int ulps, double atol = 0) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  std::ostringstream misses;
  size_t bad = 0;
  int worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = act16::to_float(got[i]), w = act16::to_float(want[i]);
    const int apart = std::abs(bf16_place(got[i]) - bf16_place(want[i]));
    if (std::isfinite(g) && (apart <= ulps || std::fabs(g - w) <= atol)) continue;
    worst = std::max(worst, apart);
    if (bad++ < 8) misses << "\n  [" << i << "] want " << w << " got " << g << " (" << apart << " ulps)";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements more than " << ulps
                                       << " bf16 ulps (and " << atol << ") apart, worst " << worst << ":"
                                       << misses.str();
}

// The act16 attention's outputs for one case: out and dqkv as bf16 bits, lse fp32.
struct Act16Outputs {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  std::vector<uint16_t> dqkv;
};
// The CPU twins (kernels/cpu/attention_bf16.cpp), outputs filled with garbage first: every element is written.
inline Act16Outputs run_cpu_act16(const std::vector<uint16_t>& qkv, const std::vector<uint16_t>& dout,
                                  const int32_t* seg, const AttentionShape& c) {
  Act16Outputs r{std::vector<uint16_t>(out_size(c), 0x7fff), std::vector<float>(size_t(c.B) * c.NH * c.T, 5.f),
                 std::vector<uint16_t>(qkv.size(), 0x7fff)};
  cpu::act16::attention_fwd(r.out.data(), r.lse.data(), qkv.data(), seg, c.B, c.T, c.NH, c.KVH, c.HS);
  cpu::act16::attention_bwd(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), seg, c.B, c.T, c.NH,
                            c.KVH, c.HS);
  return r;
}

}  // namespace sftdp::test
