// kernels/cuda/scratch.h — how much working memory the CUDA tables' kernels keep for themselves at a
// shape (Ops::scratch_bytes): the slots of common.cuh's Scratch, an estimate from above. Plain
// arithmetic, no CUDA: kernels/cuda/ops.cu puts it in both CUDA tables and defines ops.h's
// cuda_scratch_bytes with it, and so does kernels/no_cuda.cpp in a build without CUDA, which still
// plans GPU runs (sft_train --plan). Kept next to the launchers it counts: a slot that grows there
// grows here.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/ops.h"

namespace sftdp::cuda {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // gemm.cu's kWorkspaceBytes (kGemmWorkspace)

// The cuBLASLt workspace; with bf16 GEMM inputs (the cuda-bf16 table) bf16 copies of the two
// largest GEMM operands (kGemmA16, kGemmB16) and of matmul_bwd's dout, rounded once (kGemmDout16),
// and the tensor-core attention's bf16 copies of q, k, v and dO with its tiles' segment ranges
// (kAttnQkv16, kAttnDout16, kAttnRanges: the act16 entries read bf16 where it is and use only the
// ranges, but the table's fp32-interface entries still make the copies); column partials
// (kColumnPartials), the cross-entropy's rows (kCrossEntropyRows), attention's D (kAttnDelta) and the
// encoder's buckets (kEncoderBuckets).
// The partials' 2·widest floats per 128 rows also hold the act16 layernorm backward's three sums of C
// (padded to 4) per 128 rows (widest >= 2·F >= 2·C), and their slack the 4-byte kBlocksDone counter.
template <GemmInputs inputs>
size_t scratch_bytes(const ScratchShape& s) {
  constexpr bool bf16 = inputs == GemmInputs::kBf16;
  const size_t N = size_t(s.B) * s.T, widest = std::max<size_t>({size_t(s.C), 2 * size_t(s.F), size_t(s.qkv_dim)});
  const size_t largest = std::max({N * widest, size_t(s.V) * s.C, size_t(s.head_rows) * s.V, 2 * size_t(s.F) * s.C});
  const size_t tiles = (size_t(s.T) + attention_bf16::kTile - 1) / attention_bf16::kTile;
  // with context parallelism also of the gathered keys and values, and their tiles' ranges (kAttnKv16,
  // kAttnRangesKeys)
  const size_t context_keys = size_t(s.B) * s.context_T;
  const size_t context_tiles = (size_t(s.context_T) + attention_bf16::kTile - 1) / attention_bf16::kTile;
  const size_t attention_copies =
      bf16 && attention_bf16::tensor_cores(s.HS)
          ? N * (size_t(s.qkv_dim) + s.attn_dim) * 2 + size_t(s.B) * tiles * 8 +
                context_keys * 2 * s.KVH * s.HS * 2 + size_t(s.B) * context_tiles * 8
          : 0;
  const size_t dout_copy = std::max(N * widest, size_t(s.head_rows) * (s.V + 7)) * 2;  // its ld padded to 8
  const size_t bf16_copies = bf16 ? 2 * largest * 2 + dout_copy + attention_copies : 0;
  const size_t partials = (N / 128 + 1) * widest * 2 * sizeof(float);
  return kGemmWorkspaceBytes + bf16_copies + partials + N * 2 * sizeof(double) +
         size_t(s.B) * s.NH * s.T * sizeof(float) + 7 * N * sizeof(int32_t);
}

constexpr ScratchBytes scratch_entry(GemmInputs inputs) {
  return inputs == GemmInputs::kBf16 ? &scratch_bytes<GemmInputs::kBf16> : &scratch_bytes<GemmInputs::kFp32>;
}

}  // namespace sftdp::cuda
