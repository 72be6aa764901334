// kernels/matmul.h — Linear layer out = inp · weightᵀ + bias, PyTorch layout (weight is [OC, IC]).
// N rows (= B*T), IC in channels, OC out channels. bias / dbias may be null; dweight may be null
// (a frozen weight under LoRA: no weight gradient is computed).
// Accumulation: dweight, dbias +=; dinp = (overwritten).
// The CPU twin calls cblas_sgemm (OpenBLAS); matmul_fwd_naive is the plain-loop reference tests trust.
#pragma once

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
#endif
