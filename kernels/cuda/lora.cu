// kernels/cuda/lora.cu — LoRA adapter on a Linear layer on the GPU (kernels/lora.h): the five
// GEMMs of the CPU twin through cuBLASLt (gemm.cuh) over the same strided views, fp32 or with
// bf16-rounded inputs; and the position-seeded dropout mask, elementwise, the CPU twin's bits.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/lora.h"

namespace sftdp::cuda {
namespace {

void check_dims(const char* op, int ldo, int N, int IC, int r, int OC) {
  SFTDP_ASSERT(N >= 0 && IC > 0 && r > 0 && OC > 0 && ldo >= OC,
               std::string(op) + ": need N >= 0, IC, r, OC > 0 and ldo >= OC (got N=" + std::to_string(N) +
                   " IC=" + std::to_string(IC) + " r=" + std::to_string(r) + " OC=" + std::to_string(OC) +
                   " ldo=" + std::to_string(ldo) + ")");
}

void fwd(float* out, int ldo, float* u, const float* x, const float* A, const float* B, float scale, int N, int IC,
         int r, int OC, bool bf16, cudaStream_t stream) {
  check_dims("lora_fwd", ldo, N, IC, r, OC);
  if (N == 0) return;
  // u[N,r] = x[N,IC] · A[r,IC]ᵀ
  gemm(false, true, N, r, IC, 1.f, x, IC, A, IC, 0.f, u, r, nullptr, bf16, GemmBatch{}, stream);
  // out[N,OC | ldo] += scale · u[N,r] · B[OC,r]ᵀ
  gemm(false, true, N, OC, r, scale, u, r, B, r, 1.f, out, ldo, nullptr, bf16, GemmBatch{}, stream);
}

void bwd(float* dx, float* dA, float* dB, float* du, const float* dout, int ldo, const float* x, const float* u,
         const float* A, const float* B, float scale, int N, int IC, int r, int OC, bool bf16, cudaStream_t stream) {
  check_dims("lora_bwd", ldo, N, IC, r, OC);
  if (N == 0) return;
  // dB[OC,r] += scale · dout[N,OC | ldo]ᵀ · u[N,r]
  gemm(true, false, OC, r, N, scale, dout, ldo, u, r, 1.f, dB, r, nullptr, bf16, GemmBatch{}, stream);
  // du[N,r] = scale · dout[N,OC | ldo] · B[OC,r]
  gemm(false, false, N, r, OC, scale, dout, ldo, B, r, 0.f, du, r, nullptr, bf16, GemmBatch{}, stream);
  // dA[r,IC] += du[N,r]ᵀ · x[N,IC]
  gemm(true, false, r, IC, N, 1.f, du, r, x, IC, 1.f, dA, IC, nullptr, bf16, GemmBatch{}, stream);
  // dx[N,IC] += du[N,r] · A[r,IC]
  gemm(false, false, N, IC, r, 1.f, du, r, A, IC, 1.f, dx, IC, nullptr, bf16, GemmBatch{}, stream);
}

constexpr int kBlock = 256;

// A warp per row n of N (batch row n / T, position n mod T: 32-bit, N is an int), the row's elements in
// 16-byte vectors where out and inp share an alignment, element by element otherwise (vec.cuh).
// out may alias inp: each element is read before it is written, by the same thread.
__global__ void lora_dropout_kernel(float* out, const float* inp, const int64_t* rows, const int32_t* index,
                                    const uint64_t* key_p, float p, float keep_scale, int T, int C, int N) {
  constexpr int V = Vec<float>::kSize;
  const uint64_t key = *key_p;  // the step's, written before a graph replay reads it
  for_each_row_by_warp(static_cast<size_t>(N), [&](size_t n, int lane) {
    const auto n32 = static_cast<uint32_t>(n), T32 = static_cast<uint32_t>(T);
    const int64_t row = rows[n32 / T32];
    const int t = index ? index[n32 % T32] : static_cast<int>(n32 % T32);
    const float* x = inp + n * C;
    float* o = out + n * C;
    const auto one = [&](float xi, int c) { return lora_hash::keep(key, row, t, c, p) ? xi * keep_scale : 0.0f; };
    vector_loop<V>(
        lane, kWarp, C, vector_head(V, o, x),
        [&](size_t c) {
          Vec<float> y = load_vec(x + c);
          SFTDP_UNROLL
          for (int k = 0; k < V; ++k) y[k] = one(y[k], static_cast<int>(c) + k);
          store_vec(o + c, y);
        },
        [&](size_t c) { o[c] = one(x[c], static_cast<int>(c)); });
  });
}

}  // namespace

void lora_fwd(float* out, int ldo, float* u, const float* x, const float* A, const float* B, float scale, int N, int IC,
              int r, int OC, cudaStream_t stream) {
  fwd(out, ldo, u, x, A, B, scale, N, IC, r, OC, /*bf16=*/false, stream);
}
void lora_bwd(float* dx, float* dA, float* dB, float* du, const float* dout, int ldo, const float* x, const float* u,
              const float* A, const float* B, float scale, int N, int IC, int r, int OC, cudaStream_t stream) {
  bwd(dx, dA, dB, du, dout, ldo, x, u, A, B, scale, N, IC, r, OC, /*bf16=*/false, stream);
}
void lora_fwd_bf16(float* out, int ldo, float* u, const float* x, const float* A, const float* B, float scale, int N,
                   int IC, int r, int OC, cudaStream_t stream) {
  fwd(out, ldo, u, x, A, B, scale, N, IC, r, OC, /*bf16=*/true, stream);
}
void lora_bwd_bf16(float* dx, float* dA, float* dB, float* du, const float* dout, int ldo, const float* x,
                   const float* u, const float* A, const float* B, float scale, int N, int IC, int r, int OC,
                   cudaStream_t stream) {
  bwd(dx, dA, dB, du, dout, ldo, x, u, A, B, scale, N, IC, r, OC, /*bf16=*/true, stream);
}

void lora_dropout(float* out, const float* inp, const int64_t* rows, const int32_t* index, const uint64_t* key,
                  float p, float keep_scale, int N, int T, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  SFTDP_LAUNCH(lora_dropout_kernel, row_blocks(N, kBlock), kBlock, 0, stream, out, inp, rows, index, key, p,
               keep_scale, T, C, N);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
