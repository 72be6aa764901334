// kernels/cpu/sgemm.h — the CPU twins' one multi-threaded GEMM: row-major
// C(M,N) = alpha·op(A)·op(B) + beta·C over OpenMP threads, each running single-threaded
// cblas_sgemm on fixed 128-wide blocks of C, so the bits never depend on the thread count.
// A is M×K (K×M if transposed), B is K×N (N×K if transposed); lda/ldb/ldc are row strides, so
// strided views (a column slice of a wider matrix) work. Checks what OpenBLAS would silently misread.
#pragma once
#include "kernels/cpu/blas.h"

namespace sftdp::cpu {

void parallel_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace sftdp::cpu
