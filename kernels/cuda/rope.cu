// kernels/cuda/rope.cu — rotary position embeddings (rotate_half layout) on the q and k heads of
// fused qkv rows on the GPU (kernels/rope.h). B batch, T seq, NH q heads, KVH k/v heads, HS head
// size (even), QKV = (NH + 2·KVH)·HS. In place; v heads untouched. One thread per rotated pair
// (x[i], x[i + HS/2]) of one q or k head: the angle pos·inv_freq[i] is formed in double and its
// cos/sin taken in double (accurate, not the fast intrinsics), then rounded to float, as the CPU
// twin does. rope_bwd applies the transpose rotation (angle −a), so dqkv becomes the gradient
// with respect to the un-rotated q and k. No reductions: every element has one writer.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/rope.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// Pair p enumerates (b·T + t, head j < NH + KVH, i < HS/2), i fastest.
template <bool kTranspose>
__global__ void rope_kernel(float* qkv, const int32_t* positions, const float* inv_freq, int T, int NH, int KVH,
                            int HS, size_t pairs) {
  const int half = HS / 2, heads = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(p % half);
    const int j = static_cast<int>((p / half) % heads);
    const size_t bt = p / (static_cast<size_t>(half) * heads);
    const int32_t pos = positions ? positions[bt] : static_cast<int32_t>(bt % T);
    const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
    const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
    float* x = qkv + bt * QKV + static_cast<size_t>(j) * HS;
    const float x0 = x[i], x1 = x[i + half];
    // Explicitly rounded products (no FMA contraction), as a plain C++ loop computes them.
    const float x0c = __fmul_rn(x0, c), x1s = __fmul_rn(x1, s), x1c = __fmul_rn(x1, c), x0s = __fmul_rn(x0, s);
    if (kTranspose) {  // rotation by −a: [c s; −s c]
      x[i] = __fadd_rn(x0c, x1s);
      x[i + half] = __fsub_rn(x1c, x0s);
    } else {  // rotation by a: [c −s; s c]
      x[i] = __fsub_rn(x0c, x1s);
      x[i + half] = __fadd_rn(x1c, x0s);
    }
  }
}

template <bool kTranspose>
void rope(const char* op, float* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH,
          int KVH, int HS, cudaStream_t stream) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && HS > 0 && HS % 2 == 0,
               std::string(op) + ": need B >= 0, T, NH, KVH > 0 and HS positive and even (got B=" +
                   std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                   " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + ")");
  const size_t pairs = static_cast<size_t>(B) * T * (NH + KVH) * (HS / 2);
  if (pairs == 0) return;
  SFTDP_LAUNCH(rope_kernel<kTranspose>, elementwise_blocks(pairs, kBlock), kBlock, 0, stream, qkv, positions, inv_freq,
               T, NH, KVH, HS, pairs);
  CHECK_LAUNCH();
}

}  // namespace

void rope_fwd(float* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  rope<false>("rope_fwd", qkv, positions, inv_freq, B, T, NH, KVH, HS, stream);
}

void rope_bwd(float* dqkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  rope<true>("rope_bwd", dqkv, positions, inv_freq, B, T, NH, KVH, HS, stream);
}

}  // namespace sftdp::cuda
