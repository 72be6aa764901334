// kernels/cuda/residual.cu — out = a + b elementwise on the GPU (kernels/residual.h). N elements;
// out may alias a or b (each element is read before it is written, by the same thread). 16-byte
// vectors where the three pointers share an alignment, scalars for the rest (vec.cuh).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/residual.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// T: the storage type (float; bf16 once activations are stored so), the sum in fp32.
template <class T>
__global__ void residual_fwd_kernel(T* out, const T* a, const T* b, size_t N) {
  constexpr int V = Vec<T>::kSize;
  vector_loop<V>(
      grid_thread(), grid_threads(), N, vector_head(V, out, a, b),
      [&](size_t i) {
        const Vec<T> va = load_vec(a + i), vb = load_vec(b + i);
        Vec<T> vo;
        SFTDP_UNROLL
        for (int k = 0; k < V; ++k) vo[k] = from_float<T>(to_float(va[k]) + to_float(vb[k]));
        store_vec(out + i, vo);  // plain store: the next op reads it
      },
      [&](size_t i) { out[i] = from_float<T>(to_float(a[i]) + to_float(b[i])); });
}

}  // namespace

void residual_fwd(float* out, const float* a, const float* b, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  SFTDP_LAUNCH(residual_fwd_kernel<float>, vector_blocks(N, Vec<float>::kSize, kBlock), kBlock, 0, stream, out, a, b,
               N);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
