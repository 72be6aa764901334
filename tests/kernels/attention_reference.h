// tests/kernels/attention_reference.h — the float64 reference of the SPEC's attention (causal,
// grouped-query, packed segments, scaled by 1/√HS) with its analytic backward, written from the
// formulas and not from either twin: what the CPU and CUDA attention tests (and the bf16 tensor-core
// kernels, within bf16 tolerance) are checked against.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace sftdp::test {

struct AttentionShape {
  int B, T, NH, KVH, HS;
};
inline std::string shape_str(const AttentionShape& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " NH=" + std::to_string(c.NH) +
         " KVH=" + std::to_string(c.KVH) + " HS=" + std::to_string(c.HS);
}
inline size_t qkv_size(const AttentionShape& c) { return size_t(c.B) * c.T * (c.NH + 2 * c.KVH) * c.HS; }
inline size_t out_size(const AttentionShape& c) { return size_t(c.B) * c.T * c.NH * c.HS; }

// fp64 reference of the SPEC's attention with its analytic backward (dout empty: forward only).
struct Ref {
  std::vector<double> out, lse, dqkv;
};
inline Ref reference(const std::vector<double>& qkv, const std::vector<double>& dout, const int32_t* seg,
                     const AttentionShape& c) {
  const int G = c.NH / c.KVH, HS = c.HS, T = c.T;
  const size_t QKV = size_t(c.NH + 2 * c.KVH) * HS, OC = size_t(c.NH) * HS;
  const size_t k_off = size_t(c.NH) * HS, v_off = size_t(c.NH + c.KVH) * HS;
  const double scale = 1.0 / std::sqrt(double(HS));
  Ref r{std::vector<double>(out_size(c), 0.0), std::vector<double>(size_t(c.B) * c.NH * T),
        std::vector<double>(qkv.size(), 0.0)};
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.NH; ++h)
      for (int t = 0; t < T; ++t) {
        auto row = [&](int t2) { return &qkv[(size_t(b) * T + t2) * QKV]; };
        const double* q = row(t) + h * HS;
        double max = -INFINITY, z = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const bool visible = !seg || seg[b * T + t2] == seg[b * T + t];
          double s = 0;
          for (int i = 0; i < HS; ++i) s += q[i] * row(t2)[k_off + (h / G) * HS + i];
          p[t2] = visible ? s * scale : -INFINITY;
          max = std::max(max, p[t2]);
        }
        for (int t2 = 0; t2 <= t; ++t2) z += (p[t2] = std::exp(p[t2] - max));
        r.lse[(size_t(b) * c.NH + h) * T + t] = max + std::log(z);
        double* o = &r.out[(size_t(b) * T + t) * OC + h * HS];
        for (int t2 = 0; t2 <= t; ++t2) {
          p[t2] /= z;
          for (int i = 0; i < HS; ++i) o[i] += p[t2] * row(t2)[v_off + (h / G) * HS + i];
        }
        if (dout.empty()) continue;
        const double* g = &dout[(size_t(b) * T + t) * OC + h * HS];
        double D = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          dp[t2] = 0;
          for (int i = 0; i < HS; ++i) dp[t2] += g[i] * row(t2)[v_off + (h / G) * HS + i];
          D += p[t2] * dp[t2];
        }
        double* dq = &r.dqkv[(size_t(b) * T + t) * QKV + h * HS];
        for (int t2 = 0; t2 <= t; ++t2) {
          const double ds = p[t2] * (dp[t2] - D) * scale;
          double* dk = &r.dqkv[(size_t(b) * T + t2) * QKV + k_off + (h / G) * HS];
          double* dv = &r.dqkv[(size_t(b) * T + t2) * QKV + v_off + (h / G) * HS];
          for (int i = 0; i < HS; ++i) {
            dq[i] += ds * row(t2)[k_off + (h / G) * HS + i];
            dk[i] += ds * q[i];
            dv[i] += p[t2] * g[i];
          }
        }
      }
  return r;
}

}  // namespace sftdp::test
