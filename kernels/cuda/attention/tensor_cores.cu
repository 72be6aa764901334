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
// Context parallelism (attention_tc_cp_*): the same kernels with this rank's Tq query rows at increasing global
// positions qpos against the group's Tk gathered keys and values (kernels/attention.h), the tiles' Layout
// (tc_tiles.cuh) saying where each is. Key tiles are aligned at global positions as in the whole rows and a query
// tile visits those up to its last row's position, so each query row's out, lse and dq are bitwise the whole-row
// kernels' at its position; dK/dV of a key tile sum this rank's query tiles that may see it (none: zeros).
// Accumulation: out =, lse =, dqkv = (context parallelism: its q heads =, dkv =).
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
// stages of lse, D, segment ids and positions, the fragments; dQ: two stages of segment ids, the fragments.
constexpr int kFwdExtraBytes = 2 * kTile * 4 + kWarps * 16 * 4 + kRowGroups * 2 * kWarp * 4 + kRowGroups * 16 * 4 +
                               kWarps * kFragWords * 4;
constexpr int kDkvExtraBytes = 2 * 4 * kTile * 4 + kWarps * kFragWords * 4;
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

int tiles_of(int T) { return static_cast<int>(ceil_div(T, kTile)); }

// The (min, max) segment id of every 64-row tile of B rows of T (scratch slot `slot`), or null without segments.
const int2* segment_ranges(Scratch slot, const int32_t* seg, int B, int T, cudaStream_t stream) {
  if (!seg) return nullptr;
  int2* ranges = scratch_as<int2>(slot, static_cast<size_t>(B) * tiles_of(T));
  SFTDP_LAUNCH(attention_tc_segment_ranges_kernel, dim3(tiles_of(T), B), kTile, 0, stream, ranges, seg, T);
  CHECK_LAUNCH();
  return ranges;
}

// What a launch's kernels are given: where the rows are, and the shape.
struct Launch {
  Layout lay;
  int Tq, Tk, NH, KVH;
  int q_tiles() const { return tiles_of(Tq); }
  int k_tiles() const { return tiles_of(Tk); }
};

// The whole rows: queries, keys and values all in qkv.
Launch whole_rows(const bf16* qkv, const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  const int2* ranges = segment_ranges(Scratch::kAttnRanges, seg, B, T, stream);
  return {{nullptr, qkv, (NH + 2 * KVH) * HS, NH * HS, (NH + KVH) * HS, seg, seg, ranges, ranges}, T, T, NH, KVH};
}

// Context parallelism: Tq query rows at positions qpos against the Tk gathered rows of kv (B, Tk, 2·KVH·HS).
Launch context_rows(const bf16* kv, const int32_t* qpos, const int32_t* seg_q, const int32_t* seg_k, int B, int Tq,
                    int Tk, int NH, int KVH, int HS, cudaStream_t stream) {
  const int2* q_ranges = segment_ranges(Scratch::kAttnRanges, seg_q, B, Tq, stream);
  const int2* k_ranges = segment_ranges(Scratch::kAttnRangesKeys, seg_k, B, Tk, stream);
  return {{qpos, kv, 2 * KVH * HS, 0, KVH * HS, seg_q, seg_k, q_ranges, k_ranges}, Tq, Tk, NH, KVH};
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

struct Scales {
  float scale, scale_log2;
};
Scales scales(int HS) { return {attention_bf16::scale(HS), attention_bf16::scale_log2(HS)}; }

template <int HS>
void forward_hs(Output out, float* lse, const bf16* qkv, const Launch& l, int B, cudaStream_t stream) {
  static bool opted = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_fwd_kernel<HS>), fwd_smem<HS>(), opted);
  const Scales s = scales(HS);
  SFTDP_LAUNCH(attention_tc_fwd_kernel<HS>, dim3(l.q_tiles(), l.NH, B), kThreads, fwd_smem<HS>(), stream, out.f32,
               out.b16, lse, qkv, l.lay, l.Tq, l.Tk, l.NH, l.KVH, s.scale, s.scale_log2);
  CHECK_LAUNCH();
}

template <int HS>
void backward_hs(Output dq, Output dkv, const bf16* qkv, const bf16* dout, const float* lse, const float* delta,
                 const Launch& l, int B, cudaStream_t stream) {
  static bool opted_dkv = false, opted_dq = false;
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dkv_kernel<HS>), dkv_smem<HS>(), opted_dkv);
  allow_shared(reinterpret_cast<const void*>(&attention_tc_bwd_dq_kernel<HS>), dq_smem<HS>(), opted_dq);
  const Scales s = scales(HS);
  SFTDP_LAUNCH(attention_tc_bwd_dkv_kernel<HS>, dim3(l.k_tiles(), l.KVH, B), kThreads, dkv_smem<HS>(), stream, dkv.f32,
               dkv.b16, qkv, dout, lse, delta, l.lay, l.Tq, l.Tk, l.NH, l.KVH, s.scale, s.scale_log2);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(attention_tc_bwd_dq_kernel<HS>, dim3(l.q_tiles(), l.NH, B), kThreads, dq_smem<HS>(), stream, dq.f32,
               dq.b16, qkv, dout, lse, delta, l.lay, l.Tq, l.Tk, l.NH, l.KVH, s.scale, s.scale_log2);
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

void check_dims(const char* op, int B, int Tq, int Tk, int NH, int KVH) {
  SFTDP_ASSERT(B >= 0 && Tq > 0 && Tk > 0 && NH > 0 && KVH > 0 && NH % KVH == 0,
               std::string(op) + ": need B >= 0, T > 0 and NH a positive multiple of KVH");
  SFTDP_ASSERT(B <= 65535 && NH <= 65535, std::string(op) + ": B and NH must fit gridDim.z/y (65535)");
}

// Both interfaces' forward on bf16 q|k|v (the query rows) and the launch's keys and values.
void forward(Output out, float* lse, const bf16* qkv, const Launch& launch, int B, int HS, cudaStream_t stream) {
  with_head_size(HS, [&]<int kHS>() { forward_hs<kHS>(out, lse, qkv, launch, B, stream); });
}

// Both interfaces' backward on bf16 q|k|v and dO (O: the stored output's type, which D reads): dQ into dq's q heads,
// dK and dV into dkv laid out as the launch's keys and values.
template <class O>
void backward(Output dq, Output dkv, const bf16* dout, const bf16* qkv, const O* out, const float* lse,
              const Launch& launch, int B, int HS, cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(B) * launch.Tq * launch.NH;
  float* delta = scratch_as<float>(Scratch::kAttnDelta, rows);
  SFTDP_LAUNCH(attention_tc_bwd_delta_kernel<O>, static_cast<unsigned>(ceil_div(rows, kWarps)), kThreads, 0, stream,
               delta, dout, out, static_cast<int>(rows), launch.Tq, launch.NH, HS);
  CHECK_LAUNCH();
  with_head_size(HS, [&]<int kHS>() { backward_hs<kHS>(dq, dkv, qkv, dout, lse, delta, launch, B, stream); });
}

}  // namespace

void attention_tc_fwd(float* out, float* lse, const float* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                      int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS)) return attention_fwd_bf16(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_fwd", B, T, T, NH, KVH);
  if (B == 0) return;
  const size_t n = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS;
  const bf16* qkv16 = bf16_copy(Scratch::kAttnQkv16, qkv, n, stream);
  forward({out, nullptr}, lse, qkv16, whole_rows(qkv16, seg, B, T, NH, KVH, HS, stream), B, HS, stream);
}

void attention_tc_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                      const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_bf16(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("attention_tc_bwd", B, T, T, NH, KVH);
  if (B == 0) return;
  const size_t n_qkv = static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS, n_out = static_cast<size_t>(B) * T * NH * HS;
  const bf16* qkv16 = bf16_copy(Scratch::kAttnQkv16, qkv, n_qkv, stream);
  const bf16* dout16 = bf16_copy(Scratch::kAttnDout16, dout, n_out, stream);
  backward({dqkv, nullptr}, {dqkv, nullptr}, dout16, qkv16, out, lse,
           whole_rows(qkv16, seg, B, T, NH, KVH, HS, stream), B, HS, stream);
}

void attention_tc_cp_fwd(float* out, float* lse, const float* qkv, const float* kv, const int32_t* qpos,
                         const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                         cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_cp_fwd_bf16(out, lse, qkv, kv, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream);
  check_dims("attention_tc_cp_fwd", B, Tq, Tk, NH, KVH);
  if (B == 0) return;
  const size_t n_qkv = static_cast<size_t>(B) * Tq * (NH + 2 * KVH) * HS;
  const size_t n_kv = static_cast<size_t>(B) * Tk * 2 * KVH * HS;
  const bf16* qkv16 = bf16_copy(Scratch::kAttnQkv16, qkv, n_qkv, stream);
  const bf16* kv16 = bf16_copy(Scratch::kAttnKv16, kv, n_kv, stream);
  forward({out, nullptr}, lse, qkv16, context_rows(kv16, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream), B, HS,
          stream);
}

void attention_tc_cp_bwd(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                         const float* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                         const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_cp_bwd_bf16(dqkv, dkv, dout, qkv, kv, out, lse, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS,
                                 stream);
  check_dims("attention_tc_cp_bwd", B, Tq, Tk, NH, KVH);
  if (B == 0) return;
  const size_t n_qkv = static_cast<size_t>(B) * Tq * (NH + 2 * KVH) * HS;
  const size_t n_kv = static_cast<size_t>(B) * Tk * 2 * KVH * HS;
  const bf16* qkv16 = bf16_copy(Scratch::kAttnQkv16, qkv, n_qkv, stream);
  const bf16* kv16 = bf16_copy(Scratch::kAttnKv16, kv, n_kv, stream);
  const bf16* dout16 = bf16_copy(Scratch::kAttnDout16, dout, static_cast<size_t>(B) * Tq * NH * HS, stream);
  backward({dqkv, nullptr}, {dkv, nullptr}, dout16, qkv16, out, lse,
           context_rows(kv16, qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream), B, HS, stream);
}

namespace act16 {

void attention_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const int32_t* seg, int B, int T, int NH, int KVH,
                   int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_fwd_cuda_cores(out, lse, qkv, seg, B, T, NH, KVH, HS, stream);
  check_dims("act16::attention_fwd", B, T, T, NH, KVH);
  if (B == 0) return;
  const bf16* qkv16 = reinterpret_cast<const bf16*>(qkv);
  forward({nullptr, reinterpret_cast<bf16*>(out)}, lse, qkv16, whole_rows(qkv16, seg, B, T, NH, KVH, HS, stream), B, HS,
          stream);
}

void attention_bwd(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out, const float* lse,
                   const int32_t* seg, int B, int T, int NH, int KVH, int HS, cudaStream_t stream) {
  if (!attention_bf16::tensor_cores(HS))
    return attention_bwd_cuda_cores(dqkv, dout, qkv, out, lse, seg, B, T, NH, KVH, HS, stream);
  check_dims("act16::attention_bwd", B, T, T, NH, KVH);
  if (B == 0) return;
  const bf16* qkv16 = reinterpret_cast<const bf16*>(qkv);
  const Output d{nullptr, reinterpret_cast<bf16*>(dqkv)};
  backward(d, d, reinterpret_cast<const bf16*>(dout), qkv16, reinterpret_cast<const bf16*>(out), lse,
           whole_rows(qkv16, seg, B, T, NH, KVH, HS, stream), B, HS, stream);
}

void attention_cp_fwd(uint16_t* out, float* lse, const uint16_t* qkv, const uint16_t* kv, const int32_t* qpos,
                      const int32_t* seg_q, const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS,
                      cudaStream_t stream) {
  SFTDP_ASSERT(attention_bf16::tensor_cores(HS), "act16::attention_cp_fwd: head sizes on tensor cores only");
  check_dims("act16::attention_cp_fwd", B, Tq, Tk, NH, KVH);
  if (B == 0) return;
  forward({nullptr, reinterpret_cast<bf16*>(out)}, lse, reinterpret_cast<const bf16*>(qkv),
          context_rows(reinterpret_cast<const bf16*>(kv), qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream), B, HS,
          stream);
}

void attention_cp_bwd(uint16_t* dqkv, float* dkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* kv,
                      const uint16_t* out, const float* lse, const int32_t* qpos, const int32_t* seg_q,
                      const int32_t* seg_k, int B, int Tq, int Tk, int NH, int KVH, int HS, cudaStream_t stream) {
  SFTDP_ASSERT(attention_bf16::tensor_cores(HS), "act16::attention_cp_bwd: head sizes on tensor cores only");
  check_dims("act16::attention_cp_bwd", B, Tq, Tk, NH, KVH);
  if (B == 0) return;
  backward({nullptr, reinterpret_cast<bf16*>(dqkv)}, {dkv, nullptr}, reinterpret_cast<const bf16*>(dout),
           reinterpret_cast<const bf16*>(qkv), reinterpret_cast<const bf16*>(out), lse,
           context_rows(reinterpret_cast<const bf16*>(kv), qpos, seg_q, seg_k, B, Tq, Tk, NH, KVH, HS, stream), B, HS,
           stream);
}

}  // namespace act16
}  // namespace sftdp::cuda
