// tests/cudasim/test_cuda_sim_cublaslt.cpp — the simulator's cuBLASLt against OpenBLAS: column-major
// D = alpha·op(A)·op(B) + beta·C through the real cuBLASLt call sequence (descriptors, layouts, the
// heuristic, cublasLtMatmul on a stream), over both transposes, leading dimensions larger than the
// rows, strided batches, beta != 0 out of place and in place, beta == 0 with a NaN C (never read),
// the BIAS epilogue, and bf16 inputs (against sgemm on the same bf16-rounded values); fp32 results
// within 1e-5 of Σ|a||b| per element (OpenBLAS sums in another order). Then every epilogue (BIAS, GELU,
// GELU_AUX, GELU_BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA, BGRADB) and bf16 C/D against a double
// reference written here: the aux matrix at its own leading dimension with its padding untouched, DGELU
// reading it, bias gradients overwriting their vector, a bf16 result within half an ulp (rounded once, to
// nearest); the fused GELU and DGELU equal the project's gelu_fwd/gelu_bwd kernels bit for bit.
// Unsupported configurations (undocumented type combinations and epilogue uses) are
// CUBLAS_STATUS_NOT_SUPPORTED; data less aligned than the algorithm was chosen for, an algorithm run for
// another epilogue or type, bad aux layouts, and operands outside device memory are
// CUBLAS_STATUS_INVALID_VALUE with a report; a GELU_AUX_BIAS record line names its epilogue operands.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "common/test_util.h"
#include "cudasim/memory.h"
#include "cudasim/record.h"
#include "kernels/gelu.h"
#include "kernels/test_cuda_util.h"

namespace sftdp::test {
namespace {

struct LtCase {
  bool ta, tb;
  int m, n, k;
  int pad;  // extra rows in every leading dimension
  int batch;
  float alpha, beta;
  bool in_place, bias, bf16;
};
std::string test_name(const LtCase& c) {
  std::string s = std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + "_m" + std::to_string(c.m) + "_n" +
                  std::to_string(c.n) + "_k" + std::to_string(c.k) + "_pad" + std::to_string(c.pad) + "_b" +
                  std::to_string(c.batch) + (c.beta != 0 ? "_beta" : "") + (c.in_place ? "_inplace" : "") +
                  (c.bias ? "_bias" : "") + (c.bf16 ? "_bf16" : "");
  return s;
}
void PrintTo(const LtCase& c, std::ostream* os) { *os << test_name(c); }

float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

class SimCublasLt : public SimTest, public ::testing::WithParamInterface<LtCase> {};

TEST_P(SimCublasLt, MatchesOpenBlas) {
  const LtCase c = GetParam();
  const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int lda = a_rows + c.pad, ldb = b_rows + c.pad, ldc = c.m + c.pad;
  const int64_t sa = int64_t{lda} * a_cols + 3, sb = int64_t{ldb} * b_cols + 5, sc = int64_t{ldc} * c.n + 7;
  auto A = uniform(static_cast<size_t>(sa * c.batch), 1), B = uniform(static_cast<size_t>(sb * c.batch), 2);
  const auto C0 = uniform(static_cast<size_t>(sc * c.batch), 3), bias = uniform(static_cast<size_t>(c.m), 4);
  if (c.bf16)
    for (auto* v : {&A, &B})
      for (float& x : *v) x = bf16_round(x);

  // Reference: OpenBLAS per batch entry, then beta·C and the bias (fp32).
  std::vector<float> ref(C0.size());
  std::vector<double> scale(C0.size());  // Σ|a||b| per element, for the tolerance
  for (int bi = 0; bi < c.batch; ++bi) {
    std::vector<float> d(static_cast<size_t>(ldc) * c.n, 0.f);
    cblas_sgemm(CblasColMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, c.m, c.n, c.k,
                c.alpha, A.data() + bi * sa, lda, B.data() + bi * sb, ldb, 0.f, d.data(), ldc);
    for (int j = 0; j < c.n; ++j)
      for (int i = 0; i < c.m; ++i) {
        const size_t at = static_cast<size_t>(bi * sc) + static_cast<size_t>(j) * ldc + i;
        float v = d[static_cast<size_t>(j) * ldc + i];
        if (c.beta != 0) v += c.beta * C0[at];
        if (c.bias) v += bias[static_cast<size_t>(i)];
        ref[at] = v;
        double s = 0;
        for (int p = 0; p < c.k; ++p) {
          const float a = c.ta ? A[static_cast<size_t>(bi * sa) + static_cast<size_t>(i) * lda + p]
                               : A[static_cast<size_t>(bi * sa) + static_cast<size_t>(p) * lda + i];
          const float b = c.tb ? B[static_cast<size_t>(bi * sb) + static_cast<size_t>(p) * ldb + j]
                               : B[static_cast<size_t>(bi * sb) + static_cast<size_t>(j) * ldb + p];
          s += std::fabs(static_cast<double>(a) * b);
        }
        scale[at] = std::fabs(c.alpha) * s + std::fabs(c.beta * C0[at]) + (c.bias ? std::fabs(bias[i]) : 0.0);
      }
  }

  // Device operands: fp32, or bf16 copies of the (already rounded) values.
  const auto to_device = [&](const std::vector<float>& v) -> void* {
    if (!c.bf16) return device_from(v);
    std::vector<__nv_bfloat16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16_rn(v[i]);
    return device_from(h);
  };
  void* dA = to_device(A);
  void* dB = to_device(B);
  float* dC = device_from(c.beta != 0 ? C0 : std::vector<float>(C0.size(), std::numeric_limits<float>::quiet_NaN()));
  float* dD = c.in_place ? dC : device_from(C0);  // D starts as C0: only written elements may change
  float* dbias = device_from(bias);

  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), CUBLAS_STATUS_SUCCESS);
  if (c.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias),
              CUBLAS_STATUS_SUCCESS);
  }
  const cudaDataType ab = c.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatrixLayout_t la, lb, lc;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, ab, a_rows, a_cols, lda), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, ab, b_rows, b_cols, ldb), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, c.m, c.n, ldc), CUBLAS_STATUS_SUCCESS);
  if (c.batch > 1)
    for (auto [l, stride] : {std::pair{la, sa}, std::pair{lb, sb}, std::pair{lc, sc}}) {
      const int32_t count = c.batch;
      ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          CUBLAS_STATUS_SUCCESS);
    }
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t align = 4;  // the strides above leave most batch entries 4-byte aligned
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    const uint32_t a = c.bf16 && (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES ||
                                  attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES)
                           ? 2
                           : align;
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &a, sizeof a), CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &result, &returned), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(returned, 1);
  ASSERT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(
      cublasLtMatmul(lt, op, &c.alpha, dA, la, dB, lb, &c.beta, dC, lc, dD, lc, &result.algo, nullptr, 0, stream_),
      CUBLAS_STATUS_SUCCESS);
  const auto got = host(dD, C0.size());
  for (int bi = 0; bi < c.batch; ++bi)
    for (int j = 0; j < c.n; ++j)
      for (int i = 0; i < ldc; ++i) {
        const size_t at = static_cast<size_t>(bi * sc) + static_cast<size_t>(j) * ldc + i;
        if (i >= c.m) {  // padding rows of D are not written (D starts as C0 in every case listed)
          ASSERT_EQ(got[at], C0[at]) << at;
          continue;
        }
        ASSERT_NEAR(got[at], ref[at], 1e-5 * scale[at] + 1e-30) << "batch " << bi << " (" << i << "," << j << ")";
      }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimCublasLt,
                         ::testing::Values(LtCase{false, false, 7, 5, 3, 0, 1, 1.f, 0.f, false, false, false},
                                           LtCase{true, false, 33, 17, 65, 3, 1, 1.f, 0.f, false, false, false},
                                           LtCase{false, true, 16, 40, 9, 0, 1, 0.5f, 0.f, false, true, false},
                                           LtCase{true, true, 12, 11, 10, 5, 1, 1.f, 1.f, false, false, false},
                                           LtCase{false, false, 9, 8, 7, 2, 4, 1.f, 0.f, false, false, false},
                                           LtCase{true, false, 8, 6, 30, 1, 3, 0.125f, 1.f, true, false, false},
                                           LtCase{false, true, 31, 9, 64, 0, 1, 1.f, 0.f, false, true, true},
                                           LtCase{true, false, 20, 13, 17, 4, 2, 1.f, 1.f, false, false, true}),
                         NameFromParam());

// ---- epilogues and bf16 C/D ---------------------------------------------------------------------------
// Each epilogue as cublasLt.h documents it, against a double-precision reference written here:
//   BIAS: + bias[i] on every column (m elements); GELU*: GELU of it; *_AUX: GELU's input (after the bias) to
//   aux(i, j) at aux_ld; DGELU*: D = GELU'(aux(i, j))·(alpha·AB + beta·C); DGELU_BGRAD: bgrad[i] = Σ_j D(i, j);
//   BGRADA: bgrad[i] = Σ_p op(A)(i, p); BGRADB: bgrad[j] = Σ_p op(B)(p, j). A bias gradient overwrites.
// An fp32 value is within 2e-5 of Σ|terms|; a bf16 one (D, aux, bias gradient) within that plus half a bf16
// ulp: rounded once, to nearest.
enum class Grad { none, rows_of_d, rows_of_a, cols_of_b };
struct EpilogueSpec {
  bool adds_bias, gelu, stores_aux, dgelu;
  Grad grad;
};
EpilogueSpec spec_of(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS:
      return {true, false, false, false, Grad::none};
    case CUBLASLT_EPILOGUE_GELU:
      return {false, true, false, false, Grad::none};
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return {false, true, true, false, Grad::none};
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return {true, true, false, false, Grad::none};
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return {true, true, true, false, Grad::none};
    case CUBLASLT_EPILOGUE_DGELU:
      return {false, false, false, true, Grad::none};
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return {false, false, false, true, Grad::rows_of_d};
    case CUBLASLT_EPILOGUE_BGRADA:
      return {false, false, false, false, Grad::rows_of_a};
    case CUBLASLT_EPILOGUE_BGRADB:
      return {false, false, false, false, Grad::cols_of_b};
    default:
      return {false, false, false, false, Grad::none};
  }
}
const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "bias";
    case CUBLASLT_EPILOGUE_GELU:
      return "gelu";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "gelu_aux";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "gelu_bias";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "gelu_aux_bias";
    case CUBLASLT_EPILOGUE_DGELU:
      return "dgelu";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return "dgelu_bgrad";
    case CUBLASLT_EPILOGUE_BGRADA:
      return "bgrada";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "bgradb";
    default:
      return "default";
  }
}

// GELU's tanh form and its derivative, in double.
double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
double gelu_derivative_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}
// Half a unit in the last place of a bf16 near |x| (8 significant bits).
double half_bf16_ulp(double x) { return x == 0.0 ? 0.0 : std::ldexp(1.0, std::ilogb(x) - 8); }

struct EpiCase {
  cublasLtEpilogue_t epilogue;
  bool ta, tb;
  int m, n, k;
  int pad;  // extra rows in every leading dimension (A, B, C/D; the aux matrix gets 8 more when > 0)
  int batch;
  float beta;
  bool bf16_ab, bf16_cd, in_place;
};
std::string test_name(const EpiCase& c) {
  return std::string(epilogue_name(c.epilogue)) + "_" + (c.ta ? "T" : "N") + (c.tb ? "T" : "N") + "_m" +
         std::to_string(c.m) + "_n" + std::to_string(c.n) + "_k" + std::to_string(c.k) + "_pad" +
         std::to_string(c.pad) + "_b" + std::to_string(c.batch) + (c.beta != 0 ? "_beta" : "") +
         (c.bf16_ab ? "_ab16" : "_ab32") + (c.bf16_cd ? "_cd16" : "_cd32") + (c.in_place ? "_inplace" : "");
}
void PrintTo(const EpiCase& c, std::ostream* os) { *os << test_name(c); }

class SimCublasLtEpilogue : public SimTest, public ::testing::WithParamInterface<EpiCase> {
 protected:
  ~SimCublasLtEpilogue() override {
    for (auto l : layouts_) cublasLtMatrixLayoutDestroy(l);
  }
  std::vector<cublasLtMatrixLayout_t> layouts_;
  // Host floats (already representable in the type) to device fp32 or bf16, and back.
  void* upload(const std::vector<float>& v, bool bf16) {
    if (!bf16) return device_from(v);
    std::vector<__nv_bfloat16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16_rn(v[i]);
    return device_from(h);
  }
  std::vector<float> download(const void* p, size_t n, bool bf16) {
    if (!bf16) return host(static_cast<const float*>(p), n);
    const auto h = host(static_cast<const __nv_bfloat16*>(p), n);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = __bfloat162float(h[i]);
    return v;
  }
  cublasLtMatrixLayout_t layout(cudaDataType t, int rows, int cols, int ld, int batch, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
    if (batch > 1) {
      const int32_t count = batch;
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          CUBLAS_STATUS_SUCCESS);
    }
    layouts_.push_back(l);
    return l;
  }
};

TEST_P(SimCublasLtEpilogue, MatchesAPlainReference) {
  const EpiCase c = GetParam();
  const EpilogueSpec e = spec_of(c.epilogue);
  const float alpha = 0.75f;
  const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int lda = a_rows + c.pad, ldb = b_rows + c.pad, ldc = c.m + c.pad;
  const int64_t sa = int64_t{lda} * a_cols + 3, sb = int64_t{ldb} * b_cols + 5, sc = int64_t{ldc} * c.n + 7;
  // The aux matrix: a leading dimension that is a multiple of 8 (padded beyond m when pad > 0), batch
  // entries 8 elements apart beyond their extent.
  const int aux_ld = (c.m + 7) / 8 * 8 + (c.pad > 0 ? 8 : 0);
  const int64_t s_aux = int64_t{aux_ld} * c.n + 8;
  // The bias vector (m) or bias gradient (m, or n for BGRADB): a batched BIAS reads one vector per entry;
  // GELU_AUX_BIAS broadcasts one (stride 0); a batched gradient writes one per entry, 2 apart.
  const int bias_len = e.grad == Grad::cols_of_b ? c.n : c.m;
  int64_t s_bias = 0;
  if (c.batch > 1 && e.grad != Grad::none) s_bias = bias_len + 2;
  if (c.batch > 1 && c.epilogue == CUBLASLT_EPILOGUE_BIAS) s_bias = bias_len + 3;
  const size_t bias_size = static_cast<size_t>(s_bias * (c.batch - 1) + bias_len + 1);  // + a guard element
  const auto round_cd = [&](std::vector<float> v) {
    if (c.bf16_cd)
      for (float& x : v) x = bf16_round(x);
    return v;
  };
  auto A = uniform(static_cast<size_t>(sa * c.batch), 11), B = uniform(static_cast<size_t>(sb * c.batch), 12);
  if (c.bf16_ab)
    for (auto* v : {&A, &B})
      for (float& x : *v) x = bf16_round(x);
  const auto C0 = round_cd(uniform(static_cast<size_t>(sc * c.batch), 13));
  const auto D0 = c.in_place ? C0 : round_cd(uniform(C0.size(), 14));  // D's first contents: padding must keep them
  const auto bias = round_cd(uniform(bias_size, 15));
  const size_t aux_size = static_cast<size_t>(s_aux * c.batch);
  // DGELU reads aux: values unrelated to this product, over GELU's curved range; GELU_AUX finds a sentinel.
  const auto aux_in = round_cd(e.dgelu ? uniform(aux_size, 16, -3.f, 3.f) : std::vector<float>(aux_size, 12352.f));
  const std::vector<float> bgrad0(bias_size, 1000.f);  // a bias gradient overwrites this

  // Reference, per batch entry, in double.
  const auto a_at = [&](int bi, int i, int p) {
    return A[static_cast<size_t>(bi * sa + (c.ta ? int64_t{i} * lda + p : int64_t{p} * lda + i))];
  };
  const auto b_at = [&](int bi, int p, int j) {
    return B[static_cast<size_t>(bi * sb + (c.tb ? int64_t{p} * ldb + j : int64_t{j} * ldb + p))];
  };
  std::vector<double> d_ref(C0.size()), d_tol(C0.size()), aux_ref(aux_size), aux_tol(aux_size);
  std::vector<double> bgrad_ref(bias_size), bgrad_tol(bias_size);
  const auto bf16_tol = [&](double ref, double tol) {  // D's type: a bf16 rounds once more, to nearest
    return tol + (c.bf16_cd ? half_bf16_ulp(std::fabs(ref) + tol) : 0);
  };
  for (int bi = 0; bi < c.batch; ++bi) {
    for (int i = 0; i < c.m; ++i) {
      double row_sum = 0, row_tol = 0;
      for (int j = 0; j < c.n; ++j) {
        double dot = 0, scale = 0;
        for (int p = 0; p < c.k; ++p) {
          const double prod = static_cast<double>(a_at(bi, i, p)) * b_at(bi, p, j);
          dot += prod, scale += std::fabs(prod);
        }
        const size_t at = static_cast<size_t>(bi * sc + int64_t{j} * ldc + i);
        double x = alpha * dot + static_cast<double>(c.beta) * C0[at];
        scale = alpha * scale + std::fabs(static_cast<double>(c.beta) * C0[at]);
        if (e.adds_bias) {
          const double b = bias[static_cast<size_t>(bi * s_bias + i)];
          x += b, scale += std::fabs(b);
        }
        const double x_tol = 2e-5 * scale + 1e-7;
        double d = x, tol = x_tol;
        const size_t aux_at = static_cast<size_t>(bi * s_aux + int64_t{j} * aux_ld + i);
        if (e.gelu) {
          aux_ref[aux_at] = x, aux_tol[aux_at] = bf16_tol(x, x_tol);
          d = gelu_ref(x), tol = 1.2 * x_tol + 1e-6 * std::fabs(d);  // |GELU'| < 1.13
        }
        if (e.dgelu) {
          const double g = gelu_derivative_ref(aux_in[aux_at]);
          d = g * x, tol = std::fabs(g) * x_tol + 1e-6 * std::fabs(x);
        }
        row_sum += d, row_tol += tol;
        d_ref[at] = d, d_tol[at] = bf16_tol(d, tol);
      }
      if (e.grad == Grad::rows_of_d) {
        const size_t at = static_cast<size_t>(bi * s_bias + i);
        bgrad_ref[at] = row_sum, bgrad_tol[at] = bf16_tol(row_sum, row_tol + 1e-6 * c.n);
      }
    }
    if (e.grad == Grad::rows_of_a || e.grad == Grad::cols_of_b)
      for (int v = 0; v < bias_len; ++v) {
        double sum = 0, scale = 0;
        for (int p = 0; p < c.k; ++p) {
          const double x = e.grad == Grad::rows_of_a ? a_at(bi, v, p) : b_at(bi, p, v);
          sum += x, scale += std::fabs(x);
        }
        const size_t at = static_cast<size_t>(bi * s_bias + v);
        bgrad_ref[at] = sum, bgrad_tol[at] = bf16_tol(sum, 2e-5 * scale + 1e-7);
      }
  }

  void* dA = upload(A, c.bf16_ab);
  void* dB = upload(B, c.bf16_ab);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  void* dC = upload(c.beta != 0 ? C0 : std::vector<float>(C0.size(), nan), c.bf16_cd);  // beta 0: never read
  void* dD = c.in_place ? dC : upload(D0, c.bf16_cd);
  void* dbias = upload(e.grad != Grad::none ? bgrad0 : bias, c.bf16_cd);
  void* daux = upload(aux_in, c.bf16_cd);

  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t aux_ld64 = aux_ld;
  const struct {
    cublasLtMatmulDescAttributes_t attr;
    const void* value;
    size_t size;
  } attributes[] = {
      {CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta},
      {CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb},
      {CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof c.epilogue},
      {CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias},
      {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &s_bias, sizeof s_bias},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld64, sizeof aux_ld64},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &s_aux, sizeof s_aux},
  };
  for (const auto& a : attributes)
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(op, a.attr, a.value, a.size), CUBLAS_STATUS_SUCCESS) << a.attr;
  const cudaDataType ab = c.bf16_ab ? CUDA_R_16BF : CUDA_R_32F, cd = c.bf16_cd ? CUDA_R_16BF : CUDA_R_32F;
  const auto la = layout(ab, a_rows, a_cols, lda, c.batch, sa), lb = layout(ab, b_rows, b_cols, ldb, c.batch, sb);
  const auto lc = layout(cd, c.m, c.n, ldc, c.batch, sc);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t align_ab = c.bf16_ab ? 2 : 4, align_cd = c.bf16_cd ? 2 : 4;  // the odd strides above allow no more
  for (auto [attr, al] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_ab},
                          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_ab},
                          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_cd},
                          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_cd}})
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &result, &returned), CUBLAS_STATUS_SUCCESS)
      << all_reports();
  ASSERT_EQ(returned, 1);
  ASSERT_EQ(cublasLtMatmul(lt, op, &alpha, dA, la, dB, lb, &c.beta, dC, lc, dD, lc, &result.algo, nullptr, 0, stream_),
            CUBLAS_STATUS_SUCCESS)
      << all_reports();

  const auto got_d = download(dD, C0.size(), c.bf16_cd);
  for (int bi = 0; bi < c.batch; ++bi)
    for (int j = 0; j < c.n; ++j)
      for (int i = 0; i < ldc; ++i) {
        const size_t at = static_cast<size_t>(bi * sc + int64_t{j} * ldc + i);
        if (i >= c.m)  // padding rows of D are never written
          ASSERT_EQ(got_d[at], D0[at]) << "D padding " << at;
        else
          ASSERT_NEAR(got_d[at], d_ref[at], d_tol[at]) << "D batch " << bi << " (" << i << "," << j << ")";
      }
  // The aux matrix: GELU's input at rows < m of each column, nothing else written; DGELU only reads it.
  const auto got_aux = download(daux, aux_size, c.bf16_cd);
  for (size_t at = 0; at < aux_size; ++at) {
    const int64_t in_entry = static_cast<int64_t>(at) % s_aux;
    const bool element = in_entry < int64_t{aux_ld} * c.n && in_entry % aux_ld < c.m;
    if (e.stores_aux && element)
      ASSERT_NEAR(got_aux[at], aux_ref[at], aux_tol[at]) << "aux " << at;
    else
      ASSERT_EQ(got_aux[at], aux_in[at]) << "aux untouched at " << at << (element ? "" : " (padding)");
  }
  // The bias gradient overwrites its vector (the 1000s are gone), and nothing between or after the vectors.
  const auto got_bias = download(dbias, bias_size, c.bf16_cd);
  for (size_t at = 0; at < bias_size; ++at) {
    const bool element = at + 1 < bias_size && (s_bias == 0 ? at < size_t(bias_len) : at % s_bias < size_t(bias_len));
    if (e.grad != Grad::none && element)
      ASSERT_NEAR(got_bias[at], bgrad_ref[at], bgrad_tol[at]) << "bias gradient " << at;
    else
      ASSERT_EQ(got_bias[at], (e.grad != Grad::none ? bgrad0 : bias)[at]) << "bias untouched at " << at;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

constexpr bool T = true, F = false;
INSTANTIATE_TEST_SUITE_P(
    Epilogues, SimCublasLtEpilogue,
    ::testing::Values(EpiCase{CUBLASLT_EPILOGUE_GELU, F, F, 7, 5, 3, 0, 1, 0.f, F, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_GELU_AUX, T, F, 33, 17, 65, 3, 1, 0.f, F, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_GELU_BIAS, F, T, 16, 40, 9, 0, 1, 0.f, T, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, T, T, 12, 11, 10, 5, 1, 1.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, F, F, 9, 8, 7, 2, 3, 1.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_DGELU, F, T, 20, 13, 17, 4, 1, 1.f, F, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_DGELU, T, F, 10, 6, 5, 0, 1, 0.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_DGELU_BGRAD, T, F, 31, 9, 64, 0, 1, 0.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_DGELU_BGRAD, F, F, 8, 6, 12, 1, 2, 1.f, F, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_BGRADA, F, F, 8, 6, 30, 1, 1, 0.f, F, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_BGRADA, F, T, 17, 5, 33, 0, 1, 1.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_BGRADB, F, T, 16, 24, 7, 2, 1, 0.f, F, F, F},
                      EpiCase{CUBLASLT_EPILOGUE_BGRADB, T, T, 5, 19, 12, 0, 2, 0.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_BIAS, T, F, 13, 7, 9, 3, 2, 1.f, T, T, F},
                      EpiCase{CUBLASLT_EPILOGUE_DEFAULT, F, T, 11, 6, 8, 2, 1, 1.f, T, T, T},
                      EpiCase{CUBLASLT_EPILOGUE_DEFAULT, T, T, 9, 10, 33, 0, 1, 0.f, T, T, F}),
    NameFromParam());

// ---- refusals ---------------------------------------------------------------------------------------
class SimCublasLtErrors : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_EQ(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    cublasLtMatmulPreferenceDestroy(pref_);
    cublasLtMatmulDescDestroy(op_);
    cublasLtDestroy(lt_);
    SimTest::TearDown();
  }
  cublasLtMatrixLayout_t layout(cudaDataType t, int rows, int cols) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, t, rows, cols, rows), CUBLAS_STATUS_SUCCESS);
    layouts_.push_back(l);
    return l;
  }
  ~SimCublasLtErrors() override {
    for (auto l : layouts_) cublasLtMatrixLayoutDestroy(l);
  }
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  std::vector<cublasLtMatrixLayout_t> layouts_;
};

TEST_F(SimCublasLtErrors, UnsupportedTypesAreNotSupported) {
  cublasLtMatmulHeuristicResult_t r{};
  int returned = 0;
  const auto a = layout(CUDA_R_16F, 8, 8), c = layout(CUDA_R_32F, 8, 8);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt_, op_, a, a, c, c, pref_, 1, &r, &returned), CUBLAS_STATUS_NOT_SUPPORTED);
  const void* scale = nullptr;  // an attribute the simulator does not implement (FP8's): refused, not ignored
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, &scale, sizeof scale),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const cublasOperation_t t = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &t, 2), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(SimCublasLtErrors, DataLessAlignedThanTheAlgorithmAssumedIsRejected) {
  const auto l = layout(CUDA_R_32F, 8, 8);
  float* buf = device<float>(200);
  cublasLtMatmulHeuristicResult_t r{};
  int returned = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt_, op_, l, l, l, l, pref_, 1, &r, &returned), CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  // The default preference promises 256-byte alignment; A one float in is 4-byte aligned.
  EXPECT_EQ(cublasLtMatmul(lt_, op_, &one, buf + 1, l, buf + 64, l, &zero, buf + 128, l, buf + 128, l, &r.algo, nullptr,
                           0, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("cublasLt", "matrix A is 4-byte aligned", "chosen for 256");
}

TEST_F(SimCublasLtErrors, MatricesOutsideDeviceMemoryAreRejected) {
  const auto l = layout(CUDA_R_32F, 8, 8);
  float* small = device<float>(60);  // 64 needed
  float* ok = device<float>(64);
  std::vector<float> on_host(64);
  const float one = 1, zero = 0;
  EXPECT_EQ(cublasLtMatmul(lt_, op_, &one, small, l, ok, l, &zero, ok, l, ok, l, nullptr, nullptr, 0, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("memcheck", "cublasLtMatmul: matrix A (256 bytes");
  EXPECT_EQ(cublasLtMatmul(lt_, op_, &one, ok, l, on_host.data(), l, &zero, ok, l, ok, l, nullptr, nullptr, 0, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("memcheck", "matrix B", "not device memory");
}

// ---- epilogue calls: the project's GELU, refusals, records ------------------------------------------
class SimCublasLtEpilogueCalls : public SimCublasLtErrors {
 protected:
  template <class V>
  void set(cublasLtMatmulDescAttributes_t attr, const V& value) {
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(op_, attr, &value, sizeof value), CUBLAS_STATUS_SUCCESS) << attr;
  }
  void set_epilogue(cublasLtEpilogue_t e) { set(CUBLASLT_MATMUL_DESC_EPILOGUE, e); }
  void set_alignment(uint32_t bytes) {
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &bytes, sizeof bytes), CUBLAS_STATUS_SUCCESS);
  }
  void set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride) {
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
              CUBLAS_STATUS_SUCCESS);
  }
  // The heuristic's status for op_ on these layouts (D in C's layout); its algorithm in *algo.
  cublasStatus_t heuristic(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                           cublasLtMatmulAlgo_t* algo = nullptr) {
    cublasLtMatmulHeuristicResult_t r{};
    int returned = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt_, op_, a, b, c, c, pref_, 1, &r, &returned);
    if (algo) *algo = r.algo;
    return s;
  }
  // D = A·B in place of C (beta 0), with `algo` or none.
  cublasStatus_t matmul(const void* A, cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, void* D,
                        cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo = nullptr) {
    const float one = 1, zero = 0;
    return cublasLtMatmul(lt_, op_, &one, A, a, B, b, &zero, D, d, D, d, algo, nullptr, 0, stream_);
  }
  // A float inside a fresh buffer whose address is a multiple of 256 bytes.
  float* aligned_256(size_t floats) {
    const auto p = reinterpret_cast<uintptr_t>(device<float>(floats + 64));
    return reinterpret_cast<float*>((p + 255) / 256 * 256);
  }
};

// The fused GELU is the project's GELU kernel, bit for bit: GELU_AUX stores the product as GELU's input and
// D = gelu_fwd(that input); DGELU's D = gelu_bwd(input = aux, dout = the product).
TEST_F(SimCublasLtEpilogueCalls, FusedGeluIsTheProjectsGeluKernelBitForBit) {
  constexpr int m = 16, n = 9, k = 13;  // AUX_LD = m, a multiple of 8: aux is packed like D
  const auto a = layout(CUDA_R_32F, m, k), b = layout(CUDA_R_32F, k, n), d = layout(CUDA_R_32F, m, n);
  const float* A = device_from(uniform(m * k, 21, -0.7f, 0.7f));
  const float* B = device_from(uniform(k * n, 22, -0.7f, 0.7f));
  float *product = device<float>(m * n), *D = device<float>(m * n), *aux = device<float>(m * n);
  float* kernel = device<float>(m * n);
  ASSERT_EQ(matmul(A, a, B, b, product, d), CUBLAS_STATUS_SUCCESS) << all_reports();
  set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{m});
  ASSERT_EQ(matmul(A, a, B, b, D, d), CUBLAS_STATUS_SUCCESS) << all_reports();
  cuda::gelu_fwd(kernel, aux, m * n, stream_);
  EXPECT_TRUE(bitwise_equal(host(aux, m * n), host(product, m * n)));
  EXPECT_TRUE(bitwise_equal(host(D, m * n), host(kernel, m * n)));
  set_epilogue(CUBLASLT_EPILOGUE_DGELU);
  ASSERT_EQ(matmul(A, a, B, b, D, d), CUBLAS_STATUS_SUCCESS) << all_reports();
  cuda::gelu_bwd(kernel, aux, product, m * n, stream_);
  EXPECT_TRUE(bitwise_equal(host(D, m * n), host(kernel, m * n)));
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimCublasLtEpilogueCalls, TypeCombinationsOutsideCublasLtMatmulsTableAreNotSupported) {
  const auto a32 = layout(CUDA_R_32F, 8, 8), a16 = layout(CUDA_R_16BF, 8, 8);
  const auto c32 = layout(CUDA_R_32F, 8, 8), c16 = layout(CUDA_R_16BF, 8, 8);
  // The table's rows for CUBLAS_COMPUTE_32F and fp32 scale that the simulator has (A/B -> C/D).
  EXPECT_EQ(heuristic(a16, a16, c16), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(a16, a16, c32), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(heuristic(a32, a32, c32), CUBLAS_STATUS_SUCCESS);
  // Not in it: fp32 inputs to a bf16 output, A and B of different types, C and D of different types.
  EXPECT_EQ(heuristic(a32, a32, c16), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(a32, a16, c32), CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulHeuristicResult_t r{};
  int returned = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt_, op_, a16, a16, c16, c32, pref_, 1, &r, &returned),
            CUBLAS_STATUS_NOT_SUPPORTED);
  float* buf = device<float>(256);
  EXPECT_EQ(matmul(buf, a32, buf, a32, buf, c16), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_REPORT("cublasLt", "fp32 A and B with bf16 C and D");
  // The bias has D's type: a bf16 D with an fp32 bias is refused, a bf16 bias taken.
  set_epilogue(CUBLASLT_EPILOGUE_BIAS);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, buf);
  set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_32F});
  EXPECT_EQ(heuristic(a16, a16, c16), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(a16, a16, c32), CUBLAS_STATUS_SUCCESS);
  set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF});
  EXPECT_EQ(heuristic(a16, a16, c16), CUBLAS_STATUS_SUCCESS);
}

TEST_F(SimCublasLtEpilogueCalls, EpiloguesOnlyWhereTheyAreDocumented) {
  const auto l = layout(CUDA_R_32F, 8, 8);
  float* buf = device<float>(256);
  set_epilogue(CUBLASLT_EPILOGUE_RELU);  // one the simulator lacks
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(matmul(buf, l, buf, l, buf, l), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_REPORT("cublasLt", "epilogue 2 (the simulator has DEFAULT, BIAS, GELU");
  // BGRADA reduces an untransposed A, BGRADB needs op(B) = Bᵀ.
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, buf);
  set_epilogue(CUBLASLT_EPILOGUE_BGRADA);
  set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_NOT_SUPPORTED);
  set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_SUCCESS);
  set_epilogue(CUBLASLT_EPILOGUE_BGRADB);
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_NOT_SUPPORTED);
  set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_T);
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_SUCCESS);
  // DGELU with k = 1, which cuBLASLt turns into an illegal memory access.
  set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_epilogue(CUBLASLT_EPILOGUE_DGELU);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, buf);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
  EXPECT_EQ(heuristic(layout(CUDA_R_32F, 8, 1), layout(CUDA_R_32F, 1, 8), l), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic(layout(CUDA_R_32F, 8, 2), layout(CUDA_R_32F, 2, 8), l), CUBLAS_STATUS_SUCCESS);
  // An aux epilogue is planned with its aux pointer.
  set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(nullptr));
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(SimCublasLtEpilogueCalls, AuxLeadingDimensionStrideAndTypeAreChecked) {
  const auto a = layout(CUDA_R_16BF, 10, 4), b = layout(CUDA_R_16BF, 4, 6), d = layout(CUDA_R_16BF, 10, 6);
  float* buf = device<float>(256);
  set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, buf);
  // "Must be divisible by 8 and be no less than the number of rows in the output matrix" (unset: 0).
  EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_INVALID_VALUE);
  for (int64_t bad : {12, 8}) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, bad);
    EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_INVALID_VALUE) << bad;
  }
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{16});
  EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_SUCCESS);
  int64_t got = 0;
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &got, sizeof got, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, 16);
  // The aux matrix has D's type.
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t{CUDA_R_32F});
  EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_INVALID_VALUE);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t{CUDA_R_16BF});
  EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_SUCCESS);
  // Batched: the stride is a multiple of 8, and the entries' aux matrices (16·6 elements) do not overlap.
  set_batch(a, 2, 40), set_batch(b, 2, 24), set_batch(d, 2, 60);
  for (int64_t bad : {100, 88}) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, bad);
    EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_INVALID_VALUE) << bad;
  }
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, int64_t{96});
  EXPECT_EQ(heuristic(a, b, d), CUBLAS_STATUS_SUCCESS);
}

TEST_F(SimCublasLtEpilogueCalls, BiasGradientsOfBatchEntriesDoNotOverlap) {
  const auto l = layout(CUDA_R_32F, 8, 8);
  set_batch(l, 3, 64);
  set_epilogue(CUBLASLT_EPILOGUE_BGRADA);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, device<float>(24));
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_INVALID_VALUE);  // stride 0: every entry writes one vector
  set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, int64_t{8});
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_SUCCESS);
}

TEST_F(SimCublasLtEpilogueCalls, AnAlgorithmRunsOnlyWhatItWasChosenFor) {
  set_alignment(4);
  const auto l = layout(CUDA_R_32F, 8, 8);
  float* base = aligned_256(512);
  float *A = base, *B = base + 64, *D = base + 128, *aux = base + 256;
  cublasLtMatmulAlgo_t plain{}, with_aux{};
  ASSERT_EQ(heuristic(l, l, l, &plain), CUBLAS_STATUS_SUCCESS);
  // Another epilogue.
  set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
  EXPECT_EQ(matmul(A, l, B, l, D, l, &plain), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("cublasLt", "not chosen by the heuristic for this configuration");
  // The aux pointer the heuristic saw was 256-byte aligned: an 8-byte aligned one is refused.
  ASSERT_EQ(heuristic(l, l, l, &with_aux), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul(A, l, B, l, D, l, &with_aux), CUBLAS_STATUS_SUCCESS) << all_reports();
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux + 2);
  EXPECT_EQ(matmul(A, l, B, l, D, l, &with_aux), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("cublasLt", "the aux matrix is 8-byte aligned, but the algorithm was chosen for 256");
  // Another C/D type.
  set_epilogue(CUBLASLT_EPILOGUE_DEFAULT);
  const auto a16 = layout(CUDA_R_16BF, 8, 8), c16 = layout(CUDA_R_16BF, 8, 8);
  cublasLtMatmulAlgo_t fp32_out{};
  ASSERT_EQ(heuristic(a16, a16, l, &fp32_out), CUBLAS_STATUS_SUCCESS);
  sim::clear_reports();
  EXPECT_EQ(matmul(A, a16, B, a16, D, c16, &fp32_out), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("cublasLt", "not chosen by the heuristic for this configuration");
}

TEST_F(SimCublasLtEpilogueCalls, EpilogueOperandsAreWholeElementsInDeviceMemory) {
  const auto l = layout(CUDA_R_32F, 8, 8);
  float* buf = device<float>(256);
  // A bias gradient may be planned before its vector exists, but not run without one.
  set_epilogue(CUBLASLT_EPILOGUE_BGRADA);
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul(buf, l, buf + 64, l, buf + 128, l), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("cublasLt", "the bgrada epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
  // A bias two bytes into a float.
  set_epilogue(CUBLASLT_EPILOGUE_BIAS);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<char*>(buf + 192) + 2);
  EXPECT_EQ(heuristic(l, l, l), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(matmul(buf, l, buf + 64, l, buf + 128, l), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("cublasLt", "the bias vector is 2-byte aligned, less than one element");
  // An aux matrix in host memory.
  std::vector<float> on_host(64);
  set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, on_host.data());
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
  EXPECT_EQ(matmul(buf, l, buf + 64, l, buf + 128, l), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_REPORT("memcheck", "the aux matrix (256 bytes", "not device memory");
}

// ---- record mode ------------------------------------------------------------------------------------
class SimCublasLtRecord : public SimCublasLtEpilogueCalls {
 protected:
  void TearDown() override {
    sim::set_record("", false);
    SimCublasLtEpilogueCalls::TearDown();
  }
  TempDir dir_;
};

// {"alloc":id,"offset":0} of a device allocation's start.
std::string alloc_start(const void* p) {
  return "{\"alloc\":" + std::to_string(sim::memory().find(p, 0)->id) + ",\"offset\":0}";
}

TEST_F(SimCublasLtRecord, AGeluAuxBiasMatmulRecordsItsEpilogueAndItsOperands) {
  constexpr int m = 12, n = 5, k = 4, aux_ld = 16;
  const auto a = layout(CUDA_R_16BF, m, k), b = layout(CUDA_R_16BF, k, n), d = layout(CUDA_R_16BF, m, n);
  set_alignment(2);
  auto* A = device<__nv_bfloat16>(m * k);
  auto* B = device<__nv_bfloat16>(k * n);
  auto* D = device<__nv_bfloat16>(m * n);
  auto* bias = device<__nv_bfloat16>(m);
  auto* aux = device<__nv_bfloat16>(aux_ld * n);
  set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{aux_ld});
  const std::string path = dir_ / "gemm.jsonl";
  sim::set_record(path, false);
  ASSERT_EQ(matmul(A, a, B, b, D, d), CUBLAS_STATUS_SUCCESS) << all_reports();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  sim::set_record("", false);
  const std::string text = read_file(path);
  EXPECT_CONTAINS(text, R"("m":12,"n":5,"k":4,"batch":1,"trans_a":false,"trans_b":false,"a_type":"bf16",)");
  EXPECT_CONTAINS(text, R"("c_type":"bf16","ldc":12,"stride_c":0,"d_type":"bf16","ldd":12,"stride_d":0,)"
                        R"("epilogue":"gelu_aux_bias","bias":)" +
                            alloc_start(bias) + R"(,"bias_type":"bf16","stride_bias":0,"aux":)" + alloc_start(aux) +
                            R"(,"aux_type":"bf16","ldaux":16,"stride_aux":0,"alpha":1,"beta":0,)");
}

}  // namespace
}  // namespace sftdp::test
