// kernels/cuda/gather.cu — row gather and scatter on the GPU (kernels/gather.h): a warp per listed
// row (its index read once per row, no index division), the row copied in 16-byte vectors where source
// and destination rows share an alignment, element by element otherwise (vec.cuh). Indices are
// distinct, so no two threads write the same element; the results are the CPU twin's bits.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/gather.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// scatter false: out[i, c] = inp[idx[i], c]; true: out[idx[i], c] = inp[i, c]. n rows of C elements of T (fp32, or
// bf16 on the act16 path: the same copies, 8 elements per vector).
template <class T>
__global__ void copy_rows_kernel(T* out, const T* inp, const int32_t* idx, int C, int n, bool scatter) {
  constexpr int V = Vec<T>::kSize;
  for_each_row_by_warp(static_cast<size_t>(n), [&](size_t i, int lane) {
    const size_t listed = static_cast<size_t>(idx[i]) * C, packed = i * C;
    T* dst = out + (scatter ? listed : packed);
    const T* src = inp + (scatter ? packed : listed);
    vector_loop<V>(
        lane, kWarp, C, vector_head(V, dst, src), [&](size_t c) { store_vec(dst + c, load_vec(src + c)); },
        [&](size_t c) { dst[c] = src[c]; });
  });
}

template <class T>
void copy_rows(T* out, const T* inp, const int32_t* idx, int n, int C, bool scatter, cudaStream_t stream) {
  if (n <= 0 || C <= 0) return;
  SFTDP_LAUNCH(copy_rows_kernel<T>, row_blocks(n, kBlock), kBlock, 0, stream, out, inp, idx, C, n, scatter);
  CHECK_LAUNCH();
}

// Context parallelism's moves: a warp per row, element by element (rows of 2·KVH·HS floats at strides that
// need not keep 16-byte alignment).
template <class E>  // float, or __nv_bfloat16 (act16)
__global__ void copy_strided_rows_kernel(E* out, int ldo, const int32_t* oidx, const E* inp, int ldi,
                                         const int32_t* iidx, int n, int C) {
  for_each_row_by_warp(static_cast<size_t>(n), [&](size_t i, int lane) {
    E* dst = out + static_cast<size_t>(oidx ? oidx[i] : i) * ldo;
    const E* src = inp + static_cast<size_t>(iidx ? iidx[i] : i) * ldi;
    for (int c = lane; c < C; c += kWarp) dst[c] = src[c];
  });
}

__nv_bfloat16* bf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
const __nv_bfloat16* bf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }

}  // namespace

void gather_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  copy_rows(out, inp, idx, n, C, /*scatter=*/false, stream);
}

void scatter_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  copy_rows(out, inp, idx, n, C, /*scatter=*/true, stream);
}

void copy_strided_rows(float* out, int ldo, const int32_t* oidx, const float* inp, int ldi, const int32_t* iidx, int n,
                       int C, cudaStream_t stream) {
  if (n <= 0 || C <= 0) return;
  SFTDP_LAUNCH(copy_strided_rows_kernel<float>, row_blocks(n, kBlock), kBlock, 0, stream, out, ldo, oidx, inp, ldi,
               iidx, n, C);
  CHECK_LAUNCH();
}

namespace act16 {

void gather_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  copy_rows(bf16(out), bf16(inp), idx, n, C, /*scatter=*/false, stream);
}

void scatter_rows(uint16_t* out, const uint16_t* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  copy_rows(bf16(out), bf16(inp), idx, n, C, /*scatter=*/true, stream);
}

void copy_strided_rows(uint16_t* out, int ldo, const int32_t* oidx, const uint16_t* inp, int ldi, const int32_t* iidx,
                       int n, int C, cudaStream_t stream) {
  if (n <= 0 || C <= 0) return;
  SFTDP_LAUNCH(copy_strided_rows_kernel<__nv_bfloat16>, row_blocks(n, kBlock), kBlock, 0, stream, bf16(out), ldo, oidx,
               bf16(inp), ldi, iidx, n, C);
  CHECK_LAUNCH();
}

}  // namespace act16

}  // namespace sftdp::cuda
