// kernels/cpu/rope.cpp — rotary position embeddings (rotate_half layout), CPU twin
// (see kernels/rope.h). Legend: B batch, T seq, NH q heads, KVH k/v heads, HS head size,
// QKV = (NH + 2·KVH)·HS. Both passes are in place and touch only the q and k heads.
// Parallel over (b, t) rows; each row's cos/sin are made once, in chunks on the stack, and
// shared by all its heads. Every element's result depends on that element alone: deterministic.
#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/act16_util.h"
#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {
constexpr int kChunk = 64;  // frequencies whose cos/sin one row holds at a time

// Rotates the q and k heads of one row by pos·inv_freq (kSign = +1) or by its negation
// (kSign = −1, the transpose: rope_bwd).
template <int kSign>
void rotate_row(float* row, int pos, const float* inv_freq, int n_heads, int HS) {
  const int half = HS / 2;
  float cs[kChunk], sn[kChunk];
  for (int i0 = 0; i0 < half; i0 += kChunk) {
    const int n = std::min(kChunk, half - i0);
    for (int i = 0; i < n; ++i) {  // the angle and its cos/sin in double (the header's contract)
      const double a = static_cast<double>(pos) * static_cast<double>(inv_freq[i0 + i]);
      cs[i] = static_cast<float>(std::cos(a));
      sn[i] = static_cast<float>(kSign * std::sin(a));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* x = row + static_cast<size_t>(h) * HS + i0;  // first half
      float* y = x + half;                                // second half
      for (int i = 0; i < n; ++i) {
        const float xi = x[i], yi = y[i];
        x[i] = xi * cs[i] - yi * sn[i];
        y[i] = yi * cs[i] + xi * sn[i];
      }
    }
  }
}

template <int kSign>
void rope(float* qkv, const int32_t* positions, const float* inv_freq,  // (B,T,QKV) (B,T) (HS/2)
          int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(HS % 2 == 0, "rope: the head size must be even");
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  const int BT = B * T;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < BT; ++bt) {
    const int pos = positions ? positions[bt] : bt % T;
    rotate_row<kSign>(qkv + bt * QKV, pos, inv_freq, NH + KVH, HS);  // q and k heads are adjacent
  }
}
}  // namespace

void rope_fwd(float* qkv, const int32_t* positions, const float* inv_freq,  // (B,T,QKV) in place
              int B, int T, int NH, int KVH, int HS) {
  rope<+1>(qkv, positions, inv_freq, B, T, NH, KVH, HS);
}

void rope_bwd(float* dqkv, const int32_t* positions, const float* inv_freq,  // (B,T,QKV) in place
              int B, int T, int NH, int KVH, int HS) {
  rope<-1>(dqkv, positions, inv_freq, B, T, NH, KVH, HS);
}

namespace act16 {  // the fp32 twins on the widened rows, each value rounded back once (v's are unchanged)

void rope_fwd(uint16_t* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS) {
  std::vector<float> x = widen(qkv, static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS);
  cpu::rope_fwd(x.data(), positions, inv_freq, B, T, NH, KVH, HS);
  narrow(qkv, x);
}

void rope_bwd(uint16_t* dqkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS) {
  std::vector<float> x = widen(dqkv, static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS);
  cpu::rope_bwd(x.data(), positions, inv_freq, B, T, NH, KVH, HS);
  narrow(dqkv, x);
}

}  // namespace act16

}  // namespace sftdp::cpu
