// kernels/matmul.h — Linear layer out = inp · weightᵀ + bias, PyTorch layout (weight is [OC, IC]).
// N rows (= B*T), IC in channels, OC out channels. bias / dbias may be null; dweight may be null
// (a frozen weight under LoRA: no weight gradient is computed).
// Accumulation: dweight, dbias +=; dinp = (overwritten).
// The CPU twin calls cblas_sgemm (OpenBLAS); matmul_fwd_naive is the plain-loop reference tests trust.
#pragma once
#include <cstdint>

#include "kernels/act16.h"

namespace sftdp::cpu {
void matmul_fwd(float* out,                                            // (N,OC)
                const float* inp, const float* weight, const float* bias,  // (N,IC) (OC,IC) (OC)
                int N, int IC, int OC);
void matmul_bwd(float* dinp, float* dweight, float* dbias,              // (N,IC) = ; (OC,IC) += ; (OC) +=
                const float* dout, const float* inp, const float* weight,  // (N,OC) (N,IC) (OC,IC)
                int N, int IC, int OC);
void matmul_fwd_naive(float* out, const float* inp, const float* weight, const float* bias,
                      int N, int IC, int OC);  // plain loops, fp64 accumulation
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): one Linear layer on bf16 activations, the weight (and bias) read
// as their bf16 copies (kernels/bf16.h's mirrors on the GPU; rounded by the CPU twin), fp32 accumulation.
// linear_fwd, with z = inp·bf16(weight)ᵀ + b:
//   kBf16:         out = bf16(z),                          b = bf16(bias)
//   kBf16Gelu:     out = bf16(gelu(z)), pre_gelu = bf16(z), b = bf16(bias)   (gelu: kernels/gelu.h's form)
//   kFp32Residual: out = residual + z (fp32),             b = bias (fp32)
// (cuBLASLt epilogues: bf16 D takes a bf16 bias, fp32 D an fp32 one; the order of the additions is the GEMM's).
// linear_bwd, with g = dout·bf16(weight):  dinp = bf16(pre_gelu ? g·gelu'(pre_gelu) : g);
//   dweight += doutᵀ·inp;  dbias[o] += Σ_n dout[n,o]   (fp32 sums of the bf16 values; null: not computed)
namespace sftdp::cpu::act16 {
void linear_fwd(void* out, int ldo,                              // (N,OC | ldo): bf16, or fp32 (kFp32Residual)
                uint16_t* pre_gelu,                              // (N,OC) bf16 = (kBf16Gelu), else null
                const float* residual,                           // (N,OC) fp32 (kFp32Residual: may be out)
                const uint16_t* inp, const float* weight,        // (N,IC) bf16 ; (OC,IC) fp32, read as bf16
                const float* bias,                               // (OC) or null
                int N, int IC, int OC, ::sftdp::act16::LinearOut kind);
void linear_bwd(uint16_t* dinp,                                  // (N,IC) bf16 =
                const uint16_t* pre_gelu,                        // (N,IC) bf16 or null
                float* dweight, float* dbias,                    // (OC,IC) += ; (OC) += ; either may be null
                const uint16_t* dout, int ld_dout,               // (N,OC | ld_dout) bf16
                const uint16_t* inp, const float* weight,        // (N,IC) bf16 ; (OC,IC) fp32, read as bf16
                int N, int IC, int OC);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
// GEMMs through cuBLASLt, fp32 accumulation, TF32 off, fp32 inputs.
void matmul_fwd(float* out,                                            // (N,OC)
                const float* inp, const float* weight, const float* bias,  // (N,IC) (OC,IC) (OC)
                int N, int IC, int OC, cudaStream_t stream);
void matmul_bwd(float* dinp, float* dweight, float* dbias,              // (N,IC) = ; (OC,IC) += ; (OC) +=
                const float* dout, const float* inp, const float* weight,  // (N,OC) (N,IC) (OC,IC)
                int N, int IC, int OC, cudaStream_t stream);
// The same with the two inputs of every GEMM rounded to bf16 first (GemmInputs::kBf16 in
// kernels/ops.h); accumulation, outputs, bias and dbias stay fp32.
void matmul_fwd_bf16(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                     cudaStream_t stream);
void matmul_bwd_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void linear_fwd(void* out, int ldo,                              // (N,OC | ldo): bf16, or fp32 (kFp32Residual)
                uint16_t* pre_gelu,                              // (N,OC) bf16 = (kBf16Gelu), else null
                const float* residual,                           // (N,OC) fp32 (kFp32Residual: may be out)
                const uint16_t* inp, const float* weight,        // (N,IC) bf16 ; (OC,IC) fp32, read as bf16
                const float* bias,                               // (OC) or null
                int N, int IC, int OC, ::sftdp::act16::LinearOut kind, cudaStream_t stream);
void linear_bwd(uint16_t* dinp,                                  // (N,IC) bf16 =
                const uint16_t* pre_gelu,                        // (N,IC) bf16 or null
                float* dweight, float* dbias,                    // (OC,IC) += ; (OC) += ; either may be null
                const uint16_t* dout, int ld_dout,               // (N,OC | ld_dout) bf16
                const uint16_t* inp, const float* weight,        // (N,IC) bf16 ; (OC,IC) fp32, read as bf16
                int N, int IC, int OC, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
