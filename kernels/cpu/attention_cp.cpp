// kernels/cpu/attention_cp.cpp — context-parallel attention's CPU twin (kernels/attention.h): each
// query row against the gathered keys at positions up to its own, one pass of online softmax
// (FlashAttention's running max and sum) per row and head, fp32 throughout. Rows and heads are
// independent: OpenMP over them, every sum in key order, so the result does not depend on threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"

namespace sftdp::cpu {

void attention_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  const int QKV = (NH + 2 * KVH) * HS, KV = 2 * KVH * HS, group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(HS));
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tq; ++t)
        for (int h = 0; h < NH; ++h) {
          const float* q = qkv + (static_cast<size_t>(b) * Tq + t) * QKV + static_cast<size_t>(h) * HS;
          const int kvh = h / group;
          const int last = std::min(qpos[t], Tk - 1);
          const int32_t seg = seg_q ? seg_q[static_cast<size_t>(b) * Tq + t] : 0;
          float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int j = 0; j <= last; ++j) {
            if (seg_k && seg_k[static_cast<size_t>(b) * Tk + j] != seg) continue;
            const float* row = kv + (static_cast<size_t>(b) * Tk + j) * KV;
            const float* k = row + static_cast<size_t>(kvh) * HS;
            const float* v = row + static_cast<size_t>(KVH + kvh) * HS;
            float s = 0.0f;
            for (int i = 0; i < HS; ++i) s += q[i] * k[i];
            s *= scale;
            if (s > m) {  // rescale what was summed under the old maximum
              const float r = std::exp(m - s);
              l *= r;
              for (int i = 0; i < HS; ++i) acc[i] *= r;
              m = s;
            }
            const float p = std::exp(s - m);
            l += p;
            for (int i = 0; i < HS; ++i) acc[i] += p * v[i];
          }
          float* o = out + (static_cast<size_t>(b) * Tq + t) * NH * HS + static_cast<size_t>(h) * HS;
          for (int i = 0; i < HS; ++i) o[i] = l > 0 ? acc[i] / l : 0.0f;
          lse[(static_cast<size_t>(b) * NH + h) * Tq + t] = l > 0 ? m + std::log(l) : -std::numeric_limits<float>::infinity();
        }
  }
}

void attention_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv, const float* out,
                      const float* lse, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int B, int Tq,
                      int Tk, int NH, int KVH, int HS) {
  const int QKV = (NH + 2 * KVH) * HS, KV = 2 * KVH * HS, group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::fill(dkv, dkv + static_cast<size_t>(B) * Tk * KV, 0.0f);
  // One thread per (row, k/v head): it alone adds into that head's dk and dv, in the order
  // (query position, query head of the group), so the sums do not depend on the thread count.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int kvh = 0; kvh < KVH; ++kvh)
      for (int t = 0; t < Tq; ++t)
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          const size_t row = static_cast<size_t>(b) * Tq + t;
          const float* q = qkv + row * QKV + static_cast<size_t>(h) * HS;
          const float* o = out + row * NH * HS + static_cast<size_t>(h) * HS;
          const float* d_o = dout + row * NH * HS + static_cast<size_t>(h) * HS;
          float* dq = dqkv + row * QKV + static_cast<size_t>(h) * HS;
          float D = 0.0f;  // Σ dO·O: the softmax backward's row term
          for (int i = 0; i < HS; ++i) D += d_o[i] * o[i];
          const float L = lse[(static_cast<size_t>(b) * NH + h) * Tq + t];
          const int last = std::min(qpos[t], Tk - 1);
          const int32_t seg = seg_q ? seg_q[row] : 0;
          for (int i = 0; i < HS; ++i) dq[i] = 0.0f;
          for (int j = 0; j <= last; ++j) {
            if (seg_k && seg_k[static_cast<size_t>(b) * Tk + j] != seg) continue;
            const float* kvrow = kv + (static_cast<size_t>(b) * Tk + j) * KV;
            const float* k = kvrow + static_cast<size_t>(kvh) * HS;
            const float* v = kvrow + static_cast<size_t>(KVH + kvh) * HS;
            float* dk = dkv + (static_cast<size_t>(b) * Tk + j) * KV + static_cast<size_t>(kvh) * HS;
            float* dv = dkv + (static_cast<size_t>(b) * Tk + j) * KV + static_cast<size_t>(KVH + kvh) * HS;
            float s = 0.0f, dp = 0.0f;
            for (int i = 0; i < HS; ++i) s += q[i] * k[i], dp += d_o[i] * v[i];
            const float p = std::exp(s * scale - L);
            const float ds = p * (dp - D) * scale;
            for (int i = 0; i < HS; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
              dv[i] += p * d_o[i];
            }
          }
        }
}

namespace {

// n floats rounded to bf16 (to nearest even) and widened back: what the bf16 table's kernels read.
std::vector<float> rounded(const float* x, size_t n) {
  std::vector<uint16_t> bits(n);
  std::vector<float> r(n);
  bf16_pack(bits.data(), x, n);
  bf16_unpack(r.data(), bits.data(), n);
  return r;
}

}  // namespace

void attention_cp_fwd_bf16(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                           const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, KV = 2 * static_cast<size_t>(KVH) * HS;
  const auto q = rounded(qkv, static_cast<size_t>(B) * Tq * QKV), k = rounded(kv, static_cast<size_t>(B) * Tk * KV);
  attention_cp_fwd(out, lse, q.data(), k.data(), qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS);
}

void attention_cp_bwd_bf16(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                           const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                           const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS) {
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS, KV = 2 * static_cast<size_t>(KVH) * HS;
  const auto q = rounded(qkv, static_cast<size_t>(B) * Tq * QKV), k = rounded(kv, static_cast<size_t>(B) * Tk * KV);
  const auto d = rounded(dout, static_cast<size_t>(B) * Tq * NH * HS);
  attention_cp_bwd(dqkv, dkv, d.data(), q.data(), k.data(), out, lse, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS);
}

}  // namespace sftdp::cpu
