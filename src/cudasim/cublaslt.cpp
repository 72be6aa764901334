// src/cudasim/cublaslt.cpp — the cuBLASLt subset sft-dp uses, written from cuBLASLt's documented
// semantics: D = alpha·op(A)·op(B) + beta·C (+ bias[row] with CUBLASLT_EPILOGUE_BIAS) on column-major
// matrices with leading dimensions and strided batches; A and B fp32 or bf16 (both the same), C and
// D fp32, CUBLAS_COMPUTE_32F with fp32 scale (alpha, beta host pointers): products and sums in fp32,
// over k in increasing order. beta == 0 never reads C. The heuristic returns one algorithm, which
// remembers the alignments the preference allowed (default 256 bytes, as documented); running it on
// data less aligned than that, or on ranges outside device memory, is CUBLAS_STATUS_INVALID_VALUE
// with a report. Attributes the simulator lacks are CUBLAS_STATUS_NOT_SUPPORTED, never ignored.
// Record mode (record.h): each queued matmul is a line (m, n, k, transposes, types, leading dimensions,
// batch, epilogue, alpha, beta, operands); record-only queues it without its arithmetic.
#include <cublasLt.h>

#include <cstring>
#include <string>
#include <vector>

#include "cudasim/memory.h"
#include "cudasim/record.h"
#include "cudasim/runtime.h"

namespace sftdp::sim {
namespace {

struct LtHandle {
  uint64_t magic = 0x4c7448616e646c65;  // "LtHandle"
};

struct Layout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
  int32_t order = CUBLASLT_ORDER_COL;
};

struct MatmulDesc {
  int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: the type of D
  int64_t bias_batch_stride = 0;
};

struct Preference {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = 0xffffffffu;
  uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;
};

// What cublasLtMatmulAlgo_t carries: a tag, and the alignments the heuristic assumed.
struct Algo {
  uint64_t magic = 0x53696d416c676f31;  // "SimAlgo1"
  uint32_t align_a, align_b, align_c, align_d;
  int32_t ab_type;
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
uint32_t batch_alignment(const void* p, const Layout& l, size_t elem) {
  uint32_t al = alignment_of(p);
  if (l.batch > 1)
    while (al > 1 && (static_cast<uint64_t>(l.stride) * elem) % al != 0) al >>= 1;
  return al;
}
size_t elem_bytes(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }
const char* type_name(cudaDataType t) { return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_32F ? "fp32" : "other"; }

// The one supported configuration, checked by the heuristic and by the matmul alike.
cublasStatus_t check_config(const MatmulDesc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl,
                            std::string& why) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F)
    why = "compute type other than CUBLAS_COMPUTE_32F/CUDA_R_32F";
  else if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    why = "alpha/beta not host pointers";
  else if (d.trans_c != CUBLAS_OP_N)
    why = "a transposed C";
  else if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS)
    why = "an epilogue other than BIAS";
  else if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && d.bias_type != -1 && d.bias_type != CUDA_R_32F)
    why = "a bias that is not fp32";
  else if (a.type != b.type || (a.type != CUDA_R_32F && a.type != CUDA_R_16BF))
    why = "A and B not both fp32 or both bf16";
  else if (c.type != CUDA_R_32F || dl.type != CUDA_R_32F)
    why = "C or D not fp32";
  else if (a.order != CUBLASLT_ORDER_COL || b.order != CUBLASLT_ORDER_COL || c.order != CUBLASLT_ORDER_COL ||
           dl.order != CUBLASLT_ORDER_COL)
    why = "a memory order other than CUBLASLT_ORDER_COL";
  if (!why.empty()) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool ta = d.trans_a != CUBLAS_OP_N, tb = d.trans_b != CUBLAS_OP_N;
  const uint64_t m = dl.rows, n = dl.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.rows : b.cols) != n || (tb ? b.cols : b.rows) != k)
    why = "op(A), op(B) and D do not agree on m, n, k";
  else if (c.rows != m || c.cols != n)
    why = "C and D differ in shape";
  else if (a.ld < static_cast<int64_t>(a.rows) || b.ld < static_cast<int64_t>(b.rows) ||
           c.ld < static_cast<int64_t>(c.rows) || dl.ld < static_cast<int64_t>(dl.rows))
    why = "a leading dimension below its row count";
  else if (a.batch != dl.batch || b.batch != dl.batch || c.batch != dl.batch)
    why = "batch counts differ";
  else if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && dl.batch > 1 && d.bias_batch_stride != 0)
    why = "a batched bias";
  return why.empty() ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// Bytes from the first to one past the last element of a (batched) layout.
size_t extent_bytes(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const uint64_t last = (l.cols - 1) * static_cast<uint64_t>(l.ld) + (l.rows - 1) +
                        static_cast<uint64_t>(l.batch - 1) * static_cast<uint64_t>(l.stride);
  return (last + 1) * elem_bytes(l.type);
}

bool in_device_memory(const char* which, const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const auto a = memory().find(p, bytes);
  if (a && a->live) return true;
  report("memcheck", std::string("cublasLtMatmul: matrix ") + which + " (" + std::to_string(bytes) + " bytes at " +
                         memory().describe(p) + ") is not inside one live device allocation");
  return false;
}

float load(const void* base, cudaDataType type, size_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  const uint32_t bits = uint32_t{static_cast<const uint16_t*>(base)[i]} << 16;  // bf16 -> fp32 is exact
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Gemm {
  Layout a, b, c, d;
  bool ta = false, tb = false;
  const void *A = nullptr, *B = nullptr;
  const float* C = nullptr;
  float* D = nullptr;
  const float* bias = nullptr;
  float alpha = 1, beta = 0;

  void run() const {
    const size_t m = d.rows, n = d.cols, k = ta ? a.rows : a.cols;
    std::vector<float> opa(m * k), opb(k * n), acc(n);
    for (int32_t batch = 0; batch < d.batch; ++batch) {
      const size_t ea = elem_bytes(a.type);
      const auto* Ab = static_cast<const char*>(A) + static_cast<size_t>(batch * a.stride) * ea;
      const auto* Bb = static_cast<const char*>(B) + static_cast<size_t>(batch * b.stride) * ea;
      // op(A) as [m][k] and op(B) as [k][n], row-major, fp32.
      for (size_t i = 0; i < m; ++i)
        for (size_t p = 0; p < k; ++p)
          opa[i * k + p] = load(Ab, a.type, ta ? i * static_cast<size_t>(a.ld) + p : p * static_cast<size_t>(a.ld) + i);
      for (size_t p = 0; p < k; ++p)
        for (size_t j = 0; j < n; ++j)
          opb[p * n + j] = load(Bb, b.type, tb ? p * static_cast<size_t>(b.ld) + j : j * static_cast<size_t>(b.ld) + p);
      const float* Cb = C + static_cast<size_t>(batch * c.stride);
      float* Db = D + static_cast<size_t>(batch * d.stride);
      for (size_t i = 0; i < m; ++i) {
        // Every D(i, j) sums its k products in increasing p, each product and sum rounded to fp32.
        std::fill(acc.begin(), acc.end(), 0.f);
        for (size_t p = 0; p < k; ++p) {
          const float x = opa[i * k + p];
          const float* row = &opb[p * n];
          for (size_t j = 0; j < n; ++j) acc[j] += x * row[j];
        }
        for (size_t j = 0; j < n; ++j) {
          float v = alpha * acc[j];
          if (beta != 0.f) v += beta * Cb[j * static_cast<size_t>(c.ld) + i];
          if (bias) v += bias[i];
          Db[j * static_cast<size_t>(d.ld) + i] = v;
        }
      }
    }
  }
};

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
  auto* l = new Layout;
  l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  Layout& l = *reinterpret_cast<Layout*>(layout);
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
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& d = *reinterpret_cast<MatmulDesc*>(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return get(d.trans_a, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return get(d.trans_b, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return get(d.epilogue, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return get(d.bias, buf, size, written);
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
  const Layout &la = *reinterpret_cast<Layout*>(a), &lb = *reinterpret_cast<Layout*>(b),
               &lc = *reinterpret_cast<Layout*>(c), &ld = *reinterpret_cast<Layout*>(d);
  std::string why;
  if (const cublasStatus_t s = check_config(md, la, lb, lc, ld, why); s != CUBLAS_STATUS_SUCCESS) return s;
  const Preference& p = *reinterpret_cast<Preference*>(pref);
  // The BIAS epilogue reads the bias as packed fp32: one element of alignment at least.
  if (md.epilogue == CUBLASLT_EPILOGUE_BIAS && (!md.bias || alignment_of(md.bias) < 4))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  Algo algo{};
  algo.magic = Algo{}.magic;
  algo.align_a = p.align_a, algo.align_b = p.align_b, algo.align_c = p.align_c, algo.align_d = p.align_d;
  algo.ab_type = la.type;
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
  Gemm g;
  g.a = *reinterpret_cast<Layout*>(a), g.b = *reinterpret_cast<Layout*>(b);
  g.c = *reinterpret_cast<Layout*>(c), g.d = *reinterpret_cast<Layout*>(d);
  std::string why;
  if (const cublasStatus_t s = check_config(md, g.a, g.b, g.c, g.d, why); s != CUBLAS_STATUS_SUCCESS) {
    report("cublasLt", "cublasLtMatmul: " + why);
    return s;
  }
  g.ta = md.trans_a != CUBLAS_OP_N, g.tb = md.trans_b != CUBLAS_OP_N;
  g.alpha = *static_cast<const float*>(alpha), g.beta = *static_cast<const float*>(beta);
  g.A = A, g.B = B, g.C = static_cast<const float*>(C), g.D = static_cast<float*>(D);
  g.bias = md.epilogue == CUBLASLT_EPILOGUE_BIAS ? static_cast<const float*>(md.bias) : nullptr;
  const size_t ab = elem_bytes(g.a.type);
  if (algo) {
    Algo al;
    std::memcpy(&al, algo, sizeof al);
    if (al.magic != Algo{}.magic || al.ab_type != g.a.type || al.epilogue != md.epilogue) {
      report("cublasLt", "cublasLtMatmul: the algorithm was not chosen by the heuristic for this configuration");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    // An algorithm picked for more alignment than the data has may read out of place on a GPU.
    const struct {
      const char* name;
      uint32_t have, need;
    } checks[] = {{"A", batch_alignment(A, g.a, ab), al.align_a},
                  {"B", batch_alignment(B, g.b, ab), al.align_b},
                  {"C", batch_alignment(C, g.c, 4), al.align_c},
                  {"D", batch_alignment(D, g.d, 4), al.align_d}};
    for (const auto& ck : checks) {
      if (ck.have < ck.need) {
        report("cublasLt", std::string("cublasLtMatmul: matrix ") + ck.name + " is " + std::to_string(ck.have) +
                               "-byte aligned, but the algorithm was chosen for " + std::to_string(ck.need));
        return CUBLAS_STATUS_INVALID_VALUE;
      }
    }
  }
  if (!in_device_memory("A", A, extent_bytes(g.a)) || !in_device_memory("B", B, extent_bytes(g.b)) ||
      !in_device_memory("D", D, extent_bytes(g.d)) || (g.beta != 0.f && !in_device_memory("C", C, extent_bytes(g.c))) ||
      (g.bias && !in_device_memory("bias", g.bias, g.d.rows * sizeof(float))) ||
      (workspace_bytes > 0 && !in_device_memory("workspace", workspace, workspace_bytes)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (C == D && (g.c.ld != g.d.ld || g.c.stride != g.d.stride)) {
    report("cublasLt", "cublasLtMatmul: in place (C == D) with different C and D layouts");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Stream* s = resolve(handle_stream);
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  if (sticky_error(s->device()) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (g.d.rows == 0 || g.d.cols == 0) return CUBLAS_STATUS_SUCCESS;
  const auto layout = [](const char* x, const Layout& l) {
    return std::string("\"") + x + "_type\":\"" + type_name(l.type) + "\",\"ld" + x + "\":" + std::to_string(l.ld) +
           ",\"stride_" + x + "\":" + std::to_string(l.stride);
  };
  record_op("gemm", s,
            "\"m\":" + std::to_string(g.d.rows) + ",\"n\":" + std::to_string(g.d.cols) +
                ",\"k\":" + std::to_string(g.ta ? g.a.rows : g.a.cols) + ",\"batch\":" + std::to_string(g.d.batch) +
                ",\"trans_a\":" + (g.ta ? "true" : "false") + ",\"trans_b\":" + (g.tb ? "true" : "false") + "," +
                layout("a", g.a) + "," + layout("b", g.b) + "," + layout("c", g.c) + "," + layout("d", g.d) +
                ",\"epilogue\":\"" + (g.bias ? "bias" : "default") + "\",\"alpha\":" + json_number(g.alpha) +
                ",\"beta\":" + json_number(g.beta) + ",\"A\":" + json_pointer(A) + ",\"B\":" + json_pointer(B) +
                ",\"C\":" + json_pointer(C) + ",\"D\":" + json_pointer(D) +
                ",\"workspace_bytes\":" + std::to_string(workspace_bytes));
  if (record_only()) {
    enqueue(*s, "cublasLtMatmul (record only)", [] {});
    return CUBLAS_STATUS_SUCCESS;
  }
  enqueue(*s, "cublasLtMatmul", [g] { g.run(); });
  return CUBLAS_STATUS_SUCCESS;
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
