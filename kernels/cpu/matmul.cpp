// kernels/cpu/matmul.cpp — Linear layer out = inp·weightᵀ + bias, CPU twin (see kernels/matmul.h).
// Legend: N rows (= B·T), IC in channels, OC out channels; weight is [OC, IC] (PyTorch layout).
// Accumulation: dinp = (overwritten), dweight += (sgemm beta = 1), dbias +=.
// GEMMs go to OpenBLAS cblas_sgemm, which reports nothing on bad arguments, so every call is
// checked first. matmul_fwd_naive is the plain fp64-accumulating reference the tests trust.
#include "kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {

constexpr int kChannelBlock = 64;  // output channels one thread owns in the dbias pass

std::string gemm_shape(int M, int N, int K, int lda, int ldb, int ldc) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         " lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) +
         " ldc=" + std::to_string(ldc);
}

// Row-major C(M,N) = alpha·op(A)·op(B) + beta·C after checking what OpenBLAS would silently
// misread: positive sizes, non-null buffers and leading dimensions that cover each row.
void checked_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K,
                   const float* A, int lda, const float* B, int ldb, float beta, float* C,
                   int ldc) {
  const int a_cols = trans_a == CblasNoTrans ? K : M;  // row-major A is M×K, or K×M transposed
  const int b_cols = trans_b == CblasNoTrans ? N : K;  // row-major B is K×N, or N×K transposed
  const bool ok = M > 0 && N > 0 && K > 0 && A && B && C && lda >= a_cols && ldb >= b_cols &&
                  ldc >= N;
  SFTDP_ASSERT(ok, "bad cblas_sgemm arguments: " + gemm_shape(M, N, K, lda, ldb, ldc));
  cblas_sgemm(CblasRowMajor, trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void matmul_fwd(float* out,                                                 // (N,OC)
                const float* inp, const float* weight, const float* bias,  // (N,IC) (OC,IC) (OC)
                int N, int IC, int OC) {
  // out(N,OC) = inp(N,IC) · weight(OC,IC)ᵀ
  checked_sgemm(CblasNoTrans, CblasTrans, N, OC, IC, inp, IC, weight, IC, 0.0f, out, OC);
  if (!bias) return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<size_t>(n) * OC;
    for (int o = 0; o < OC; ++o) row[o] += bias[o];
  }
}

void matmul_bwd(float* dinp, float* dweight, float* dbias,                 // (N,IC) = ; (OC,IC) += ; (OC) +=
                const float* dout, const float* inp, const float* weight,  // (N,OC) (N,IC) (OC,IC)
                int N, int IC, int OC) {
  // dinp(N,IC) = dout(N,OC) · weight(OC,IC)
  checked_sgemm(CblasNoTrans, CblasNoTrans, N, IC, OC, dout, OC, weight, IC, 0.0f, dinp, IC);
  // dweight(OC,IC) += dout(N,OC)ᵀ · inp(N,IC)
  checked_sgemm(CblasTrans, CblasNoTrans, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, IC);
  if (!dbias) return;
  const int n_blocks = (OC + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int o0 = blk * kChannelBlock, o1 = std::min(OC, o0 + kChannelBlock);
    for (int n = 0; n < N; ++n) {  // rows in order: one fixed summation order
      const float* row = dout + static_cast<size_t>(n) * OC;
      for (int o = o0; o < o1; ++o) dbias[o] += row[o];
    }
  }
}

void matmul_fwd_naive(float* out, const float* inp, const float* weight, const float* bias,
                      int N, int IC, int OC) {
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * IC;
    for (int o = 0; o < OC; ++o) {
      const float* w = weight + static_cast<size_t>(o) * IC;
      double acc = bias ? bias[o] : 0.0;
      for (int i = 0; i < IC; ++i) acc += static_cast<double>(x[i]) * w[i];
      out[static_cast<size_t>(n) * OC + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace sftdp::cpu
