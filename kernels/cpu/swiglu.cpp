// kernels/cpu/swiglu.cpp — the SwiGLU gate, CPU twin (see kernels/swiglu.h). Legend: N rows
// (= B·T), F hidden width; an inp row is [gate (F) | up (F)]. dinp = (overwritten).
// Parallel over rows; each element's result depends on that element alone: deterministic.
#include "kernels/swiglu.h"

#include <vector>

#include "kernels/cpu/act16_util.h"

#include <cstddef>

#include "kernels/cpu/vec_math.h"

namespace sftdp::cpu {

void swiglu_fwd(float* out, const float* inp, int N, int F) {  // (N,F) (N,2F)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    float* y = out + static_cast<size_t>(n) * F;
    for (int i = 0; i < F; ++i) y[i] = g[i] * vec_sigmoid(g[i]) * u[i];
  }
}

// With s = σ(g): d silu/dg = s + g·s·(1 − s), with 1 − s computed as σ(−g), not by subtraction
// (which cancels for large g), as gelu_bwd does.
//   dgate = dout·up·(s + g·s·σ(−g)),   dup = dout·g·s.
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int N, int F) {  // (N,2F) = ; (N,2F) (N,F)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    const float* dy = dout + static_cast<size_t>(n) * F;
    float* dg = dinp + static_cast<size_t>(n) * 2 * F;
    float* du = dg + F;
    for (int i = 0; i < F; ++i) {
      const float s = vec_sigmoid(g[i]), one_minus_s = vec_sigmoid(-g[i]);
      dg[i] = dy[i] * u[i] * (s + g[i] * s * one_minus_s);
      du[i] = dy[i] * g[i] * s;
    }
  }
}

namespace act16 {

void swiglu_fwd(uint16_t* out, const uint16_t* inp, int N, int F) {
  const size_t n = static_cast<size_t>(N), f = static_cast<size_t>(F);
  std::vector<float> y(n * f);
  cpu::swiglu_fwd(y.data(), widen(inp, n * 2 * f).data(), N, F);
  narrow(out, y);
}

void swiglu_bwd(uint16_t* dinp, const uint16_t* inp, const uint16_t* dout, int N, int F) {
  const size_t n = static_cast<size_t>(N), f = static_cast<size_t>(F);
  std::vector<float> d(n * 2 * f);
  cpu::swiglu_bwd(d.data(), widen(inp, n * 2 * f).data(), widen(dout, n * f).data(), N, F);
  narrow(dinp, d);
}

}  // namespace act16

}  // namespace sftdp::cpu
