// kernels/cpu/lora.cpp — LoRA adapter on a Linear layer, CPU twin (see kernels/lora.h): five
// parallel_sgemm calls over strided views, and the position-seeded dropout mask.
#include "kernels/lora.h"

#include <cstddef>

#include "kernels/cpu/sgemm.h"

namespace sftdp::cpu {

void lora_fwd(float* out, int ldo, float* u, const float* x, const float* A, const float* B, float scale, int N, int IC,
              int r, int OC) {
  if (N == 0) return;
  // u(N,r) = x(N,IC) · A(r,IC)ᵀ
  parallel_sgemm(CblasNoTrans, CblasTrans, N, r, IC, 1.0f, x, IC, A, IC, 0.0f, u, r);
  // out(N,OC | ldo) += scale · u(N,r) · B(OC,r)ᵀ
  parallel_sgemm(CblasNoTrans, CblasTrans, N, OC, r, scale, u, r, B, r, 1.0f, out, ldo);
}

void lora_bwd(float* dx, float* dA, float* dB, float* du, const float* dout, int ldo, const float* x, const float* u,
              const float* A, const float* B, float scale, int N, int IC, int r, int OC) {
  if (N == 0) return;
  // dB(OC,r) += scale · dout(N,OC | ldo)ᵀ · u(N,r)
  parallel_sgemm(CblasTrans, CblasNoTrans, OC, r, N, scale, dout, ldo, u, r, 1.0f, dB, r);
  // du(N,r) = scale · dout(N,OC | ldo) · B(OC,r)
  parallel_sgemm(CblasNoTrans, CblasNoTrans, N, r, OC, scale, dout, ldo, B, r, 0.0f, du, r);
  // dA(r,IC) += du(N,r)ᵀ · x(N,IC)
  parallel_sgemm(CblasTrans, CblasNoTrans, r, IC, N, 1.0f, du, r, x, IC, 1.0f, dA, IC);
  // dx(N,IC) += du(N,r) · A(r,IC)
  parallel_sgemm(CblasNoTrans, CblasNoTrans, N, IC, r, 1.0f, du, r, A, IC, 1.0f, dx, IC);
}

void lora_dropout(float* out, const float* inp, const int64_t* rows, const int32_t* index, const uint64_t* key_p,
                  float p, float keep_scale, int N, int T, int C) {
  const uint64_t key = *key_p;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const int64_t row = rows[n / T];
    const int t = index ? index[n % T] : n % T;
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) y[c] = lora_hash::keep(key, row, t, c, p) ? x[c] * keep_scale : 0.0f;
  }
}

}  // namespace sftdp::cpu
