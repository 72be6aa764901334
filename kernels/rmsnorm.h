// kernels/rmsnorm.h — RMSNorm (Llama family) over the last dim: out = inp·rstd·weight with
// rstd = 1/sqrt(mean(inp²) + eps), N rows (= B*T), C channels; rstd (fp32) saved for backward.
// qk_rmsnorm is Qwen3's per-head RMSNorm of the q and k heads inside fused qkv rows.
// Accumulation: rmsnorm_bwd: dinp += (the residual stream's gradient, as layernorm_bwd), dweight +=.
// qk_rmsnorm_bwd: dqkv = (overwritten, v columns copied from dout), dq_weight += , dk_weight +=.
// Frozen weights (LoRA): dweight null, or dq_weight and dk_weight both null: not computed.
#pragma once
#include <cstdint>
namespace sftdp::cpu {
void rmsnorm_fwd(float* out, float* rstd,                          // (N,C) (N)
                 const float* inp, const float* weight,            // (N,C) (C)
                 int N, int C, float eps);
void rmsnorm_bwd(float* dinp, float* dweight,                      // (N,C) += ; (C) +=
                 const float* dout, const float* inp,              // (N,C) (N,C)
                 const float* weight, const float* rstd,           // (C) (N)
                 int N, int C);
// qkv rows are (NH + 2·KVH)·HS wide: NH q heads, KVH k heads, KVH v heads, each HS wide.
// Every q head is normalised with q_weight, every k head with k_weight; v is copied.
// rstd holds one value per (row, q-or-k head): (N, NH + KVH). out must not alias qkv.
void qk_rmsnorm_fwd(float* out, float* rstd,                       // (N,QKV) (N,NH+KVH)
                    const float* qkv,                              // (N,QKV)
                    const float* q_weight, const float* k_weight,  // (HS) (HS)
                    int N, int NH, int KVH, int HS, float eps);
void qk_rmsnorm_bwd(float* dqkv, float* dq_weight, float* dk_weight,  // (N,QKV) = ; (HS) += ; (HS) +=
                    const float* dout, const float* qkv,              // (N,QKV) (N,QKV)
                    const float* q_weight, const float* k_weight,     // (HS) (HS)
                    const float* rstd,                                // (N,NH+KVH)
                    int N, int NH, int KVH, int HS);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): as the fp32 twins, bf16 where marked. rmsnorm_bwd is layernorm's
// act16 backward without a bias (dres = (dres_in ? dres_in : 0) + the fp32 twin's dinp; dres16 = bf16(dres)),
// ONE kernel on the GPU; the q/k norms read and write bf16 rows (v copied through). The GPU twins take C and
// HS <= 8192 (an 8-column slot per thread, a row per block at most: kernels/cuda/norm_act16.cuh).
namespace sftdp::cpu::act16 {
void rmsnorm_fwd(uint16_t* out, float* rstd,                             // (N,C) bf16 ; (N)
                 const float* inp, const float* weight,                    // (N,C) (C)
                 int N, int C, float eps);
void rmsnorm_bwd(float* dres, uint16_t* dres16, float* dweight,           // (N,C) = ; (N,C) bf16 or null ; (C) +=
                 const float* dres_in, const uint16_t* dout,              // (N,C) or null ; (N,C) bf16
                 const float* inp, const float* weight, const float* rstd,  // (N,C) (C) (N)
                 int N, int C);
void qk_rmsnorm_fwd(uint16_t* out, float* rstd,                          // (N,QKV) bf16 ; (N,NH+KVH)
                    const uint16_t* qkv,                                 // (N,QKV) bf16
                    const float* q_weight, const float* k_weight,        // (HS) (HS)
                    int N, int NH, int KVH, int HS, float eps);
void qk_rmsnorm_bwd(uint16_t* dqkv, float* dq_weight, float* dk_weight,  // (N,QKV) bf16 = ; (HS) += ; (HS) +=
                    const uint16_t* dout, const uint16_t* qkv,           // (N,QKV) bf16 ; (N,QKV) bf16
                    const float* q_weight, const float* k_weight,        // (HS) (HS)
                    const float* rstd,                                   // (N,NH+KVH)
                    int N, int NH, int KVH, int HS);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>
// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins within the tests' tolerance.
namespace sftdp::cuda {
void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                 float eps, cudaStream_t stream);
void rmsnorm_bwd(float* dinp, float* dweight, const float* dout, const float* inp,
                 const float* weight, const float* rstd, int N, int C, cudaStream_t stream);
void qk_rmsnorm_fwd(float* out, float* rstd, const float* qkv, const float* q_weight,
                    const float* k_weight, int N, int NH, int KVH, int HS, float eps,
                    cudaStream_t stream);
void qk_rmsnorm_bwd(float* dqkv, float* dq_weight, float* dk_weight, const float* dout,
                    const float* qkv, const float* q_weight, const float* k_weight,
                    const float* rstd, int N, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void rmsnorm_fwd(uint16_t* out, float* rstd,                             // (N,C) bf16 ; (N)
                 const float* inp, const float* weight,                    // (N,C) (C)
                 int N, int C, float eps, cudaStream_t stream);
void rmsnorm_bwd(float* dres, uint16_t* dres16, float* dweight,           // (N,C) = ; (N,C) bf16 or null ; (C) +=
                 const float* dres_in, const uint16_t* dout,              // (N,C) or null ; (N,C) bf16
                 const float* inp, const float* weight, const float* rstd,  // (N,C) (C) (N)
                 int N, int C, cudaStream_t stream);
void qk_rmsnorm_fwd(uint16_t* out, float* rstd,                          // (N,QKV) bf16 ; (N,NH+KVH)
                    const uint16_t* qkv,                                 // (N,QKV) bf16
                    const float* q_weight, const float* k_weight,        // (HS) (HS)
                    int N, int NH, int KVH, int HS, float eps, cudaStream_t stream);
void qk_rmsnorm_bwd(uint16_t* dqkv, float* dq_weight, float* dk_weight,  // (N,QKV) bf16 = ; (HS) += ; (HS) +=
                    const uint16_t* dout, const uint16_t* qkv,           // (N,QKV) bf16 ; (N,QKV) bf16
                    const float* q_weight, const float* k_weight,        // (HS) (HS)
                    const float* rstd,                                   // (N,NH+KVH)
                    int N, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
