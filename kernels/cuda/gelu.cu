// kernels/cuda/gelu.cu — GELU, tanh form (GPT-2), on the GPU (kernels/gelu.h). N elements.
// Accumulation: dinp = (overwritten). Accurate expf and IEEE division (no fast-math intrinsics),
// so results track the CPU twin to a few ulp. 16-byte vectors where the pointers share an alignment,
// scalars for the rest (vec.cuh); the same operations per element either way.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/gelu.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// gelu(x) and gelu_grad(x)·dout per element: gelu.cuh's expressions (σ saturating to exactly 0 and 1, the form the
// CPU twin uses, so both keep relative accuracy in GELU's far negative tail, where 1 + tanh u cancels).
__device__ __forceinline__ float gelu_backward(float x, float dout) { return gelu_grad(x) * dout; }

// T: the storage type (float; bf16 once activations are stored so), the maths in fp32.
template <class T>
__global__ void gelu_fwd_kernel(T* out, const T* inp, size_t N) {
  constexpr int V = Vec<T>::kSize;
  vector_loop<V>(
      grid_thread(), grid_threads(), N, vector_head(V, out, inp),
      [&](size_t i) {
        const Vec<T> x = load_vec(inp + i);
        Vec<T> y;
        SFTDP_UNROLL
        for (int k = 0; k < V; ++k) y[k] = from_float<T>(gelu(to_float(x[k])));
        store_vec(out + i, y);  // plain store: the next GEMM reads it
      },
      [&](size_t i) { out[i] = from_float<T>(gelu(to_float(inp[i]))); });
}

template <class T>
__global__ void gelu_bwd_kernel(T* dinp, const T* inp, const T* dout, size_t N) {
  constexpr int V = Vec<T>::kSize;
  vector_loop<V>(
      grid_thread(), grid_threads(), N, vector_head(V, dinp, inp, dout),
      [&](size_t i) {
        const Vec<T> x = load_vec(inp + i), g = load_vec(dout + i);
        Vec<T> d;
        SFTDP_UNROLL
        for (int k = 0; k < V; ++k) d[k] = from_float<T>(gelu_backward(to_float(x[k]), to_float(g[k])));
        store_vec(dinp + i, d);
      },
      [&](size_t i) { dinp[i] = from_float<T>(gelu_backward(to_float(inp[i]), to_float(dout[i]))); });
}

}  // namespace

void gelu_fwd(float* out, const float* inp, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  SFTDP_LAUNCH(gelu_fwd_kernel<float>, vector_blocks(N, Vec<float>::kSize, kBlock), kBlock, 0, stream, out, inp, N);
  CHECK_LAUNCH();
}

void gelu_bwd(float* dinp, const float* inp, const float* dout, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  SFTDP_LAUNCH(gelu_bwd_kernel<float>, vector_blocks(N, Vec<float>::kSize, kBlock), kBlock, 0, stream, dinp, inp,
               dout, N);
  CHECK_LAUNCH();
}

}  // namespace sftdp::cuda
