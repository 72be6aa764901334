// kernels/cpu/matmul.cpp — Linear layer out = inp·weightᵀ + bias, CPU twin (see kernels/matmul.h).
// Legend: N rows (= B·T), IC in channels, OC out channels; weight is [OC, IC] (PyTorch layout).
// Accumulation: dinp = (overwritten), dweight += (sgemm beta = 1), dbias +=.
// Threads come from OpenMP only: each GEMM is cut into fixed 128-wide blocks of its output, one
// single-threaded cblas_sgemm per block. One thread pool instead of two (OpenBLAS's pthreads
// spinning against libgomp's cost 5-10x on 2 cores), and the bits never depend on the thread
// count. OpenBLAS reports nothing on bad arguments, so every call is checked first.
// matmul_fwd_naive is the plain fp64-accumulating reference the tests trust. act16::linear_fwd / linear_bwd: the
// bf16 activation path's twins (kernels/act16.h): bf16 widened into fp32 copies, the weight rounded to bf16 as the
// GPU's mirror holds it, the same sgemm, the epilogue's additions in cuBLASLt's order, one rounding per stored value.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/cpu/act16_util.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/gelu.h"
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

namespace act16 {

namespace {
using ::sftdp::act16::to_bf16;
using ::sftdp::act16::to_float;

// What the GPU's GEMMs read for an fp32 parameter: its bf16 copy.
std::vector<float> rounded(const float* p, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_float(to_bf16(p[i]));
  return out;
}
}  // namespace

void linear_fwd(void* out, int ldo, uint16_t* pre_gelu, const float* residual, const uint16_t* inp,
                const float* weight, const float* bias, int N, int IC, int OC, ::sftdp::act16::LinearOut kind) {
  using ::sftdp::act16::LinearOut;
  SFTDP_ASSERT(N >= 0 && IC > 0 && OC > 0 && ldo >= OC, "act16::linear_fwd: bad sizes");
  SFTDP_ASSERT((kind == LinearOut::kBf16Gelu) == (pre_gelu != nullptr), "act16::linear_fwd: pre_gelu with GELU only");
  SFTDP_ASSERT((kind == LinearOut::kFp32Residual) == (residual != nullptr),
               "act16::linear_fwd: a residual with kFp32Residual only");
  if (N == 0) return;
  const size_t n = static_cast<size_t>(N), oc = static_cast<size_t>(OC);
  const std::vector<float> x = widen(inp, n, IC, IC), w = rounded(weight, oc * IC);
  std::vector<float> z(n * oc);
  parallel_sgemm(CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, x.data(), IC, w.data(), IC, 0.0f, z.data(), OC);
  if (kind == LinearOut::kFp32Residual) {  // (acc + residual) + bias, the epilogue's order
    float* o = static_cast<float*>(out);
    for (size_t r = 0; r < n; ++r)
      for (size_t c = 0; c < oc; ++c) {
        const float v = z[r * oc + c] + residual[r * ldo + c];
        o[r * ldo + c] = bias ? v + bias[c] : v;
      }
    return;
  }
  const std::vector<float> b = bias ? rounded(bias, oc) : std::vector<float>();  // bf16 D: a bf16 bias
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < oc; ++c)
      if (bias) z[r * oc + c] += b[c];
  uint16_t* o = static_cast<uint16_t*>(out);
  if (kind == LinearOut::kBf16Gelu) {
    std::vector<float> g(z.size());
    gelu_fwd(g.data(), z.data(), z.size());
    for (size_t i = 0; i < z.size(); ++i) pre_gelu[i] = to_bf16(z[i]);
    z.swap(g);
  }
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < oc; ++c) o[r * ldo + c] = to_bf16(z[r * oc + c]);
}

void linear_bwd(uint16_t* dinp, const uint16_t* pre_gelu, float* dweight, float* dbias, const uint16_t* dout,
                int ld_dout, const uint16_t* inp, const float* weight, int N, int IC, int OC) {
  SFTDP_ASSERT(N >= 0 && IC > 0 && OC > 0 && ld_dout >= OC, "act16::linear_bwd: bad sizes");
  SFTDP_ASSERT(!dbias || dweight, "act16::linear_bwd: a bias gradient without its weight's");
  if (N == 0) return;
  const size_t n = static_cast<size_t>(N), ic = static_cast<size_t>(IC), oc = static_cast<size_t>(OC);
  const std::vector<float> g = widen(dout, n, oc, ld_dout), w = rounded(weight, oc * ic);
  std::vector<float> d(n * ic);
  parallel_sgemm(CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, g.data(), OC, w.data(), IC, 0.0f, d.data(), IC);
  if (pre_gelu) {
    const std::vector<float> pre = widen(pre_gelu, n, ic, ic);
    std::vector<float> dg(d.size());
    gelu_bwd(dg.data(), pre.data(), d.data(), d.size());
    d.swap(dg);
  }
  for (size_t i = 0; i < d.size(); ++i) dinp[i] = to_bf16(d[i]);
  if (!dweight) return;
  const std::vector<float> x = widen(inp, n, ic, ic);
  parallel_sgemm(CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, g.data(), OC, x.data(), IC, 1.0f, dweight, IC);
  if (!dbias) return;
  for (size_t c = 0; c < oc; ++c) {
    float acc = 0.f;  // the column's sum, added once (as the GPU adds its GEMM's bias gradient)
    for (size_t r = 0; r < n; ++r) acc += g[r * oc + c];
    dbias[c] += acc;
  }
}

}  // namespace act16

}  // namespace sftdp::cpu
