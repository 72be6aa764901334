// kernels/cuda/gather.cu — row gather and scatter on the GPU (kernels/gather.h): one grid-stride
// loop over the n·C listed elements, each copied by one thread. Indices are distinct, so no two
// threads write the same element; the results are the CPU twin's bits.
#include "kernels/cuda/common.cuh"
#include "kernels/gather.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// kScatter false: out[i, c] = inp[idx[i], c]; true: out[idx[i], c] = inp[i, c].
template <bool kScatter>
__global__ void copy_rows_kernel(float* out, const float* inp, const int32_t* idx, int C, size_t total) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = e / C, c = e % C;
    const size_t listed = static_cast<size_t>(idx[i]) * C + c, packed = i * C + c;
    if constexpr (kScatter)
      out[listed] = inp[packed];
    else
      out[packed] = inp[listed];
  }
}

template <bool kScatter>
void copy_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(n) * C;
  if (total == 0) return;
  SFTDP_LAUNCH(copy_rows_kernel<kScatter>, elementwise_blocks(total, kBlock), kBlock, 0, stream, out, inp, idx, C,
               total);
  CHECK_LAUNCH();
}

}  // namespace

void gather_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  copy_rows<false>(out, inp, idx, n, C, stream);
}

void scatter_rows(float* out, const float* inp, const int32_t* idx, int n, int C, cudaStream_t stream) {
  copy_rows<true>(out, inp, idx, n, C, stream);
}

}  // namespace sftdp::cuda
