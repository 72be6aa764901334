// cudasim/cublaslt.cpp — the cuBLASLt subset sft-dp uses, written from cuBLASLt's documentation
// (cublasLt.h's comments are its text): descriptors, layouts, preferences, the heuristic and
// cublasLtMatmul, whose arithmetic is cublaslt_math.cpp's. Column-major D = alpha·op(A)·op(B) + beta·C
// with leading dimensions and strided batches, then the epilogue (DEFAULT, BIAS, GELU, GELU_AUX,
// GELU_BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA, BGRADB); CUBLAS_COMPUTE_32F with fp32 scale (alpha,
// beta host pointers); A/B and C/D types as cublasLtMatmul's table of type combinations lists them for
// that compute type: fp32/fp32, bf16/fp32, bf16/bf16. beta == 0 never reads C. Every configuration the
// simulator lacks, or the documentation does not promise, is CUBLAS_STATUS_NOT_SUPPORTED from the
// heuristic and from the matmul alike, never ignored; invalid values are CUBLAS_STATUS_INVALID_VALUE. The
// heuristic returns one algorithm, which remembers the epilogue, the types and the alignments it was
// chosen for (the preference's, default 256 bytes, and the bias and aux pointers'); running it on another
// configuration, on less aligned data, or on ranges outside device memory is CUBLAS_STATUS_INVALID_VALUE
// with a report. Record mode (record.h): each queued matmul is a "gemm" line; record-only skips its
// arithmetic. On a capturing stream it becomes a graph node (capture.h), alpha and beta read at the call
// (the host pointer mode's promise).
#include <cublasLt.h>

#include <cstring>
#include <string>

#include "cudasim/capture.h"
#include "cudasim/cublaslt_math.h"
#include "cudasim/memory.h"
#include "cudasim/record.h"
#include "cudasim/runtime.h"
#include "cudasim/stream_order.h"

namespace sftdp::sim {
namespace {

struct LtHandle {
  uint64_t magic = 0x4c7448616e646c65;  // "LtHandle"
};

struct MatmulDesc {
  int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;    // the bias (read) or the bias gradient (written)
  int32_t bias_type = -1;  // -1: the type of D
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;  // GELU's input: written by GELU_AUX*, read by DGELU*
  int64_t aux_ld = 0, aux_batch_stride = 0;
  int32_t aux_type = -1;  // -1: the type of D
};

struct Preference {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = 0xffffffffu;
  uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;
};

// What cublasLtMatmulAlgo_t carries: a tag, the configuration it was chosen for, the alignments it assumed;
// trivial, so that it is memcpy'd in and out of the opaque struct.
struct Algo {
  static constexpr uint64_t kMagic = 0x53696d416c676f32;  // "SimAlgo2"
  uint64_t magic;
  uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  int32_t ab_type, cd_type;
  uint32_t epilogue;
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

template <class T>
cublasStatus_t set(T& field, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
template <class T>
cublasStatus_t get(const T& field, void* buf, size_t size, size_t* written) {
  if (written) *written = sizeof(T);
  if (size == 0 && written) return CUBLAS_STATUS_SUCCESS;
  if (!buf || size < sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &field, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}
// The alignment every batch entry keeps: the first pointer's, and the batch stride's in bytes.
uint32_t batch_alignment(const void* p, int32_t batch, int64_t stride, size_t elem) {
  uint32_t al = alignment_of(p);
  if (batch > 1)
    while (al > 1 && (static_cast<uint64_t>(stride) * elem) % al != 0) al >>= 1;
  return al;
}
uint32_t batch_alignment(const void* p, const LtLayout& l) {
  return batch_alignment(p, l.batch, l.stride, elem_bytes(l.type));
}
const char* type_name(cudaDataType t) { return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_32F ? "fp32" : "other"; }

// "Bias vector elements are the same type as the elements of output matrix (Dtype)" unless
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says otherwise; the same for the bias gradient and the aux matrix.
cudaDataType bias_type_of(const MatmulDesc& md, const LtLayout& d) {
  return md.bias_type == -1 ? d.type : static_cast<cudaDataType>(md.bias_type);
}
cudaDataType aux_type_of(const MatmulDesc& md, const LtLayout& d) {
  return md.aux_type == -1 ? d.type : static_cast<cudaDataType>(md.aux_type);
}
// The bias (gradient) vector's length: D's rows, except BGRADB's, which has D's columns.
uint64_t bias_length(const Epilogue& e, const LtLayout& d) {
  return e.bias_gradient == BiasGradient::cols_of_b ? d.cols : d.rows;
}
uint64_t k_of(const MatmulDesc& md, const LtLayout& a) { return md.trans_a != CUBLAS_OP_N ? a.rows : a.cols; }

// The supported configurations, checked by the heuristic and by the matmul alike. `why` says what failed.
cublasStatus_t check_config(const MatmulDesc& md, const LtLayout& a, const LtLayout& b, const LtLayout& c,
                            const LtLayout& d, std::string& why) {
  const Epilogue* e = find_epilogue(md.epilogue);
  const bool ta = md.trans_a != CUBLAS_OP_N, tb = md.trans_b != CUBLAS_OP_N;
  // -- what the simulator lacks, or cuBLASLt does not document: CUBLAS_STATUS_NOT_SUPPORTED
  if (md.compute != CUBLAS_COMPUTE_32F || md.scale != CUDA_R_32F)
    why = "compute type other than CUBLAS_COMPUTE_32F/CUDA_R_32F";
  else if (md.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    why = "alpha/beta not host pointers";
  else if (md.trans_c != CUBLAS_OP_N)
    why = "a transposed C";
  else if (!e)
    why = "epilogue " + std::to_string(md.epilogue) +
          " (the simulator has DEFAULT, BIAS, GELU, GELU_AUX, GELU_BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA "
          "and BGRADB)";
  else if (a.type != b.type || (a.type != CUDA_R_32F && a.type != CUDA_R_16BF))
    why = "A and B not both fp32 or both bf16";
  else if (c.type != d.type)
    why = "C and D of different types (outside FP8, cublasLtMatmul's type table gives D the type of C)";
  else if (c.type != CUDA_R_32F && c.type != CUDA_R_16BF)
    why = "C and D neither fp32 nor bf16";
  else if (a.type == CUDA_R_32F && c.type == CUDA_R_16BF)
    // CUBLAS_COMPUTE_32F with fp32 scale lists Atype/Btype → Ctype 16BF → 16BF, 16BF → 32F, 32F → 32F (and
    // 16F, 8I and complex rows the simulator lacks); fp32 inputs with a bf16 output are not among them.
    why = "fp32 A and B with bf16 C and D (not a documented type combination)";
  else if (e->uses_bias_pointer() && bias_type_of(md, d) != d.type)
    // "Bias vector elements are the same type as the elements of output matrix (Dtype) with the following
    // exceptions" (IMMA and FP8 kernels only); "Bias gradient vector elements are the same type as the output".
    why = std::string("a bias of type ") + type_name(bias_type_of(md, d)) + " with D of type " + type_name(d.type);
  else if (a.order != CUBLASLT_ORDER_COL || b.order != CUBLASLT_ORDER_COL || c.order != CUBLASLT_ORDER_COL ||
           d.order != CUBLASLT_ORDER_COL)
    why = "a memory order other than CUBLASLT_ORDER_COL";
  else if (e->bias_gradient == BiasGradient::rows_of_a && ta)
    // Not in cublasLt.h's enum text: NVIDIA's nvmath-python, which drives cuBLASLt, requires "'a' is in
    // column-major layout" for BGRADA (example12_epilog_bgrada.py), i.e. op(A) = A.
    why = "BGRADA with a transposed A (its kernels reduce a column-major, untransposed A)";
  else if (e->bias_gradient == BiasGradient::cols_of_b && !tb)
    // nvmath-python: "When the epilog is BGRADB, we transpose B internally and use transpose in the MM since
    // this epilog requires B to be transposed" (matmulmod.py).
    why = "BGRADB with B not transposed (its kernels need op(B) = Bᵀ)";
  if (!why.empty()) return CUBLAS_STATUS_NOT_SUPPORTED;
  // -- invalid values: CUBLAS_STATUS_INVALID_VALUE
  const uint64_t m = d.rows, n = d.cols, k = k_of(md, a);
  if ((ta ? a.cols : a.rows) != m || (tb ? b.rows : b.cols) != n || (tb ? b.cols : b.rows) != k)
    why = "op(A), op(B) and D do not agree on m, n, k";
  else if (c.rows != m || c.cols != n)
    why = "C and D differ in shape";
  else if (a.ld < static_cast<int64_t>(a.rows) || b.ld < static_cast<int64_t>(b.rows) ||
           c.ld < static_cast<int64_t>(c.rows) || d.ld < static_cast<int64_t>(d.rows))
    why = "a leading dimension below its row count";
  else if (a.batch != d.batch || b.batch != d.batch || c.batch != d.batch)
    why = "batch counts differ";
  if (!why.empty()) return CUBLAS_STATUS_INVALID_VALUE;
  if (e->dgelu && k == 1) {
    // nvmath-python refuses it ("K=1 is not supported by cuBLAS", epilog_protocol.py) after "Matrix
    // multiplication may fail with "illegal memory access" for K=1 with DRELU and DGELU epilogs" (release notes).
    why = "DGELU with k = 1";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (e->uses_aux()) {
    if (aux_type_of(md, d) != d.type)
      // "GELU input matrix elements type is the same as the type of elements of the output matrix" (FP8
      // aside); "If set for an unsupported matrix data, scale, and compute type combination, calling
      // cublasLtMatmul() will return CUBLAS_INVALID_VALUE."
      why = std::string("an aux matrix of type ") + type_name(aux_type_of(md, d)) + " with D of type " +
            type_name(d.type);
    else if (md.aux_ld < static_cast<int64_t>(m) || md.aux_ld % 8 != 0)
      // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: "GELU input matrix leading dimension in elements ... Must be
      // divisible by 8 and be no less than the number of rows in the output matrix."
      why = "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD " + std::to_string(md.aux_ld) +
            " (must be divisible by 8 and no less than D's " + std::to_string(m) + " rows)";
    else if (d.batch > 1 && (md.aux_batch_stride < 0 || md.aux_batch_stride % 8 != 0))
      // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: "GELU input matrix batch stride in elements ... Must be
      // divisible by 8."
      why = "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE " + std::to_string(md.aux_batch_stride) +
            " (must be divisible by 8)";
    else if (e->stores_aux && d.batch > 1 && md.aux_batch_stride < md.aux_ld * static_cast<int64_t>(n))
      why = "aux matrices of batch entries that overlap (AUX_BATCH_STRIDE below AUX_LD·n)";
  }
  if (why.empty() && d.batch > 1 && e->uses_bias_pointer() && md.bias_batch_stride < 0)
    why = "a negative CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE";
  else if (why.empty() && d.batch > 1 && e->bias_gradient != BiasGradient::none &&
           md.bias_batch_stride < static_cast<int64_t>(bias_length(*e, d)))
    why = "bias gradients of batch entries that overlap (BIAS_BATCH_STRIDE below the vector's length)";
  return why.empty() ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// Bytes from the first to one past the last element of a (batched) column-major matrix or vector.
size_t extent_bytes(uint64_t rows, uint64_t cols, int64_t ld, int32_t batch, int64_t stride, cudaDataType type) {
  if (rows == 0 || cols == 0) return 0;
  const uint64_t last = (cols - 1) * static_cast<uint64_t>(ld) + (rows - 1) +
                        static_cast<uint64_t>(batch - 1) * static_cast<uint64_t>(stride);
  return (last + 1) * elem_bytes(type);
}
size_t extent_bytes(const LtLayout& l) { return extent_bytes(l.rows, l.cols, l.ld, l.batch, l.stride, l.type); }

bool in_device_memory(const std::string& what, const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const auto a = memory().find(p, bytes);
  if (a && a->live) return true;
  report("memcheck", "cublasLtMatmul: " + what + " (" + std::to_string(bytes) + " bytes at " + memory().describe(p) +
                         ") is not inside one live device allocation");
  return false;
}

}  // namespace
}  // namespace sftdp::sim

using namespace sftdp::sim;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new LtHandle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<LtHandle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new LtLayout;
  l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<LtLayout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  LtLayout& l = *reinterpret_cast<LtLayout*>(layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      uint32_t t = 0;
      const cublasStatus_t s = set(t, buf, size);
      l.type = static_cast<cudaDataType>(t);
      return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return set(l.order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return set(l.rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return set(l.cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return set(l.ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return set(l.batch, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return set(l.stride, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new MatmulDesc;
  d->compute = compute, d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<MatmulDesc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc& d = *reinterpret_cast<MatmulDesc*>(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return set(d.compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return set(d.scale, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return set(d.pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set(d.trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set(d.trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return set(d.trans_c, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set(d.epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set(d.bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set(d.bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return set(d.bias_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set(d.aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set(d.aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return set(d.aux_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return set(d.aux_type, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& d = *reinterpret_cast<MatmulDesc*>(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return get(d.compute, buf, size, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return get(d.scale, buf, size, written);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return get(d.pointer_mode, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return get(d.trans_a, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return get(d.trans_b, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return get(d.trans_c, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return get(d.epilogue, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return get(d.bias, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return get(d.bias_type, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return get(d.bias_batch_stride, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return get(d.aux, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return get(d.aux_ld, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return get(d.aux_batch_stride, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return get(d.aux_type, buf, size, written);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<Preference*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  Preference& p = *reinterpret_cast<Preference*>(pref);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return set(p.search_mode, buf, size);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set(p.max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return set(p.reduction_mask, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return set(p.align_a, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return set(p.align_b, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return set(p.align_c, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return set(p.align_d, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !pref || !results || !returned || requested <= 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  const MatmulDesc& md = *reinterpret_cast<MatmulDesc*>(desc);
  const LtLayout &la = *reinterpret_cast<LtLayout*>(a), &lb = *reinterpret_cast<LtLayout*>(b),
                 &lc = *reinterpret_cast<LtLayout*>(c), &ld = *reinterpret_cast<LtLayout*>(d);
  std::string why;
  if (const cublasStatus_t s = check_config(md, la, lb, lc, ld, why); s != CUBLAS_STATUS_SUCCESS) return s;
  const Epilogue& e = *find_epilogue(md.epilogue);
  const Preference& p = *reinterpret_cast<Preference*>(pref);
  // The bias and aux pointers: "Routines that don't dereference this pointer, like
  // cublasLtMatmulAlgoGetHeuristic() depend on its value to determine expected pointer alignment." A bias
  // to add must be there and hold whole elements; a bias gradient may still be null (nvmath-python sets it
  // after planning); an aux pointer may not (nvmath-python sets it to 0x1 "to bypass the cuBLAS check").
  const size_t bias_elem = elem_bytes(bias_type_of(md, ld));
  if (e.adds_bias && (!md.bias || alignment_of(md.bias) < bias_elem)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (e.bias_gradient != BiasGradient::none && md.bias && alignment_of(md.bias) < bias_elem)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (e.uses_aux() && !md.aux) return CUBLAS_STATUS_NOT_SUPPORTED;
  Algo algo{};
  algo.magic = Algo::kMagic;
  algo.align_a = p.align_a, algo.align_b = p.align_b, algo.align_c = p.align_c, algo.align_d = p.align_d;
  // What every batch entry keeps, as for A-D (null: 256, any alignment the pointer may have later).
  const int32_t batch = ld.batch;
  algo.align_bias = e.uses_bias_pointer() ? batch_alignment(md.bias, batch, md.bias_batch_stride, bias_elem) : 1;
  algo.align_aux =
      e.uses_aux() ? batch_alignment(md.aux, batch, md.aux_batch_stride, elem_bytes(aux_type_of(md, ld))) : 1;
  algo.ab_type = la.type, algo.cd_type = ld.type;
  algo.epilogue = md.epilogue;
  std::memset(&results[0], 0, sizeof results[0]);
  std::memcpy(&results[0].algo, &algo, sizeof algo);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t handle_stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !alpha || !beta || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& md = *reinterpret_cast<MatmulDesc*>(desc);
  LtProduct g;
  g.a = *reinterpret_cast<LtLayout*>(a), g.b = *reinterpret_cast<LtLayout*>(b);
  g.c = *reinterpret_cast<LtLayout*>(c), g.d = *reinterpret_cast<LtLayout*>(d);
  std::string why;
  if (const cublasStatus_t s = check_config(md, g.a, g.b, g.c, g.d, why); s != CUBLAS_STATUS_SUCCESS) {
    report("cublasLt", "cublasLtMatmul: " + why);
    return s;
  }
  const Epilogue& e = *find_epilogue(md.epilogue);
  g.trans_a = md.trans_a != CUBLAS_OP_N, g.trans_b = md.trans_b != CUBLAS_OP_N;
  g.alpha = *static_cast<const float*>(alpha), g.beta = *static_cast<const float*>(beta);
  g.A = A, g.B = B, g.C = C, g.D = D;
  g.epilogue = &e;
  const int32_t batch = g.d.batch;
  if (e.uses_bias_pointer()) {
    g.bias = md.bias, g.bias_type = bias_type_of(md, g.d), g.bias_stride = batch > 1 ? md.bias_batch_stride : 0;
    if (!g.bias) {
      report("cublasLt",
             std::string("cublasLtMatmul: the ") + e.name + " epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (e.uses_aux()) {
    g.aux = md.aux, g.aux_type = aux_type_of(md, g.d), g.aux_ld = md.aux_ld;
    g.aux_stride = batch > 1 ? md.aux_batch_stride : 0;
    if (!g.aux) {
      report("cublasLt", std::string("cublasLtMatmul: the ") + e.name +
                             " epilogue without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  // Alignment of every operand over all batch entries, and what the algorithm was chosen for.
  const struct {
    const char* name;
    bool used;
    uint32_t have, element;
  } operands[] = {
      {"matrix A", true, batch_alignment(A, g.a), static_cast<uint32_t>(elem_bytes(g.a.type))},
      {"matrix B", true, batch_alignment(B, g.b), static_cast<uint32_t>(elem_bytes(g.b.type))},
      {"matrix C", true, batch_alignment(C, g.c), static_cast<uint32_t>(elem_bytes(g.c.type))},
      {"matrix D", true, batch_alignment(D, g.d), static_cast<uint32_t>(elem_bytes(g.d.type))},
      {"the bias vector", g.bias != nullptr, batch_alignment(g.bias, batch, g.bias_stride, elem_bytes(g.bias_type)),
       static_cast<uint32_t>(elem_bytes(g.bias_type))},
      {"the aux matrix", g.aux != nullptr, batch_alignment(g.aux, batch, g.aux_stride, elem_bytes(g.aux_type)),
       static_cast<uint32_t>(elem_bytes(g.aux_type))},
  };
  // A GPU faults on an element it cannot load whole: the epilogue's vectors and matrices hold whole elements.
  for (size_t i = 4; i < 6; ++i)
    if (operands[i].used && operands[i].have < operands[i].element) {
      report("cublasLt", std::string("cublasLtMatmul: ") + operands[i].name + " is " +
                             std::to_string(operands[i].have) + "-byte aligned, less than one element");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  if (algo) {
    Algo al;
    std::memcpy(&al, algo, sizeof al);
    if (al.magic != Algo::kMagic || al.ab_type != g.a.type || al.cd_type != g.d.type || al.epilogue != md.epilogue) {
      report("cublasLt",
             "cublasLtMatmul: the algorithm was not chosen by the heuristic for this configuration "
             "(epilogue, A/B or C/D type)");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    // An algorithm picked for more alignment than the data has may read out of place on a GPU.
    const uint32_t chosen_for[] = {al.align_a, al.align_b, al.align_c, al.align_d, al.align_bias, al.align_aux};
    for (size_t i = 0; i < 6; ++i) {
      if (operands[i].used && operands[i].have < chosen_for[i]) {
        report("cublasLt", std::string("cublasLtMatmul: ") + operands[i].name + " is " +
                               std::to_string(operands[i].have) + "-byte aligned, but the algorithm was chosen for " +
                               std::to_string(chosen_for[i]));
        return CUBLAS_STATUS_INVALID_VALUE;
      }
    }
  }
  const size_t bias_bytes = g.bias ? extent_bytes(bias_length(e, g.d), 1, 1, batch, g.bias_stride, g.bias_type) : 0;
  const size_t aux_bytes = g.aux ? extent_bytes(g.d.rows, g.d.cols, g.aux_ld, batch, g.aux_stride, g.aux_type) : 0;
  if (!in_device_memory("matrix A", A, extent_bytes(g.a)) || !in_device_memory("matrix B", B, extent_bytes(g.b)) ||
      !in_device_memory("matrix D", D, extent_bytes(g.d)) ||
      (g.beta != 0.f && !in_device_memory("matrix C", C, extent_bytes(g.c))) ||
      (g.bias && !in_device_memory("the bias vector", g.bias, bias_bytes)) ||
      (g.aux && !in_device_memory("the aux matrix", g.aux, aux_bytes)) ||
      (workspace_bytes > 0 && !in_device_memory("the workspace", workspace, workspace_bytes)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (C == D && (g.c.ld != g.d.ld || g.c.stride != g.d.stride)) {
    report("cublasLt", "cublasLtMatmul: in place (C == D) with different C and D layouts");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Stream* s = resolve(handle_stream);
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  if (sticky_error(s->device()) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (g.d.rows == 0 || g.d.cols == 0) return CUBLAS_STATUS_SUCCESS;
  const auto layout = [](const char* x, const LtLayout& l) {
    return std::string("\"") + x + "_type\":\"" + type_name(l.type) + "\",\"ld" + x + "\":" + std::to_string(l.ld) +
           ",\"stride_" + x + "\":" + std::to_string(l.stride);
  };
  // The epilogue's own operands, only when it has them: the bias (read, or the bias gradient written) and
  // the aux matrix (written by GELU_AUX*, read by DGELU*), with their types and layouts.
  std::string epilogue_operands;
  if (g.bias)
    epilogue_operands += ",\"bias\":" + json_pointer(g.bias) + ",\"bias_type\":\"" + type_name(g.bias_type) +
                         "\",\"stride_bias\":" + std::to_string(g.bias_stride);
  if (g.aux)
    epilogue_operands += ",\"aux\":" + json_pointer(g.aux) + ",\"aux_type\":\"" + type_name(g.aux_type) +
                         "\",\"ldaux\":" + std::to_string(g.aux_ld) + ",\"stride_aux\":" + std::to_string(g.aux_stride);
  const std::string fields =
            "\"m\":" + std::to_string(g.d.rows) + ",\"n\":" + std::to_string(g.d.cols) +
                ",\"k\":" + std::to_string(k_of(md, g.a)) + ",\"batch\":" + std::to_string(batch) +
                ",\"trans_a\":" + (g.trans_a ? "true" : "false") + ",\"trans_b\":" + (g.trans_b ? "true" : "false") +
                "," + layout("a", g.a) + "," + layout("b", g.b) + "," + layout("c", g.c) + "," + layout("d", g.d) +
                ",\"epilogue\":\"" + e.name + "\"" + epilogue_operands + ",\"alpha\":" + json_number(g.alpha) +
                ",\"beta\":" + json_number(g.beta) + ",\"A\":" + json_pointer(A) + ",\"B\":" + json_pointer(B) +
                ",\"C\":" + json_pointer(C) + ",\"D\":" + json_pointer(D) +
                ",\"workspace_bytes\":" + std::to_string(workspace_bytes);
  Work w;
  w.record = [fields](const Stream& st, const std::string& extra) { record_op("gemm", &st, fields + extra); };
  if (record_only()) {
    w.what = "cublasLtMatmul (record only)", w.run = [] {};
  } else {
    w.what = "cublasLtMatmul", w.run = [g] {
      order::access(g.A, extent_bytes(g.a), false, "A");
      order::access(g.B, extent_bytes(g.b), false, "B");
      if (g.beta != 0) order::access(g.C, extent_bytes(g.c), false, "C");
      order::access(g.D, extent_bytes(g.d), true, "D");
      g.run();
    };
  }
  // A stream whose capture was invalidated: the launch fails, as a kernel launch would.
  return queue_work(*s, std::move(w)) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown error";
  }
}

}  // extern "C"
