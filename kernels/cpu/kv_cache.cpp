// kernels/cpu/kv_cache.cpp — the CPU twins of kernels/kv_cache.h: the reference (plain loops, fp32
// sums in key order, the softmax's exponentials after the row's maximum). Legend there.
#include "kernels/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace sftdp::cpu {

void kv_append(float* k_cache, float* v_cache, const float* qkv, int p, int Tq, int NH, int KVH, int HS) {
  const size_t QKV = size_t(NH + 2 * KVH) * HS, KV = size_t(KVH) * HS;
  for (int t = 0; t < Tq; ++t) {
    const float* row = qkv + t * QKV;
    std::copy(row + size_t(NH) * HS, row + size_t(NH) * HS + KV, k_cache + (p + t) * KV);
    std::copy(row + size_t(NH + KVH) * HS, row + QKV, v_cache + (p + t) * KV);
  }
}

void kv_attention_fwd(float* out, const float* qkv, const float* k_cache, const float* v_cache, int p, int Tq, int NH,
                      int KVH, int HS) {
  const size_t QKV = size_t(NH + 2 * KVH) * HS, KV = size_t(KVH) * HS, A = size_t(NH) * HS;
  const int group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    std::vector<float> s(size_t(p) + Tq);  // one query's scores
#pragma omp for collapse(2) schedule(static)
    for (int t = 0; t < Tq; ++t)
      for (int h = 0; h < NH; ++h) {
        const float* q = qkv + t * QKV + size_t(h) * HS;
        const size_t kv = size_t(h / group) * HS;
        const int n = p + t + 1;  // visible keys
        float m = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const float* k = k_cache + j * KV + kv;
          float dot = 0.0f;
          for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - m));
        float* o = out + t * A + size_t(h) * HS;
        std::fill(o, o + HS, 0.0f);
        for (int j = 0; j < n; ++j) {
          const float* v = v_cache + j * KV + kv;
          for (int i = 0; i < HS; ++i) o[i] += s[j] * v[i];
        }
        for (int i = 0; i < HS; ++i) o[i] /= sum;
      }
  }
}

}  // namespace sftdp::cpu
