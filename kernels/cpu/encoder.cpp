// kernels/cpu/encoder.cpp — token + position embedding, CPU twin (see kernels/encoder.h).
// Legend: B batch, T seq, C channels, V vocab, maxT position-table rows. wpe == nullptr (and
// then dwpe == nullptr) means token embeddings only, with pos ignored.
// Backward accumulates into dwte/dwpe (+=) channel-block by channel-block, each block visiting
// the tokens in order, so every sum has one fixed order whatever the thread count.
#include "kernels/encoder.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {
// Position of token (b, t): the explicit position id, or t itself.
inline int position_of(const int32_t* pos, int bt, int t) { return pos ? pos[bt] : t; }
constexpr int kChannelBlock = 64;  // channels one thread owns in the backward pass
}  // namespace

void encoder_fwd(float* out,                              // (B,T,C)
                 const int32_t* inp, const int32_t* pos,  // (B,T) (B,T) or null
                 const float* wte, const float* wpe,      // (V,C) (maxT,C)
                 int B, int T, int C) {
  const int BT = B * T;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < BT; ++bt) {
    float* out_bt = out + static_cast<size_t>(bt) * C;
    const float* wte_ix = wte + static_cast<size_t>(inp[bt]) * C;
    if (!wpe) {  // token embeddings only (no learned positions)
      for (int c = 0; c < C; ++c) out_bt[c] = wte_ix[c];
      continue;
    }
    const float* wpe_p = wpe + static_cast<size_t>(position_of(pos, bt, bt % T)) * C;
    for (int c = 0; c < C; ++c) out_bt[c] = wte_ix[c] + wpe_p[c];
  }
}

void encoder_bwd(float* dwte, float* dwpe,                // (V,C) += ; (maxT,C) +=
                 const float* dout,                       // (B,T,C)
                 const int32_t* inp, const int32_t* pos,  // (B,T) (B,T) or null
                 const int32_t* /*buckets*/,              // the loop below adds in their order already
                 int B, int T, int C) {
  const int BT = B * T;
  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int bt = 0; bt < BT; ++bt) {  // tokens in order: a repeated token id sums in order
      const float* dout_bt = dout + static_cast<size_t>(bt) * C;
      float* dwte_ix = dwte + static_cast<size_t>(inp[bt]) * C;
      if (!dwpe) {  // token embeddings only (no learned positions)
        for (int c = c0; c < c1; ++c) dwte_ix[c] += dout_bt[c];
        continue;
      }
      float* dwpe_p = dwpe + static_cast<size_t>(position_of(pos, bt, bt % T)) * C;
      for (int c = c0; c < c1; ++c) {
        dwte_ix[c] += dout_bt[c];
        dwpe_p[c] += dout_bt[c];
      }
    }
  }
}

}  // namespace sftdp::cpu

namespace sftdp {

namespace {
// Stable buckets of the n keys into out at `at`: order (n) | starts (U+1) | rows (U, of n slots); returns U.
int bucket(const std::vector<int32_t>& keys, int32_t* at) {
  const int n = static_cast<int>(keys.size());
  int32_t *order = at, *starts = at + n, *rows = at + 2 * n + 1;
  std::iota(order, order + n, 0);
  std::stable_sort(order, order + n, [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  int U = 0;
  for (int j = 0; j < n; ++j) {
    if (j > 0 && keys[order[j]] == keys[order[j - 1]]) continue;
    starts[U] = j;
    rows[U] = keys[order[j]];
    ++U;
  }
  starts[U] = n;
  return U;
}
}  // namespace

size_t encoder_buckets_ints(size_t n) { return 2 + 2 * (3 * n + 1); }

void encoder_buckets(const int32_t* inp, const int32_t* pos, int B, int T, bool with_pos, std::vector<int32_t>& out) {
  const size_t n = static_cast<size_t>(B) * T;
  SFTDP_ASSERT(n <= static_cast<size_t>(INT32_MAX / 8), "encoder_buckets: B·T too large for int32 buckets");
  out.assign(encoder_buckets_ints(n), 0);
  std::vector<int32_t> keys(inp, inp + n);
  for (size_t i = 0; i < n; ++i) SFTDP_ASSERT(keys[i] >= 0, "encoder_buckets: negative token id at " + std::to_string(i));
  out[0] = bucket(keys, out.data() + 2);
  if (!with_pos) return;
  for (size_t i = 0; i < n; ++i) keys[i] = pos ? pos[i] : static_cast<int32_t>(i % T);
  for (size_t i = 0; i < n; ++i) SFTDP_ASSERT(keys[i] >= 0, "encoder_buckets: negative position at " + std::to_string(i));
  out[1] = bucket(keys, out.data() + 2 + 3 * n + 1);
}

}  // namespace sftdp
