// kernels/residual.h — out = a + b, elementwise over N. Its backward is the identity (the
// model routes the same gradient to both inputs), so there is no residual_bwd.
#pragma once
#include <cstddef>

namespace sftdp::cpu {
void residual_fwd(float* out, const float* a, const float* b, size_t N);  // (N) (N) (N)
}  // namespace sftdp::cpu
