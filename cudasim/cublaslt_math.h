// cudasim/cublaslt_math.h — the arithmetic of one simulated cublasLtMatmul (cublaslt.cpp checks the
// call, queues it, and LtProduct::run does it): column-major D = epilogue(alpha·op(A)·op(B) + beta·C) per
// batch entry, products and sums in fp32 over k in increasing order, the epilogue in fp32, one rounding to
// D's type on store (bf16: to nearest even, as __float2bfloat16_rn). Also the table of the epilogues the
// simulator has (what each reads and writes, as cublasLtEpilogue_t documents it) and GELU in the
// project's form (kernels/cuda/gelu.cu), so a fused epilogue and the project's own GELU kernel agree.
#pragma once
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

namespace sftdp::sim {

// A cublasLtMatrixLayout_t: column-major unless `order` says otherwise (the simulator refuses the rest).
struct LtLayout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;  // elements between batch entries
  int32_t order = CUBLASLT_ORDER_COL;
};

// Which vector a bias-gradient epilogue writes to CUBLASLT_MATMUL_DESC_BIAS_POINTER (overwriting it).
enum class BiasGradient {
  none,
  rows_of_d,  // DGELU_BGRAD: m elements, bgrad[i] = Σ_j D(i, j), D being the GELU gradient it stores
  rows_of_a,  // BGRADA: m elements, bgrad[i] = Σ_p op(A)(i, p), the reduction over the GEMM's k
  cols_of_b,  // BGRADB: n elements, bgrad[j] = Σ_p op(B)(p, j), the reduction over the GEMM's k
};

// One cublasLtEpilogue_t the simulator has, as NVIDIA documents it (cublasLt.h, "cublasLtEpilogue_t").
struct Epilogue {
  uint32_t value;    // the cublasLtEpilogue_t
  const char* name;  // lowercase, without CUBLASLT_EPILOGUE_: the record's "epilogue"
  bool adds_bias;    // reads the bias vector (m elements) and adds it to every column
  bool gelu;         // D = GELU(x), x after the bias
  bool stores_aux;   // writes GELU's input x to the aux matrix
  bool dgelu;        // D = GELU'(aux)·x, the aux matrix read
  BiasGradient bias_gradient;
  bool uses_bias_pointer() const { return adds_bias || bias_gradient != BiasGradient::none; }
  bool uses_aux() const { return stores_aux || dgelu; }
};
// The simulator's entry for `value`, or null for an epilogue it lacks (RELU and its kin).
const Epilogue* find_epilogue(uint32_t value);

size_t elem_bytes(cudaDataType type);                       // fp32 4, bf16 2 (the only types the simulator accepts)
float load(const void* base, cudaDataType type, size_t i);  // bf16 -> fp32 is exact
void store(void* base, cudaDataType type, size_t i, float value);  // fp32 -> bf16 rounds to nearest even

// GELU, tanh form, exactly as kernels/cuda/gelu.cu computes it: x·σ(2u), u = √(2/π)(x + 0.044715x³),
// σ(z) = 1/(1 + e^{−z}) with glibc's expf; its derivative as gelu_bwd_kernel computes it.
float gelu(float x);
float gelu_derivative(float x);

// One checked matmul, ready to run on its stream's worker. Pointers are device memory (host-addressable
// in the simulator); batch entry b starts `stride` elements after entry b−1 for every operand.
struct LtProduct {
  LtLayout a, b, c, d;
  bool trans_a = false, trans_b = false;
  const void *A = nullptr, *B = nullptr, *C = nullptr;
  void* D = nullptr;
  float alpha = 1, beta = 0;  // beta == 0: C is never read
  const Epilogue* epilogue = nullptr;
  void* bias = nullptr;  // read (adds_bias) or written (a bias gradient)
  cudaDataType bias_type = CUDA_R_32F;
  int64_t bias_stride = 0;
  void* aux = nullptr;  // written (stores_aux) or read (dgelu), column-major with leading dimension aux_ld
  cudaDataType aux_type = CUDA_R_32F;
  int64_t aux_ld = 0, aux_stride = 0;

  void run() const;
};

}  // namespace sftdp::sim
