// kernels/cpu/residual.cpp — out = a + b elementwise, CPU twin (see kernels/residual.h).
// out may alias a or b. No backward: the model routes the same gradient to both inputs.
#include "kernels/residual.h"

namespace sftdp::cpu {

void residual_fwd(float* out, const float* a, const float* b, size_t N) {  // (N) (N) (N)
  const long long n = static_cast<long long>(N);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace sftdp::cpu
