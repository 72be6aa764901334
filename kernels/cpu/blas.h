// kernels/cpu/blas.h — how the CPU twins call OpenBLAS: single-threaded, inside their own OpenMP
// loops. One thread pool instead of two (OpenBLAS's pthreads spinning against libgomp's cost
// 5-10x on 2 cores), and the bits never depend on the thread count.
#pragma once
#include <cblas.h>

namespace sftdp::cpu {

// OpenBLAS must not start its own threads under ours: set once, before the first GEMM.
inline void use_single_threaded_blas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace sftdp::cpu
