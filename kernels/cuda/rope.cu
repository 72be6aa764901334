// kernels/cuda/rope.cu — rotary position embeddings (rotate_half layout) on the q and k heads of
// fused qkv rows on the GPU (kernels/rope.h). B batch, T seq, NH q heads, KVH k/v heads, HS head
// size (even), QKV = (NH + 2·KVH)·HS. In place; v heads untouched. A warp per token, a lane per pair
// index i (4 at a time in 16-byte vectors where the row allows), the pair (x[i], x[i + HS/2]) of every
// q and k head of the token rotated with one angle: pos·inv_freq[i] formed in double and its cos/sin
// taken in double, then rounded to float, as the CPU twin does. Not CUDA's sin/cos: their
// Payne-Hanek path for huge arguments keeps a stack frame (local memory) in every kernel that calls
// them, though an angle here is below 2^31. cos_sin reduces it modulo π/2 (three-part π/2 by fma,
// exact to a double rounding) and sums Taylor series on [−π/4, π/4] (cut off below 1/50 of a
// double's ulp): within an ulp of a double of std::cos/sin, so the floats agree with the CPU's but for a
// double lying that close to a float rounding boundary. rope_bwd applies the transpose rotation (angle
// −a), so dqkv becomes the gradient with respect to the un-rotated q and k. No reductions: every element
// has one writer.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/rope.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// c = cos a, s = sin a for |a| < 2^31. q = rint(a·2/π), r = a − q·π/2 with π/2 = HI + MID + LO: a and
// q·HI are both multiples of 2^-53 once |a| >= π/4, so the first fma is exact and the other two err
// by a rounding of r; |r| <= π/4 (a hair more where a·2/π rounds up). The series stop where the next
// term at π/4 (r^19/19! = 8e-20, r^18/18! = 2e-18) is below 1/50 of an ulp of the result (>= 0.7).
// Then the quadrant q mod 4 picks ±sin r, ±cos r.
__device__ __forceinline__ void cos_sin(double a, double* c, double* s) {
  constexpr double kTwoOverPi = 0.63661977236758134308;  // 2/π
  constexpr double kPio2Hi = 1.5707963267948966;         // 0x1.921fb54442d18p+0
  constexpr double kPio2Mid = 6.123233995736766e-17;     // 0x1.1a62633145c07p-54
  constexpr double kPio2Lo = -1.4973849048591698e-33;    // -0x1.f1976b7ed8fbcp-110
  const double q = rint(a * kTwoOverPi);
  double r = fma(-q, kPio2Hi, a);
  r = fma(-q, kPio2Mid, r);
  r = fma(-q, kPio2Lo, r);
  const double r2 = r * r;
  double ps = -1.0 / 355687428096000.0;  // sin r = r − r^3/3! + ... − r^15/15! + r^17/17!: Horner in r²
  ps = fma(ps, r2, 1.0 / 1307674368000.0);
  ps = fma(ps, r2, -1.0 / 6227020800.0);
  ps = fma(ps, r2, 1.0 / 39916800.0);
  ps = fma(ps, r2, -1.0 / 362880.0);
  ps = fma(ps, r2, 1.0 / 5040.0);
  ps = fma(ps, r2, -1.0 / 120.0);
  ps = fma(ps, r2, 1.0 / 6.0);
  const double sin_r = fma(-r * r2, ps, r);
  double pc = 1.0 / 20922789888000.0;  // cos r = 1 − r^2/2! + ... + r^16/16!
  pc = fma(pc, r2, -1.0 / 87178291200.0);
  pc = fma(pc, r2, 1.0 / 479001600.0);
  pc = fma(pc, r2, -1.0 / 3628800.0);
  pc = fma(pc, r2, 1.0 / 40320.0);
  pc = fma(pc, r2, -1.0 / 720.0);
  pc = fma(pc, r2, 1.0 / 24.0);
  pc = fma(pc, r2, -1.0 / 2.0);
  const double cos_r = fma(r2, pc, 1.0);
  const int quadrant = static_cast<int>(static_cast<int64_t>(q) & 3);  // a = q·π/2 + r
  *s = quadrant == 0 ? sin_r : quadrant == 1 ? cos_r : quadrant == 2 ? -sin_r : -cos_r;
  *c = quadrant == 0 ? cos_r : quadrant == 1 ? -sin_r : quadrant == 2 ? -cos_r : sin_r;
}

// (x0, x1) of one pair rotated by the angle whose cosine and sine are c and s (transpose: by −a).
// Explicitly rounded products (no FMA contraction), as a plain C++ loop computes them.
__device__ __forceinline__ void rotate(float& x0, float& x1, float c, float s, bool transpose) {
  const float x0c = __fmul_rn(x0, c), x1s = __fmul_rn(x1, s), x1c = __fmul_rn(x1, c), x0s = __fmul_rn(x0, s);
  if (transpose) {  // rotation by −a: [c s; −s c]
    x0 = __fadd_rn(x0c, x1s);
    x1 = __fsub_rn(x1c, x0s);
  } else {  // rotation by a: [c −s; s c]
    x0 = __fsub_rn(x0c, x1s);
    x1 = __fadd_rn(x1c, x0s);
  }
}

// A warp per token bt of BT (position bt mod T in 32 bits: the launcher checks BT < 2^32). Its lanes take
// the pair indices i < HS/2, 4 at a time in 16-byte vectors where HS/2 is a multiple of 4 and the token's
// row allows (vec.cuh), else one at a time; each lane forms cos/sin of its i once and rotates pair i of
// every q and k head of the token (heads j < NH + KVH, at bt·QKV + j·HS), so the angle is computed once
// per (token, i), not once per head.
// S: the storage (fp32; bf16 on the act16 path, rotated in fp32 and rounded once); transpose: rope_bwd.
template <class S>
__global__ void rope_kernel(S* qkv, const int32_t* positions, const float* inv_freq, int T, int NH, int KVH, int HS,
                            size_t BT, bool transpose) {
  constexpr int V = Vec<S>::kSize;
  const int half = HS / 2, heads = NH + KVH;
  const size_t QKV = static_cast<size_t>(NH + 2 * KVH) * HS;
  for_each_row_by_warp(BT, [&](size_t bt, int lane) {
    const int32_t pos =
        positions ? positions[bt] : static_cast<int32_t>(static_cast<uint32_t>(bt) % static_cast<uint32_t>(T));
    S* row = qkv + bt * QKV;
    const auto cos_sin_of = [&](size_t i, float* c, float* s) {
      double cos_a, sin_a;
      cos_sin(static_cast<double>(pos) * static_cast<double>(inv_freq[i]), &cos_a, &sin_a);
      *c = static_cast<float>(cos_a);
      *s = static_cast<float>(sin_a);
    };
    // every head's pair at i: the same alignment for all heads when HS is a multiple of 4 floats
    const int head = half % V == 0 ? vector_head(V, row, row + half) : -1;
    vector_loop<V>(
        lane, kWarp, static_cast<size_t>(half), head,
        [&](size_t i) {
          float c[V], s[V];
          SFTDP_UNROLL
          for (int k = 0; k < V; ++k) cos_sin_of(i + k, &c[k], &s[k]);
          for (int j = 0; j < heads; ++j) {
            S* x = row + static_cast<size_t>(j) * HS;
            Vec<S> x0 = load_vec(x + i), x1 = load_vec(x + i + half);
            SFTDP_UNROLL
            for (int k = 0; k < V; ++k) {
              float a = to_float(x0[k]), b = to_float(x1[k]);
              rotate(a, b, c[k], s[k], transpose);
              x0[k] = from_float<S>(a), x1[k] = from_float<S>(b);
            }
            store_vec(x + i, x0);
            store_vec(x + i + half, x1);
          }
        },
        [&](size_t i) {
          float c, s;
          cos_sin_of(i, &c, &s);
          for (int j = 0; j < heads; ++j) {
            S* x = row + static_cast<size_t>(j) * HS;
            float x0 = to_float(x[i]), x1 = to_float(x[i + half]);
            rotate(x0, x1, c, s, transpose);
            x[i] = from_float<S>(x0);
            x[i + half] = from_float<S>(x1);
          }
        });
  });
}

template <class S>
void rope(const char* op, S* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH,
          int HS, bool transpose, cudaStream_t stream) {
  SFTDP_ASSERT(B >= 0 && T > 0 && NH > 0 && KVH > 0 && HS > 0 && HS % 2 == 0,
               std::string(op) + ": need B >= 0, T, NH, KVH > 0 and HS positive and even (got B=" + std::to_string(B) +
                   " T=" + std::to_string(T) + " NH=" + std::to_string(NH) + " KVH=" + std::to_string(KVH) +
                   " HS=" + std::to_string(HS) + ")");
  const size_t BT = static_cast<size_t>(B) * T;
  if (BT == 0) return;
  SFTDP_ASSERT(BT <= UINT32_MAX, std::string(op) + ": B·T = " + std::to_string(BT) + " tokens exceed 2^32 - 1");
  SFTDP_LAUNCH(rope_kernel<S>, row_blocks(BT, kBlock), kBlock, 0, stream, qkv, positions, inv_freq, T, NH, KVH, HS, BT,
               transpose);
  CHECK_LAUNCH();
}

}  // namespace

void rope_fwd(float* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  rope("rope_fwd", qkv, positions, inv_freq, B, T, NH, KVH, HS, /*transpose=*/false, stream);
}

void rope_bwd(float* dqkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  rope("rope_bwd", dqkv, positions, inv_freq, B, T, NH, KVH, HS, /*transpose=*/true, stream);
}

namespace act16 {

void rope_fwd(uint16_t* qkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  rope("act16::rope_fwd", reinterpret_cast<__nv_bfloat16*>(qkv), positions, inv_freq, B, T, NH, KVH, HS,
       /*transpose=*/false, stream);
}

void rope_bwd(uint16_t* dqkv, const int32_t* positions, const float* inv_freq, int B, int T, int NH, int KVH, int HS,
              cudaStream_t stream) {
  rope("act16::rope_bwd", reinterpret_cast<__nv_bfloat16*>(dqkv), positions, inv_freq, B, T, NH, KVH, HS,
       /*transpose=*/true, stream);
}

}  // namespace act16

}  // namespace sftdp::cuda
