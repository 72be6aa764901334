// cudasim/cublaslt_math.cpp — the arithmetic of one simulated cublasLtMatmul (cublaslt_math.h): the
// epilogue table with the documentation it follows, GELU as the project's kernel computes it, and the
// product itself. Built with -ffp-contract=off (CMakeLists.txt): every product and sum rounds to fp32.
#include "cudasim/cublaslt_math.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace sftdp::sim {
namespace {

// The epilogues, in cublasLt.h's words (cublasLtEpilogue_t):
//   BIAS  "apply (broadcasted) Bias from bias vector. Bias vector length must match matrix D rows, it must
//         be packed (stride between vector elements is 1). Bias vector is broadcasted to all columns and
//         added before applying final postprocessing."
//   GELU  "apply GELU point-wise transform to the results (x:=GELU(x))"; *_BIAS: "apply Bias and then GELU
//         transform"; *_AUX: "outputs GELU input as a separate matrix (useful for training)", i.e. the
//         pre-activation after the bias, at CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER.
//   DGELU "Apply GELU gradient to matmul output. Store GELU gradient in the output matrix. This epilogue
//         mode requires an extra input" (the aux matrix a GELU_AUX* forward stored): D = GELU'(aux)·x.
//   DGELU_BGRAD "Apply independently GELU and Bias gradient to matmul output. Store GELU gradient in the
//         output matrix, and Bias gradient in the auxiliary output (see CUBLASLT_MATMUL_DESC_BIAS_POINTER)":
//         the bias gradient is the row sum of that GELU gradient (m elements), as NVIDIA's own nvmath-python
//         tests check it (test_epilog.py: dgelu_bgrad == result.sum(axis=1)).
//   BGRADA "Bias gradient based on the input matrix A. The bias size corresponds to the number of rows of
//         the matrix D. The reduction happens over the GEMM's "k" dimension."
//   BGRADB "Bias gradient based on the input matrix B. The bias size corresponds to the number of columns
//         of the matrix D. The reduction happens over the GEMM's "k" dimension."
// Every bias gradient "Stores Bias gradient": it overwrites the vector, never adds to it.
constexpr Epilogue kEpilogues[] = {
    {CUBLASLT_EPILOGUE_DEFAULT, "default", false, false, false, false, BiasGradient::none},
    {CUBLASLT_EPILOGUE_BIAS, "bias", true, false, false, false, BiasGradient::none},
    {CUBLASLT_EPILOGUE_GELU, "gelu", false, true, false, false, BiasGradient::none},
    {CUBLASLT_EPILOGUE_GELU_AUX, "gelu_aux", false, true, true, false, BiasGradient::none},
    {CUBLASLT_EPILOGUE_GELU_BIAS, "gelu_bias", true, true, false, false, BiasGradient::none},
    {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "gelu_aux_bias", true, true, true, false, BiasGradient::none},
    {CUBLASLT_EPILOGUE_DGELU, "dgelu", false, false, false, true, BiasGradient::none},
    {CUBLASLT_EPILOGUE_DGELU_BGRAD, "dgelu_bgrad", false, false, false, true, BiasGradient::rows_of_d},
    {CUBLASLT_EPILOGUE_BGRADA, "bgrada", false, false, false, false, BiasGradient::rows_of_a},
    {CUBLASLT_EPILOGUE_BGRADB, "bgradb", false, false, false, false, BiasGradient::cols_of_b},
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // √(2/π), as kernels/cuda/gelu.cu
constexpr float kCubic = 0.044715f;

float sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

// Element `elements` of an array of `type` at `base`.
const char* at(const void* base, int64_t elements, cudaDataType type) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(elem_bytes(type));
}
char* at(void* base, int64_t elements, cudaDataType type) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(elem_bytes(type));
}

}  // namespace

const Epilogue* find_epilogue(uint32_t value) {
  for (const Epilogue& e : kEpilogues)
    if (e.value == value) return &e;
  return nullptr;
}

size_t elem_bytes(cudaDataType type) { return type == CUDA_R_16BF ? 2 : 4; }

float load(const void* base, cudaDataType type, size_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  const uint32_t bits = uint32_t{static_cast<const uint16_t*>(base)[i]} << 16;  // bf16 is fp32's upper half
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void store(void* base, cudaDataType type, size_t i, float value) {
  if (type == CUDA_R_32F)
    static_cast<float*>(base)[i] = value;
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(value);
}

// gelu_fwd_kernel's expression, operation for operation.
float gelu(float x) { return x * sigmoid(2.f * kSqrt2OverPi * (x + kCubic * x * x * x)); }

// gelu_bwd_kernel's local gradient: with s = σ(2u), d/dx [x·s] = s + 2·x·s·(1 − s)·u'(x), 1 − s = σ(−2u).
float gelu_derivative(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float s = sigmoid(2.f * u), one_minus_s = sigmoid(-2.f * u);
  const float du_dx = kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
  return s + 2.f * x * s * one_minus_s * du_dx;
}

void LtProduct::run() const {
  const size_t m = d.rows, n = d.cols, k = trans_a ? a.rows : a.cols;
  const Epilogue& e = *epilogue;
  std::vector<float> opa(m * k), opb(k * n), acc(n);
  for (int64_t batch = 0; batch < d.batch; ++batch) {
    const char* Ab = at(A, batch * a.stride, a.type);
    const char* Bb = at(B, batch * b.stride, b.type);
    const char* Cb = beta != 0.f ? at(C, batch * c.stride, c.type) : nullptr;
    char* Db = at(D, batch * d.stride, d.type);
    char* bias_b = bias ? at(bias, batch * bias_stride, bias_type) : nullptr;
    char* aux_b = aux ? at(aux, batch * aux_stride, aux_type) : nullptr;
    const auto lda = static_cast<size_t>(a.ld), ldb = static_cast<size_t>(b.ld);
    // op(A) as [m][k] and op(B) as [k][n], row-major, fp32.
    for (size_t i = 0; i < m; ++i)
      for (size_t p = 0; p < k; ++p) opa[i * k + p] = load(Ab, a.type, trans_a ? i * lda + p : p * lda + i);
    for (size_t p = 0; p < k; ++p)
      for (size_t j = 0; j < n; ++j) opb[p * n + j] = load(Bb, b.type, trans_b ? p * ldb + j : j * ldb + p);
    for (size_t i = 0; i < m; ++i) {
      // Every D(i, j) sums its k products in increasing p, each product and sum rounded to fp32.
      std::fill(acc.begin(), acc.end(), 0.f);
      for (size_t p = 0; p < k; ++p) {
        const float x = opa[i * k + p];
        const float* row = &opb[p * n];
        for (size_t j = 0; j < n; ++j) acc[j] += x * row[j];
      }
      float row_sum = 0.f;  // DGELU_BGRAD: Σ_j of the fp32 gradient, before D's rounding, j increasing
      for (size_t j = 0; j < n; ++j) {
        float v = alpha * acc[j];
        if (Cb) v += beta * load(Cb, c.type, j * static_cast<size_t>(c.ld) + i);
        if (e.adds_bias) v += load(bias_b, bias_type, i);
        const size_t aux_at = j * static_cast<size_t>(aux_ld) + i;
        if (e.gelu) {
          if (e.stores_aux) store(aux_b, aux_type, aux_at, v);  // GELU's input, rounded once to aux's type
          v = gelu(v);
        }
        if (e.dgelu) v = gelu_derivative(load(aux_b, aux_type, aux_at)) * v;  // as gelu_bwd_kernel: grad·dout
        if (e.bias_gradient == BiasGradient::rows_of_d) row_sum += v;
        store(Db, d.type, j * static_cast<size_t>(d.ld) + i, v);
      }
      if (e.bias_gradient == BiasGradient::rows_of_d) store(bias_b, bias_type, i, row_sum);
    }
    if (e.bias_gradient == BiasGradient::rows_of_a)
      for (size_t i = 0; i < m; ++i) {
        float sum = 0.f;
        for (size_t p = 0; p < k; ++p) sum += opa[i * k + p];
        store(bias_b, bias_type, i, sum);
      }
    if (e.bias_gradient == BiasGradient::cols_of_b)
      for (size_t j = 0; j < n; ++j) {
        float sum = 0.f;
        for (size_t p = 0; p < k; ++p) sum += opb[p * n + j];
        store(bias_b, bias_type, j, sum);
      }
  }
}

}  // namespace sftdp::sim
