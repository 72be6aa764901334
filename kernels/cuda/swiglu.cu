// kernels/cuda/swiglu.cu — the SwiGLU gate of the Llama-family MLP on the GPU (kernels/swiglu.h).
// N rows, F hidden width; inp rows are [gate (F) | up (F)]. out = silu(gate)·up with
// silu(g) = g·σ(g), σ(g) = 1/(1 + e^−g). Accumulation: dinp = (overwritten), both halves.
// Accurate expf and IEEE division (no fast-math intrinsics). Elementwise: one writer per element.
// A warp per row (no index division): 16-byte vectors where the row's pointers share an alignment,
// scalars for the rest of the row (vec.cuh).
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/swiglu.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// σ(g) saturates to exactly 0 and 1 (e^−g overflowing to inf gives 0).
__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// T: the storage type (float; bf16 on the act16 path, kernels/act16.h), the maths in fp32.
// Row n: out[n·F + f] from gate inp[n·2F + f] and up inp[n·2F + F + f].
template <class T>
__global__ void swiglu_fwd_kernel(T* out, const T* inp, int F, int N) {
  constexpr int V = Vec<T>::kSize;
  for_each_row_by_warp(static_cast<size_t>(N), [&](size_t n, int lane) {
    T* o = out + n * F;
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    const auto one = [](float g, float u) { return g * sigmoid(g) * u; };
    vector_loop<V>(
        lane, kWarp, F, vector_head(V, o, gate, up),
        [&](size_t f) {
          const Vec<T> g = load_vec(gate + f), u = load_vec(up + f);
          Vec<T> y;
          SFTDP_UNROLL
          for (int k = 0; k < V; ++k) y[k] = from_float<T>(one(to_float(g[k]), to_float(u[k])));
          store_vec(o + f, y);
        },
        [&](size_t f) { o[f] = from_float<T>(one(to_float(gate[f]), to_float(up[f]))); });
  });
}

// d gate = dout·up·σ(g)·(1 + g·(1 − σ(g)))  (the derivative of g·σ(g)),  d up = dout·silu(g).
template <class T>
__global__ void swiglu_bwd_kernel(T* dinp, const T* inp, const T* dout, int F, int N) {
  constexpr int V = Vec<T>::kSize;
  for_each_row_by_warp(static_cast<size_t>(N), [&](size_t n, int lane) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    const T* d_row = dout + n * F;
    T* dgate = dinp + n * 2 * F;
    T* dup = dgate + F;
    // (d gate, d up) of one element, in the order of the scalar kernel's expressions
    const auto one = [](float g, float u, float d, float* dg, float* du) {
      const float s = sigmoid(g);
      *dg = d * u * s * (1.f + g * (1.f - s));
      *du = d * g * s;
    };
    vector_loop<V>(
        lane, kWarp, F, vector_head(V, gate, up, d_row, dgate, dup),
        [&](size_t f) {
          const Vec<T> g = load_vec(gate + f), u = load_vec(up + f), d = load_vec(d_row + f);
          Vec<T> dg, du;
          SFTDP_UNROLL
          for (int k = 0; k < V; ++k) {
            float a, b;
            one(to_float(g[k]), to_float(u[k]), to_float(d[k]), &a, &b);
            dg[k] = from_float<T>(a);
            du[k] = from_float<T>(b);
          }
          store_vec(dgate + f, dg);
          store_vec(dup + f, du);
        },
        [&](size_t f) {
          float a, b;
          one(to_float(gate[f]), to_float(up[f]), to_float(d_row[f]), &a, &b);
          dgate[f] = from_float<T>(a);
          dup[f] = from_float<T>(b);
        });
  });
}

void check_dims(const char* op, int N, int F) {
  SFTDP_ASSERT(N >= 0 && F > 0, std::string(op) + ": need N >= 0 and F > 0 (got N=" + std::to_string(N) +
                                    " F=" + std::to_string(F) + ")");
}

}  // namespace

void swiglu_fwd(float* out, const float* inp, int N, int F, cudaStream_t stream) {
  check_dims("swiglu_fwd", N, F);
  if (N == 0) return;
  SFTDP_LAUNCH(swiglu_fwd_kernel<float>, row_blocks(N, kBlock), kBlock, 0, stream, out, inp, F, N);
  CHECK_LAUNCH();
}

void swiglu_bwd(float* dinp, const float* inp, const float* dout, int N, int F, cudaStream_t stream) {
  check_dims("swiglu_bwd", N, F);
  if (N == 0) return;
  SFTDP_LAUNCH(swiglu_bwd_kernel<float>, row_blocks(N, kBlock), kBlock, 0, stream, dinp, inp, dout, F, N);
  CHECK_LAUNCH();
}

namespace act16 {

void swiglu_fwd(uint16_t* out, const uint16_t* inp, int N, int F, cudaStream_t stream) {
  check_dims("act16::swiglu_fwd", N, F);
  if (N == 0) return;
  SFTDP_LAUNCH(swiglu_fwd_kernel<__nv_bfloat16>, row_blocks(N, kBlock), kBlock, 0, stream,
               reinterpret_cast<__nv_bfloat16*>(out), reinterpret_cast<const __nv_bfloat16*>(inp), F, N);
  CHECK_LAUNCH();
}

void swiglu_bwd(uint16_t* dinp, const uint16_t* inp, const uint16_t* dout, int N, int F, cudaStream_t stream) {
  check_dims("act16::swiglu_bwd", N, F);
  if (N == 0) return;
  SFTDP_LAUNCH(swiglu_bwd_kernel<__nv_bfloat16>, row_blocks(N, kBlock), kBlock, 0, stream,
               reinterpret_cast<__nv_bfloat16*>(dinp), reinterpret_cast<const __nv_bfloat16*>(inp),
               reinterpret_cast<const __nv_bfloat16*>(dout), F, N);
  CHECK_LAUNCH();
}

}  // namespace act16

}  // namespace sftdp::cuda
