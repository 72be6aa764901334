// kernels/cuda/matmul.cu — Linear layer on the GPU (kernels/matmul.h): out = inp·weightᵀ + bias,
// PyTorch layout (weight [OC, IC]). N rows, IC in channels, OC out channels.
// Accumulation: dinp = (overwritten); dweight += (GEMM with beta 1); dbias += (deterministic column
// sums, reduce.cu). GEMMs in fp32 (matmul_fwd/_bwd), or with bf16 inputs (matmul_fwd_bf16/_bwd_bf16;
// the backward rounds dout once for both of its GEMMs). act16::linear_fwd / linear_bwd: the bf16 activation path's
// Linear layer (kernels/act16.h) on gemm16, its bias, GELU and residual in the GEMM's epilogue and its bias gradient
// reduced inside the weight-gradient GEMM (BGRADB into scratch, then added: BGRADB overwrites).
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

// dst[i] += src[i]: a bias gradient summed into scratch by its GEMM, added to the gradient sums.
__global__ void add_vector_kernel(float* dst, const float* src, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
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

namespace act16 {

void linear_fwd(void* out, int ldo, uint16_t* pre_gelu, const float* residual, const uint16_t* inp,
                const float* weight, const float* bias, int N, int IC, int OC, ::sftdp::act16::LinearOut kind,
                cudaStream_t stream) {
  using ::sftdp::act16::LinearOut;
  check_dims("act16::linear_fwd", N, IC, OC);
  SFTDP_ASSERT(ldo >= OC, "act16::linear_fwd: ldo < OC");
  SFTDP_ASSERT((kind == LinearOut::kBf16Gelu) == (pre_gelu != nullptr), "act16::linear_fwd: pre_gelu with GELU only");
  SFTDP_ASSERT((kind == LinearOut::kFp32Residual) == (residual != nullptr),
               "act16::linear_fwd: a residual with kFp32Residual only");
  if (N == 0) return;
  // out[N,OC] = inp[N,IC] · weight[OC,IC]ᵀ, then the epilogue.
  Gemm16Epilogue ep;
  ep.kind = kind == LinearOut::kBf16Gelu ? Gemm16Epilogue::kGeluAuxBias : Gemm16Epilogue::kBias;
  ep.bias = bias, ep.aux = pre_gelu, ep.ld_aux = OC;
  const bool residual_out = kind == LinearOut::kFp32Residual;
  gemm16(false, true, N, OC, IC, {inp, true, IC}, {weight, false, IC}, residual_out ? 1.f : 0.f, residual, ldo, out,
         !residual_out, ldo, ep, stream);
}

void linear_bwd(uint16_t* dinp, const uint16_t* pre_gelu, float* dweight, float* dbias, const uint16_t* dout,
                int ld_dout, const uint16_t* inp, const float* weight, int N, int IC, int OC, cudaStream_t stream) {
  check_dims("act16::linear_bwd", N, IC, OC);
  SFTDP_ASSERT(ld_dout >= OC, "act16::linear_bwd: ld_dout < OC");
  SFTDP_ASSERT(!dbias || dweight, "act16::linear_bwd: a bias gradient without its weight's");
  if (N == 0) return;
  // dinp[N,IC] = dout[N,OC] · weight[OC,IC]  (· gelu'(pre_gelu))
  Gemm16Epilogue dgelu;
  if (pre_gelu) dgelu.kind = Gemm16Epilogue::kDgelu, dgelu.aux = const_cast<uint16_t*>(pre_gelu), dgelu.ld_aux = IC;
  gemm16(false, false, N, IC, OC, {dout, true, ld_dout}, {weight, false, IC}, 0.f, nullptr, 0, dinp, true, IC, dgelu,
         stream);
  if (!dweight) return;
  // dweight[OC,IC] += dout[N,OC]ᵀ · inp[N,IC], and dout's column sums (the bias gradient) into scratch
  Gemm16Epilogue sums;
  float* bias_grad = dbias ? scratch_as<float>(Scratch::kGemmBiasGrad, static_cast<size_t>(OC)) : nullptr;
  sums.a_row_sums = bias_grad;
  gemm16(true, false, OC, IC, N, {dout, true, ld_dout}, {inp, true, IC}, 1.f, dweight, IC, dweight, false, IC, sums,
         stream);
  if (!dbias) return;
  constexpr int kBlock = 256;
  SFTDP_LAUNCH(add_vector_kernel, static_cast<unsigned>(ceil_div(OC, kBlock)), kBlock, 0, stream, dbias, bias_grad, OC);
  CHECK_LAUNCH();
}

}  // namespace act16

}  // namespace sftdp::cuda
