// kernels/cpu/sgemm.cpp — parallel_sgemm (kernels/cpu/sgemm.h): the larger of M and N is cut into
// fixed kOutputBlock-wide blocks that OpenMP threads share; each block is one single-threaded
// cblas_sgemm, so the blocks and their order of summation are fixed by the shape alone.
#include "kernels/cpu/sgemm.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {

constexpr int kOutputBlock = 128;  // rows or columns of C per sgemm call; fixed for determinism

std::string gemm_shape(int M, int N, int K, int lda, int ldb, int ldc) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         " lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) + " ldc=" + std::to_string(ldc);
}

}  // namespace

void parallel_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  const bool a_t = trans_a == CblasTrans, b_t = trans_b == CblasTrans;
  const bool ok = M > 0 && N > 0 && K > 0 && A && B && C && lda >= (a_t ? M : K) && ldb >= (b_t ? K : N) && ldc >= N;
  SFTDP_ASSERT(ok, "bad cblas_sgemm arguments: " + gemm_shape(M, N, K, lda, ldb, ldc));
  use_single_threaded_blas();
  const bool split_rows = M >= N;
  const int extent = split_rows ? M : N;
  const int n_blocks = (extent + kOutputBlock - 1) / kOutputBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int lo = blk * kOutputBlock, len = std::min(kOutputBlock, extent - lo);
    if (split_rows) {  // rows [lo, lo+len) of C need rows [lo, ..) of op(A)
      const float* a = A + (a_t ? static_cast<size_t>(lo) : static_cast<size_t>(lo) * lda);
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, len, N, K, alpha, a, lda, B, ldb, beta,
                  C + static_cast<size_t>(lo) * ldc, ldc);
    } else {  // columns [lo, lo+len) of C need columns [lo, ..) of op(B)
      const float* b = B + (b_t ? static_cast<size_t>(lo) * ldb : static_cast<size_t>(lo));
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, M, len, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
  }
}

}  // namespace sftdp::cpu
