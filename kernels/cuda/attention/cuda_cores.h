// kernels/cuda/attention/cuda_cores.h — the CUDA-core attention kernels (kernels/cuda/attention/cuda_cores.cu) on bf16 storage,
// for the act16 entries (cuda::act16::attention_{fwd,bwd} in tensor_cores.cu) at head sizes without tensor-core
// kernels (!attention_bf16::tensor_cores(HS)): act16's arguments and rounding points (kernels/attention.h), the fp32
// kernels' arithmetic on the widened values. Used only inside kernels/cuda.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace sftdp::cuda::act16 {
void attention_fwd_cuda_cores(uint16_t* out, float* lse,              // (B,T,NH·HS) bf16 ; (B,NH,T)
                              const uint16_t* qkv, const int32_t* seg,  // (B,T,QKV) bf16 ; (B,T) or null
                              int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
void attention_bwd_cuda_cores(uint16_t* dqkv,                            // (B,T,QKV) bf16 =
                              const uint16_t* dout, const uint16_t* qkv,  // (B,T,NH·HS) bf16 ; (B,T,QKV) bf16
                              const uint16_t* out, const float* lse,      // (B,T,NH·HS) bf16 ; (B,NH,T)
                              const int32_t* seg,                         // (B,T) or null
                              int B, int T, int NH, int KVH, int HS, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
