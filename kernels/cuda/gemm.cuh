// kernels/cuda/gemm.cuh — the one GEMM entry of the CUDA kernels, in row-major terms, run by
// cuBLASLt with fp32 compute (CUBLAS_COMPUTE_32F: TF32 is never used) and fp32 C/D. In bf16 mode
// the inputs A and B are first rounded to bf16 copies (scratch) and cuBLASLt reads those; C, D,
// the bias and all accumulation stay fp32. cuBLASLt is bitwise reproducible for a fixed algorithm
// on one GPU model; the algorithm is chosen once per (shape, alignment) and cached.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace sftdp::cuda {

// Strided batches: matrix i of A starts at A + i·stride_a (elements), likewise B and C.
struct GemmBatch {
  int count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// C[M,N] = alpha · op(A) · op(B) + beta · C, then + bias[n] on every row when bias != null.
// Row-major throughout: op(A) is [M,K] — A stored [M,K] with row stride lda, or [K,M] when
// trans_a; op(B) is [K,N] — B stored [K,N] with row stride ldb, or [N,K] when trans_b; C stored
// [M,N] with row stride ldc. beta = 0 never reads C (poisoned C is fine).
// bf16_inputs: A and B rounded to bf16 first (batch.count must be 1), into copies whose leading
// dimension is rounded up to a multiple of 8 elements (16-byte rows, as tensor-core kernels need) —
// or, for an operand inside a registered bf16 mirror (set_bf16_mirror), that mirror read in place.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
          const float* bias, bool bf16_inputs, const GemmBatch& batch, cudaStream_t stream);

// The act16 path's GEMM (kernels/act16.h; matmul.cu's act16::linear_fwd / linear_bwd), row-major as gemm():
//   D = epilogue(op(A)·op(B) + beta·C)
// Each of A and B is bf16 in place, or fp32 read through its bf16 mirror (rounded into a copy when it has none);
// C (read when beta != 0) is fp32 and may differ from D (the residual stream in, its next value out); D is fp32 or
// bf16. The epilogue, cuBLASLt's where an algorithm takes it, else the same arithmetic in a kernel after a plain
// GEMM (fp32 z into scratch): one rounding to D's type either way.
struct Gemm16Operand {
  const void* p = nullptr;
  bool bf16 = false;  // bf16 storage; else fp32 (a parameter), read as its bf16 mirror
  int ld = 0;
};
struct Gemm16Epilogue {
  enum Kind {
    kNone,
    kBias,         // D = z + b: b = bias (fp32 D), bf16(bias) (bf16 D), as cuBLASLt requires the bias in D's type
    kGeluAuxBias,  // D = gelu(z + b), aux = bf16(z + b): bf16 D only
    kDgelu,        // D = z·gelu'(aux): bf16 D, no C
  };
  Kind kind = kNone;
  const float* bias = nullptr;   // fp32 parameter (kBias, kGeluAuxBias): (N) values, one per column of row-major D
  uint16_t* aux = nullptr;       // bf16 [M,N] at row stride ld_aux (kGeluAuxBias writes it, kDgelu reads it)
  int ld_aux = 0;
  float* a_row_sums = nullptr;   // not null: = Σ_k op(A)[i,k] for each of the M rows (overwritten), fp32 D only:
                                 // the bias gradient of a weight-gradient GEMM (op(A) = doutᵀ); trans_a required
};
void gemm16(bool trans_a, bool trans_b, int M, int N, int K, Gemm16Operand A, Gemm16Operand B, float beta,
            const float* C, int ldc, void* D, bool d_bf16, int ldd, const Gemm16Epilogue& epilogue,
            cudaStream_t stream);

// The bf16 mirrors of kernels/bf16.h's bf16_mirror: slots 0 .. kMirrorSlots-1 are the model's;
// kGemmPrivateMirror is for the launchers here (matmul_bwd rounds dout once for both its GEMMs).
// Host state: one host thread queues on the one stream (as the scratch slots assume).
constexpr int kGemmPrivateMirror = 4;
void set_bf16_mirror(int slot, const float* src, const __nv_bfloat16* copy, size_t n);
// The launchers' mirror (kGemmPrivateMirror): the row-major matrix src[rows][ld] rounded into copy with
// rows padded to padded_bf16_ld(ld), read by GEMMs whose operand has that very leading dimension.
// rows = 0 clears it.
void set_bf16_matrix_mirror(const float* src, int rows, int ld, const __nv_bfloat16* copy);
// ld rounded up to a multiple of 8 elements: the leading dimension of every bf16 operand copy.
inline int padded_bf16_ld(int ld) { return (ld + 7) / 8 * 8; }

}  // namespace sftdp::cuda
