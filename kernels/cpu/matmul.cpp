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

#include "kernels/cpu/sgemm.h"
#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {

constexpr int kChannelBlock = 64;  // output channels one thread owns in the dbias pass

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
  parallel_sgemm(CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, weight, IC, bias ? 1.0f : 0.0f, out, OC);
}

void matmul_bwd(float* dinp, float* dweight, float* dbias,                 // (N,IC) = ; (OC,IC) += ; (OC) +=
                const float* dout, const float* inp, const float* weight,  // (N,OC) (N,IC) (OC,IC)
                int N, int IC, int OC) {
  // dinp(N,IC) = dout(N,OC) · weight(OC,IC)
  parallel_sgemm(CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
  // dweight(OC,IC) += dout(N,OC)ᵀ · inp(N,IC); null: a frozen weight (LoRA), no gradient
  if (dweight) parallel_sgemm(CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
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
