// kernels/cpu/matmul.cpp — Linear layer out = inp·weightᵀ + bias, CPU twin (see kernels/matmul.h).
// Legend: N rows (= B·T), IC in channels, OC out channels; weight is [OC, IC] (PyTorch layout).
// Accumulation: dinp = (overwritten), dweight += (sgemm beta = 1), dbias +=.
// Threads come from OpenMP only: each GEMM is cut into fixed 128-wide blocks of its output, one
// single-threaded cblas_sgemm per block. One thread pool instead of two (OpenBLAS's pthreads
// spinning against libgomp's cost 5-10x on 2 cores), and the bits never depend on the thread
// count. OpenBLAS reports nothing on bad arguments, so every call is checked first.
// matmul_fwd_naive is the plain fp64-accumulating reference the tests trust.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "kernels/cpu/blas.h"
#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {

constexpr int kOutputBlock = 128;  // rows or columns of C per sgemm call; fixed for determinism
constexpr int kChannelBlock = 64;  // output channels one thread owns in the dbias pass

std::string gemm_shape(int M, int N, int K, int lda, int ldb, int ldc) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         " lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) +
         " ldc=" + std::to_string(ldc);
}

// Row-major C(M,N) = op(A)·op(B) + beta·C, A is M×K (K×M if transposed), B is K×N (N×K if
// transposed). Checks what OpenBLAS would silently misread, then splits the larger of M and N
// into kOutputBlock-wide blocks that OpenMP threads share.
void parallel_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K,
                    const float* A, int lda, const float* B, int ldb, float beta, float* C,
                    int ldc) {
  const bool a_t = trans_a == CblasTrans, b_t = trans_b == CblasTrans;
  const bool ok = M > 0 && N > 0 && K > 0 && A && B && C && lda >= (a_t ? M : K) &&
                  ldb >= (b_t ? K : N) && ldc >= N;
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
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, len, N, K, 1.0f, a, lda, B, ldb, beta,
                  C + static_cast<size_t>(lo) * ldc, ldc);
    } else {  // columns [lo, lo+len) of C need columns [lo, ..) of op(B)
      const float* b = B + (b_t ? static_cast<size_t>(lo) * ldb : static_cast<size_t>(lo));
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, M, len, K, 1.0f, A, lda, b, ldb, beta, C + lo,
                  ldc);
    }
  }
}

}  // namespace

void matmul_fwd(float* out,                                                 // (N,OC)
                const float* inp, const float* weight, const float* bias,  // (N,IC) (OC,IC) (OC)
                int N, int IC, int OC) {
  if (bias) {  // preload the bias so the GEMM adds onto it (beta = 1): no second pass over out
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      std::copy(bias, bias + OC, out + static_cast<size_t>(n) * OC);
  }
  // out(N,OC) (+)= inp(N,IC) · weight(OC,IC)ᵀ
  parallel_sgemm(CblasNoTrans, CblasTrans, N, OC, IC, inp, IC, weight, IC, bias ? 1.0f : 0.0f,
                 out, OC);
}

void matmul_bwd(float* dinp, float* dweight, float* dbias,                 // (N,IC) = ; (OC,IC) += ; (OC) +=
                const float* dout, const float* inp, const float* weight,  // (N,OC) (N,IC) (OC,IC)
                int N, int IC, int OC) {
  // dinp(N,IC) = dout(N,OC) · weight(OC,IC)
  parallel_sgemm(CblasNoTrans, CblasNoTrans, N, IC, OC, dout, OC, weight, IC, 0.0f, dinp, IC);
  // dweight(OC,IC) += dout(N,OC)ᵀ · inp(N,IC)
  parallel_sgemm(CblasTrans, CblasNoTrans, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, IC);
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
