// tests/cudasim/test_cuda_sim_cublaslt.cpp — the simulator's cuBLASLt against OpenBLAS: column-major
// D = alpha·op(A)·op(B) + beta·C through the real cuBLASLt call sequence (descriptors, layouts, the
// heuristic, cublasLtMatmul on a stream), over both transposes, leading dimensions larger than the
// rows, strided batches, beta != 0 out of place and in place, beta == 0 with a NaN C (never read),
// the BIAS epilogue, and bf16 inputs (against sgemm on the same bf16-rounded values); fp32 results
// within 1e-5 of Σ|a||b| per element (OpenBLAS sums in another order). Unsupported configurations are
// CUBLAS_STATUS_NOT_SUPPORTED; data less aligned than the algorithm was chosen for, and matrices
// outside device memory, are CUBLAS_STATUS_INVALID_VALUE with a report.
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
  const void* aux = nullptr;  // an attribute the simulator does not implement: refused, not ignored
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
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

}  // namespace
}  // namespace sftdp::test
