// kernels/gather.h — row gather and scatter: the fused LM head (src/model/model.cpp) runs only the
// rows with loss weight != 0, packed together, and sends their gradient back to their positions.
// n listed rows of C floats; idx (n) holds row indices into the (N,C) tensor, all distinct.
//   gather_rows:  out[i, :] = inp[idx[i], :]           for i < n   (out (n,C) =)
//   scatter_rows: out[idx[i], :] = inp[i, :]           for i < n   (out (N,C): listed rows =,
//                                                                   the other rows untouched)
// Pure copies: the results are the same bits on every device and thread count.
#pragma once
#include <cstdint>

namespace sftdp::cpu {
void gather_rows(float* out,                                  // (n,C) =
                 const float* inp, const int32_t* idx,        // (N,C) (n)
                 int n, int C);
void scatter_rows(float* out,                                 // (N,C) listed rows =
                  const float* inp, const int32_t* idx,       // (n,C) (n)
                  int n, int C);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): the same copies of bf16 rows.
namespace sftdp::cpu::act16 {
void gather_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C);   // (n,C) = ; (N,C) (n)
void scatter_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C);  // (N,C) listed = ; (n,C)
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins bit for bit.
namespace sftdp::cuda {
void gather_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream);
void scatter_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void gather_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C, cudaStream_t stream);   // (n,C) = ; (N,C) (n)
void scatter_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C, cudaStream_t stream);  // (N,C) listed = ; (n,C)
}  // namespace sftdp::cuda::act16
#endif
