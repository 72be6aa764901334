// kernels/cuda/attention/tensor_cores.cu — the bf16 attention (kernels/attention.h) on tensor cores, after FlashAttention-2:
// mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix from shared memory, K/V (and in backward Q/dO) tiles
// staged by cp.async two deep, the online softmax on the accumulator fragments, a backward without atomics. One set
// of kernels serves both interfaces: the cuda-bf16 table's fp32 one (attention_tc_*: q, k, v and dO cast to bf16
// copies first, out and dqkv written as fp32) and the act16 one (cuda::act16::*: bf16 q|k|v, dO and O read where
// they are, out and dqkv written as bf16, one rounding each); each kernel takes an fp32 and a bf16 output pointer,
// one of them null, and nothing else differs. Head sizes 16..128 in steps of 16; others go to the CUDA-core kernels
// of cuda_cores.cu.
// Legend: B batch, T seq, NH query heads, KVH k/v heads, G = NH/KVH, HS head size, QKV = (NH + 2·KVH)·HS,
// R = HS + 8 (a shared-memory row: 16 bytes of padding keep ldmatrix's eight rows in different banks), Tt = 64 (rows
// per tile, queries and keys).
// Blocks of 8 warps, two per SM (__launch_bounds__(256, 2): at most 128 registers, 16 warps/SM): a tile's 64 rows are
// 4 row groups of 16, each shared by a warp pair, warp w and w + 4 ("halves" 0 and 1). Each half computes the
// scores of half the middle dimension (keys in forward and dQ, queries in dK/dV) and accumulates half the output
// columns (HS/2); the pair trades its bf16(P) / bf16(dS) A fragments (and the forward its row maxima and partial row
// sums) through shared memory, so every element is computed once and every sum keeps the one-warp order below.
// With segments each 64-row tile's (min, max) segment id is found first.
// Forward, per (query tile, h, b): Q's fragments in registers (read from shared memory per key tile above HS 64); for
// each key tile that the tile may see (kt <= qt: the causal triangle beyond is skipped; with segments, tiles whose id
// ranges do not meet are skipped), in increasing order: S = Q·Kᵀ (raw, fp32), masked to −inf where invisible,
// m_new = max(m, rowmax S), P = exp2(S·scale·log2e − m_new·scale·log2e), α = exp2((m − m_new)·scale·log2e),
// l = l·α + rowsum P (fma; a lane's sum runs over keys 8n + 2t, 8n + 2t + 1 for n = 0..7, half 1 continuing half
// 0's), O = O·α + bf16(P)·V; at the end O/l and lse = m·scale + log l. A key tile with nothing visible for a row
// leaves its state exactly as it was, so skipping it changes no bit.
// Backward (7 GEMMs, not FlashAttention-2's 5: its dQ is summed over key tiles by atomics, and the deterministic ways
// to sum it from the dK/dV kernel cost a dQ copy per key tile or blocks that wait on each other): D = Σ dO·O per row
// (a warp per row); per (key tile, k/v head, b), over the group's query heads in increasing h and their query tiles
// in increasing order, 32 queries at a time: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dPᵀ = V·dOᵀ,
// dSᵀ = Pᵀ·(dPᵀ − D), dV += bf16(Pᵀ)·dO, dK += bf16(dSᵀ)·Q, then dK ·= scale; per (query tile, h, b): S, P, dP, dS as
// above, dQ += bf16(dS)·K over key tiles in increasing order, then dQ ·= scale. Every sum has an order fixed by the
// shape: the same bits on every run. kernels/cpu/attention_bf16.cpp does the same arithmetic (its header lists each
// rounding). Masked keys inside a visited tile must be finite (their P is 0, and 0·NaN is NaN in a product), as for
// any attention kernel on tensor cores.
// Accumulation: out =, lse =, dqkv =.
// Files: tc_tiles.cuh (constants, tile loads, fragments), tc_forward.cuh, tc_backward.cuh (the kernels), this
// file (shared-memory sizes, launchers, the two interfaces).
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention/cuda_cores.h"
#include "kernels/cuda/attention/tc_backward.cuh"
#include "kernels/cuda/attention/tc_forward.cuh"
#include "kernels/cuda/attention/tc_tiles.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"

#ifdef SFTDP_PLANTED_BUGS
namespace sftdp::cuda {
int planted_attention_bug = 0;  // which bug of tc_tiles.cuh's list is planted (0: none)
}  // namespace sftdp::cuda
#endif

namespace sftdp::cuda {
namespace {

// The kernels: tc_forward.cuh, tc_backward.cuh (their pieces: tc_tiles.cuh).

// ---- launchers ------------------------------------------------------------------------------------
// Shared memory past the (kTile, R) bf16 tiles, the same for every head size (bench/cost_model reads HS back from
// the total): forward: two stages of segment ids, the pair's row maxima, partial sums, l and P fragments; dK/dV: two
// stages of lse, D and segment ids, the fragments; dQ: two stages of segment ids, the fragments.
constexpr int kFwdExtraBytes = 2 * kTile * 4 + kWarps * 16 * 4 + kRowGroups * 2 * kWarp * 4 + kRowGroups * 16 * 4 +
                               kWarps * kFragWords * 4;
constexpr int kDkvExtraBytes = 2 * 3 * kTile * 4 + kWarps * kFragWords * 4;
constexpr int kDqExtraBytes = 2 * kTile * 4 + kWarps * kFragWords * 4;
template <int HS>
constexpr size_t fwd_smem() {  // Q, two stages of K and V
  return 5 * size_t{kTile} * (HS + 8) * sizeof(bf16) + kFwdExtraBytes;
}
template <int HS>
constexpr size_t dkv_smem() {  // K, V, two stages of Q and dO
  return 6 * size_t{kTile} * (HS + 8) * sizeof(bf16) + kDkvExtraBytes;
}
template <int HS>
constexpr size_t dq_smem() {  // Q, dO, two stages of K and V
  return 6 * size_t{kTile} * (HS + 8) * sizeof(bf16) + kDqExtraBytes;
}

// Opts `kernel` in to `bytes` of dynamic shared memory once per process (above 48 KiB CUDA needs it).
void allow_shared(const void* kernel, size_t bytes, bool& done) {
  if (done) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done = true;
}

// What every launch of one call shares: the tiles' segment ranges (scratch; null without segments) and the scales.
struct Prepared {
  const int2* ranges;  // (B, tiles) or null
  int tiles;
  float scale, scale_log2;
};
Prepared prepare(const int32_t* seg, int B, int T, int HS, cudaStream_t stream) {
  Prepared p{nullptr, static_cast<int>(ceil_div(T, kTile)), attention_bf16::scale(HS), attention_bf16::scale_log2(HS)};
  if (seg) {
    int2* ranges = scratch_as<int2>(Scratch::kAttnRanges, static_cast<size_t>(B) * p.tiles);
    SFTDP_LAUNCH(attention_tc_segment_ranges_kernel, dim3(p.tiles, B), kTile, 0, stream, ranges, seg, T);
    CHECK_LAUNCH();
    p.ranges = ranges;
  }
  return p;
}

// The bf16 copy of an fp32 tensor that the fp32 interface's kernels read (scratch slot `slot`).
const bf16* bf16_copy(Scratch slot, const float* x, size_t n, cudaStream_t stream) {
  bf16* copy = scratch_as<bf16>(slot, n);
  cast_fp32_to_bf16(copy, n, x, n, n, 1, stream);
  return copy;
}

// An output: fp32 (the fp32 interface) or bf16 (act16); the kernels take both pointers, one of them null.
struct Output {
  float* f32;
  bf16* b16;
};

template <int HS>
void forward_hs(Output out, float* lse, const bf16* qkv, const Prepared& p, const int32_t* seg, int B, int T, int NH,
                int KVH, cudaStream_t stream) {
  static bool opted = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_fwd_kernel<HS>), fwd_smem<HS>(), opted);
  SFTDP_LAUNCH(attention_tc_fwd_kernel<HS>, dim3(p.tiles, NH, B), kThreads, fwd_smem<HS>(), stream, out.f32, out.b16,
               lse, qkv, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
}

template <int HS>
void backward_hs(Output dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* delta,
                 const Prepared& p, const int32_t* seg, int B, int T, int NH, int KVH, cudaStream_t stream) {
  static bool opted_dkv = false, opted_dq = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dkv_kernel<HS>), dkv_smem<HS>(), opted_dkv);
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dq_kernel<HS>), dq_smem<HS>(), opted_dq);
  SFTDP_LAUNCH(attention_tc_bwd_dkv_kernel<HS>, dim3(p.tiles, KVH, B), kThreads, dkv_smem<HS>(), stream, dqkv.f32,
               dqkv.b16, qkv, dout, lse, delta, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(attention_tc_bwd_dq_kernel<HS>, dim3(p.tiles, NH, B), kThreads, dq_smem<HS>(), stream, dqkv.f32,
               dqkv.b16, qkv, dout, lse, delta, seg, p.ranges, T, NH, KVH, p.scale, p.scale_log2);
  CHECK_LAUNCH();
}

// f.template operator()<HS>() for the head sizes the tensor-core kernels are built for.
template <class F>
void with_head_size(int HS, F&& f) {
  switch (HS) {
    case 16:
      return f.template operator()<16>();
    case 32:
      return f.template operator()<32>();
    case 48:
      return f.template operator()<48>();
    case 64:
      return f.template operator()<64>();
    case 80:
      return f.template operator()<80>();
    case 96:
      return f.template operator()<96>();
    case 112:
      return f.template operator()<112>();
    case 128:
      return f.template operator()<128>();
  }
  SFTDP_ASSERT(false, "attention_tc: head size " + std::to_string(HS) + " has no tensor-core kernel");
}

void check_dims(const char* op, int B, int T, int NH, int KVH) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && NH % KVH == 0,
               std::string(op) + ": need B >= 0, T > 0 and NH a positive multiple of KVH");
  SFTDP_ASSERT(B <= 65535 && NH <= 65535, std::string(op) + ": B and NH must fit gridDim.z/y (65535)");
}

// Both interfaces' forward on bf16 q|k|v.
void forward(Output out, float* lse, const bf16* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS,
             cudaStream_t stream) {
  const Prepared p = prepare(seg, B, T, HS, stream);
  with_head_size(HS, [&]<int kHS>() { forward_hs<kHS>(out, lse, qkv, p, seg, B, T, NH, KVH, stream); });
}

// Both interfaces' backward on bf16 q|k|v and dO (O: the stored output's type, which D reads).
template <class O>
void backward(Output dqkv, const bf16* dout, const bf16* qkv, const O* out, const float* lse, const int32_t* seg, int B,
              int T, int NH, int KVH, int HS, cudaStream_t stream) {
  const Prepared p = prepare(seg, B, T, HS, stream);
  const size_t rows = static_cast<size_t>(B) * T * NH;
  float* delta = scratch_as<float>(Scratch::kAttnDelta, rows);
  SFTDP_LAUNCH(attention_tc_bwd_delta_kernel<O>, static_cast<unsigned>(ceil_div(rows, kWarps)), kThreads, 0, stream,
               delta, dout, out, static_cast<int>(rows), T, NH, HS);
  CHECK_LAUNCH();
  with_head_size(HS, [&]<int kHS>() {
    backward_hs<kHS>(dqkv, qkv, dout, lse, delta, p, seg, B, T, NH, KVH, stream);
  });
}

}  // namespace

void attention_tc_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                      int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS)) return attention_fwd_bf16(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_fwd", B, T, NH, KVH);
  if (B == 0) return;
  const size_t n = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS;
  forward({out, nullptr}, lse, bf16_copy(Scratch::kAttnQkv16, qkv, n, stream), seg, B, T, NH, KVH, HS, stream);
}

void attention_tc_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                      const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_bf16(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_bwd", B, T, NH, KVH);
  if (B == 0) return;
  const size_t n_qkv = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS, n_out = static_cast<size_t>(B) * T * NH * HS;
  const bf16* qkv16 = bf16_copy(Scratch::kAttnQkv16, qkv, n_qkv, stream);
  const bf16* dout16 = bf16_copy(Scratch::kAttnDout16, dout, n_out, stream);
  backward({dqkv, nullptr}, dout16, qkv16, out, lse, seg, B, T, NH, KVH, HS, stream);
}

namespace act16 {

void attention_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                   int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_fwd_cuda_cores(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("act16::attention_fwd", B, T, NH, KVH);
  if (B == 0) return;
  forward({nullptr, reinterpret_cast<bf16*>(out)}, lse, reinterpret_cast<const bf16*>(qkv), seg, B, T, NH, KVH, HS,
          stream);
}

void attention_bwd(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_cuda_cores(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("act16::attention_bwd", B, T, NH, KVH);
  if (B == 0) return;
  backward({nullptr, reinterpret_cast<bf16*>(dqkv)}, reinterpret_cast<const bf16*>(dout),
           reinterpret_cast<const bf16*>(qkv), reinterpret_cast<const bf16*>(out), lse, seg, B, T, NH, KVH, HS, stream);
}

}  // namespace act16
}  // namespace sftdp::cuda
