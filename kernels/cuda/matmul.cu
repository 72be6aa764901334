// kernels/cuda/matmul.cu — Linear layer on the GPU (kernels/matmul.h): out = inp·weightᵀ + bias,
// PyTorch layout (weight [OC, IC]). N rows, IC in channels, OC out channels.
// Accumulation: dinp = (overwritten); dweight += (GEMM with beta 1); dbias += (deterministic column
// sums, reduce.cu). GEMMs in fp32 (matmul_fwd/_bwd), or with bf16 inputs (matmul_fwd_bf16/_bwd_bf16;
// the backward rounds dout once for both of its GEMMs).
#include <string>

#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/matmul.h"

namespace sftdp::cuda {
namespace {

void check_dims(const char* op, int N, int IC, int OC) {
  SFTDP_ASSERT(N >= 0 && IC > 0 && OC > 0,
               std::string(op) + ": need N >= 0, IC > 0, OC > 0 (got N=" + std::to_string(N) +
                   " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) + ")");
}

void fwd(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC, bool bf16,
         cudaStream_t stream) {
  check_dims("matmul_fwd", N, IC, OC);
  if (N == 0) return;
  // out[N,OC] = inp[N,IC] · weight[OC,IC]ᵀ (+ bias[OC] on every row).
  gemm(/*trans_a=*/false, /*trans_b=*/true, N, OC, IC, 1.f, inp, IC, weight, IC, 0.f, out, OC, bias, bf16,
       GemmBatch{}, stream);
}

void bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int N,
         int IC, int OC, bool bf16, cudaStream_t stream) {
  check_dims("matmul_bwd", N, IC, OC);
  if (N == 0) return;
  // bf16: dout rounded once for both GEMMs (a mirror of it, rows padded to a multiple of 8 as every
  // bf16 operand copy is), not once per GEMM.
  const bool once = bf16 && dweight;
  if (once) {
    const int ld16 = padded_bf16_ld(OC);
    __nv_bfloat16* dout16 = scratch_as<__nv_bfloat16>(Scratch::kGemmDout16, static_cast<size_t>(N) * ld16);
    cast_fp32_to_bf16(dout16, ld16, dout, OC, OC, N, stream);
    set_bf16_matrix_mirror(dout, N, OC, dout16);
  }
  // dinp[N,IC] = dout[N,OC] · weight[OC,IC]   (=)
  gemm(false, false, N, IC, OC, 1.f, dout, OC, weight, IC, 0.f, dinp, IC, nullptr, bf16, GemmBatch{}, stream);
  // dweight[OC,IC] += dout[N,OC]ᵀ · inp[N,IC]; null: a frozen weight (LoRA), no gradient
  if (dweight)
    gemm(true, false, OC, IC, N, 1.f, dout, OC, inp, IC, 1.f, dweight, IC, nullptr, bf16, GemmBatch{}, stream);
  if (once) set_bf16_matrix_mirror(nullptr, 0, 0, nullptr);
  // dbias[OC] += Σ_n dout[n, :]
  if (dbias) add_column_sums(dbias, dout, N, OC, stream);
}

}  // namespace

void matmul_fwd(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                cudaStream_t stream) {
  fwd(out, inp, weight, bias, N, IC, OC, /*bf16=*/false, stream);
}
void matmul_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int N, int IC, int OC, cudaStream_t stream) {
  bwd(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, /*bf16=*/false, stream);
}
void matmul_fwd_bf16(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                     cudaStream_t stream) {
  fwd(out, inp, weight, bias, N, IC, OC, /*bf16=*/true, stream);
}
void matmul_bwd_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, cudaStream_t stream) {
  bwd(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, /*bf16=*/true, stream);
}

}  // namespace sftdp::cuda
