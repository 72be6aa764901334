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
// Context parallelism's key/value moves (src/model/context_attention.cpp): n rows of C floats between
// two tensors of row strides ldo and ldi, each side listed by an index or, where it is null, in order:
//   copy_strided_rows: out[(oidx ? oidx[i] : i)·ldo + c] = inp[(iidx ? iidx[i] : i)·ldi + c], i < n, c < C.
// The rows written are distinct; pure copies, the same bits everywhere.
void copy_strided_rows(float* out, int ldo, const int32_t* oidx, const float* inp, int ldi, const int32_t* iidx, int n,
                       int C);
}  // namespace sftdp::cpu

// The bf16 activation path (kernels/act16.h): the same copies of bf16 rows.
namespace sftdp::cpu::act16 {
void gather_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C);   // (n,C) = ; (N,C) (n)
void scatter_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C);  // (N,C) listed = ; (n,C)
void copy_strided_rows(uint16_t* out, int ldo, const int32_t* oidx, const uint16_t* inp, int ldi, const int32_t* iidx,
                       int n, int C);
}  // namespace sftdp::cpu::act16

#if defined(__CUDACC__) || defined(SFTDP_CUDA_DECLS)
#include <cuda_runtime.h>

// The CUDA twins (kernels/cuda/<op>.cu): same arguments, all pointers in device memory, plus
// the stream they are queued on. They match the sftdp::cpu twins bit for bit.
namespace sftdp::cuda {
void gather_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream);
void scatter_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream);
void copy_strided_rows(float* out, int ldo, const int32_t* oidx, const float* inp, int ldi, const int32_t* iidx, int n,
                       int C, cudaStream_t stream);
}  // namespace sftdp::cuda
namespace sftdp::cuda::act16 {  // the act16 twins, on `stream`
void gather_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C, cudaStream_t stream);   // (n,C) = ; (N,C) (n)
void scatter_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C, cudaStream_t stream);  // (N,C) listed = ; (n,C)
void copy_strided_rows(uint16_t* out, int ldo, const int32_t* oidx, const uint16_t* inp, int ldi, const int32_t* iidx,
                       int n, int C, cudaStream_t stream);
}  // namespace sftdp::cuda::act16
#endif
