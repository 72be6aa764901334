// kernels/cuda/gemm.cu — the row-major GEMM of gemm.cuh on cuBLASLt. A row-major C[M,N] is the
// column-major Cᵀ[N,M], so C = op(A)·op(B) is issued as Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands
// swapped. The bias is fused as cuBLASLt's BIAS epilogue when the bias pointer is 16-byte aligned
// and an algorithm supports it, else added by a small kernel afterwards (same rounding: D = fl(acc
// + bias) either way). Algorithms are chosen by the heuristic once per key (shape, leading
// dimensions, every pointer's alignment, the bias's included) and cached. The GEMM input type is
// the caller's argument: this file holds no mode.
#include <cuda_bf16.h>

#include <array>
#include <map>
#include <string>

#include "kernels/cuda/cast.cuh"
#include "kernels/bf16.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/vec.cuh"

namespace sftdp::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for Hopper

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    CHECK_CUBLAS(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic assumes 256 unless told,
// and an algorithm picked for more alignment than the data has may fail or read out of place.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment >>= 1;
  return alignment;
}

// Alignment cuBLASLt may assume for every matrix of a strided batch: that of the first pointer,
// and of the batch stride in bytes when there is more than one matrix.
uint32_t batch_alignment(const void* p, int64_t stride_elems, size_t elem_bytes, int batch) {
  uint32_t alignment = alignment_of(p);
  if (batch > 1) {
    const auto stride_bytes = static_cast<uint64_t>(stride_elems) * elem_bytes;
    while (alignment > 1 && stride_bytes % alignment != 0) alignment >>= 1;
  }
  return alignment;
}

// One column-major cuBLASLt call: D = epilogue(alpha·op(a)·op(b) + beta·C). gemm() runs it with C = D in place
// (fp32); gemm16() with C an fp32 input of its own (or none), D fp32 or bf16, and one of the act16 epilogues.
struct LtCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  int64_t stride_a = 0;
  const void* b = nullptr;
  int ldb = 0;
  int64_t stride_b = 0;
  const void* c = nullptr;
  int ldc = 0;
  int64_t stride_c = 0;
  void* d = nullptr;
  int ldd = 0;
  int batch = 1;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;  // C has D's type (cuBLASLt's type table)
  float alpha = 1.f, beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS, GELU_AUX_BIAS: read; BGRADB: written. D's type
  void* aux = nullptr;         // GELU_AUX_BIAS: written; DGELU: read. D's type, m×n at ld_aux
  int ld_aux = 0;
};

// The descriptors of one call, destroyed with it.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  explicit LtDescs(const LtCall& call) {
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (call.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, call.epilogue);
      if (call.bias) {
        set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
        set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, call.d_type);
      }
      if (call.aux) {
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, call.aux);
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(call.ld_aux));
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, call.d_type);
      }
    }
    a = layout(call.ab_type, call.trans_a ? call.k : call.m, call.trans_a ? call.m : call.k, call.lda,
               call.batch, call.stride_a);
    b = layout(call.ab_type, call.trans_b ? call.n : call.k, call.trans_b ? call.k : call.n, call.ldb,
               call.batch, call.stride_b);
    // No C (beta 0) or C in place: C's layout is D's.
    c = layout(call.d_type, call.m, call.n, call.c && call.c != call.d ? call.ldc : call.ldd, call.batch,
               call.stride_c);
    d = layout(call.d_type, call.m, call.n, call.ldd, call.batch, call.stride_c);
  }
  ~LtDescs() {
    // Destroying descriptors cannot fail in a way we could act on; keep the destructor nothrow.
    (void)cublasLtMatrixLayoutDestroy(d);
    (void)cublasLtMatrixLayoutDestroy(c);
    (void)cublasLtMatrixLayoutDestroy(b);
    (void)cublasLtMatrixLayoutDestroy(a);
    (void)cublasLtMatmulDescDestroy(op);
  }
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;

  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)));
  }

  static cublasLtMatrixLayout_t layout(cudaDataType_t type, int rows, int cols, int ld, int batch,
                                       int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
    if (batch > 1) {
      const int32_t count = batch;
      CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof(stride)));
    }
    return l;
  }
};

using AlgoKey = std::array<int64_t, 26>;
struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

struct Alignments {
  uint32_t a, b, c, d;
};
Alignments alignments_of(const LtCall& call) {
  const size_t ab = type_bytes(call.ab_type), cd = type_bytes(call.d_type);
  return {batch_alignment(call.a, call.stride_a, ab, call.batch), batch_alignment(call.b, call.stride_b, ab, call.batch),
          call.c ? batch_alignment(call.c, call.stride_c, cd, call.batch) : 256u,
          batch_alignment(call.d, call.stride_c, cd, call.batch)};
}

// Everything the heuristic sees: shape, leading dimensions, types, the epilogue, and every pointer's alignment,
// the bias's and aux's included (the heuristic reads the pointers in the descriptor, so an algorithm chosen for a
// 256-byte-aligned one is not reused for one that is only 16-byte aligned).
AlgoKey key_of(const LtCall& call) {
  const Alignments al = alignments_of(call);
  return {call.trans_a, call.trans_b, call.m, call.n, call.k, call.lda, call.ldb, call.ldc, call.ldd,
          call.stride_a, call.stride_b, call.stride_c, call.batch, static_cast<int64_t>(call.ab_type),
          static_cast<int64_t>(call.d_type), static_cast<int64_t>(call.epilogue), call.c == call.d,
          call.bias ? alignment_of(call.bias) : 0, call.aux ? alignment_of(call.aux) : 0, call.ld_aux,
          al.a, al.b, al.c, al.d, call.beta != 0.f, static_cast<int64_t>(kWorkspaceBytes)};
}

// The heuristic's first choice for this call, cached (the heuristic is deterministic, so the cache
// only saves host time; it never changes the result).
// GPU-CHECK: bitwise run-to-run reproducibility rests on cuBLASLt's own guarantee for a fixed
// algorithm (its split-K reduction schemes are ordered: INPLACE serialises with counters, the others
// reduce in a separate pass). The CUDA model test "three steps bitwise twice" checks it; should it
// fail, set CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK to CUBLASLT_REDUCTION_SCHEME_NONE here. The act16
// path's BGRADB epilogue (the bias gradient reduced inside the weight-gradient GEMM) rests on the same
// guarantee: kBiasGradientInGemm in matmul.cu turns it off.
const CachedAlgo& algo_for(const LtCall& call, const LtDescs& descs) {
  static std::map<AlgoKey, CachedAlgo> cache;
  const AlgoKey key = key_of(call);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)));
  const Alignments al = alignments_of(call);
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al.a,
                                                    sizeof(al.a)));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al.b,
                                                    sizeof(al.b)));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al.c,
                                                    sizeof(al.c)));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al.d,
                                                    sizeof(al.d)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_handle(), descs.op, descs.a, descs.b, descs.c,
                                                               descs.d, pref, 1, &result, &returned);
  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  // NOT_SUPPORTED means "no algorithm for this configuration": the caller falls back or reports.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) CHECK_CUBLAS(status);
  CachedAlgo& entry = cache[key];
  entry.found = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (entry.found) entry.algo = result.algo;
  return entry;
}

// The shape fields of a profiled matmul (profile.cuh), named as the simulator's record names them; built
// only inside a profile window.
std::string profile_detail(const LtCall& call) {
  if (!profile::active()) return {};
  return "\"m\":" + std::to_string(call.m) + ",\"n\":" + std::to_string(call.n) + ",\"k\":" + std::to_string(call.k) +
         ",\"batch\":" + std::to_string(call.batch);
}

// Runs the call with the heuristic's algorithm; false (nothing queued) when there is none for it.
bool run(const LtCall& call, cudaStream_t stream) {
  LtDescs descs(call);
  const CachedAlgo& algo = algo_for(call, descs);
  if (!algo.found) return false;
  void* workspace = scratch(Scratch::kGemmWorkspace, kWorkspaceBytes);
  const profile::Scope timed(stream, "gemm", "cublasLtMatmul", __FILE__, __LINE__, profile_detail(call));
  CHECK_CUBLAS(cublasLtMatmul(lt_handle(), descs.op, &call.alpha, call.a, descs.a, call.b, descs.b, &call.beta,
                              call.c ? call.c : call.d, descs.c, call.d, descs.d, &algo.algo, workspace,
                              kWorkspaceBytes, stream));
  return true;
}

// C[i·ldc + j] += bias[j] for the row-major C[M,N] of gemm(): a warp per row, 16-byte vectors of C (and of
// the bias where it is aligned like the row; the bias is usually not: that is why this kernel runs),
// element by element for the rest of the row (vec.cuh).
__global__ void add_bias_kernel(float* C, const float* bias, int M, int N, int ldc) {
  constexpr int V = Vec<float>::kSize;
  for_each_row_by_warp(static_cast<size_t>(M), [&](size_t i, int lane) {
    float* row = C + i * ldc;
    const auto scalar = [&](size_t j) { row[j] += bias[j]; };
    if (const int both = vector_head(V, row, bias); both >= 0) {
      vector_loop<V>(
          lane, kWarp, N, both,
          [&](size_t j) {
            Vec<float> c = load_vec(row + j);
            const Vec<float> b = load_vec(bias + j);
            SFTDP_UNROLL
            for (int k = 0; k < V; ++k) c[k] += b[k];
            store_vec(row + j, c);
          },
          scalar);
    } else {
      vector_loop<V>(
          lane, kWarp, N, vector_head(V, row),
          [&](size_t j) {
            Vec<float> c = load_vec(row + j);
            SFTDP_UNROLL
            for (int k = 0; k < V; ++k) c[k] += bias[j + k];
            store_vec(row + j, c);
          },
          scalar);
    }
  });
}

// Leading dimension of a bf16 copy: ld rounded up to a multiple of 8 elements, so that every column
// of the copy starts 16-byte aligned (scratch buffers are 256-byte aligned). With the fp32 ld kept,
// an odd ld (IC = 257; the LM head's dlogits with ld = V = 50257 in matmul_bwd) would leave bf16
// columns 2-byte aligned, where cuBLASLt has no tensor-core kernel (or no kernel at all).
constexpr int kBf16LdMultiple = 8;
int padded_ld(int ld) { return (ld + kBf16LdMultiple - 1) / kBf16LdMultiple * kBf16LdMultiple; }

// The registered bf16 mirrors: [src, src + n) is read as copy. ld 0 (the model's, set_bf16_mirror): any
// operand inside whose leading dimension is a multiple of 8, at the same offset and ld. ld > 0 (a
// launcher's, set_bf16_matrix_mirror): an operand of exactly that leading dimension, its rows in copy
// at padded_ld(ld).
struct Mirror {
  const float* src = nullptr;
  const __nv_bfloat16* copy = nullptr;
  size_t n = 0;
  int ld = 0;
};
std::array<Mirror, kMirrorSlots + 1> g_mirrors;  // the model's slots, then kGemmPrivateMirror
static_assert(kGemmPrivateMirror == kMirrorSlots, "the launchers' mirror follows the model's slots");

// The mirror of a stored column-major matrix at p (extent elements, leading dimension ld), or null. Its
// leading dimension is padded_ld(ld) either way.
const __nv_bfloat16* mirrored(const float* p, size_t extent, int ld) {
  for (const Mirror& m : g_mirrors) {
    if (!m.n || p < m.src || static_cast<size_t>(p - m.src) > m.n || extent > m.n - static_cast<size_t>(p - m.src))
      continue;
    const size_t at = static_cast<size_t>(p - m.src);
    if (m.ld == 0 && ld % kBf16LdMultiple == 0) return m.copy + at;
    if (m.ld == ld) return m.copy + at / ld * padded_ld(ld) + at % ld;
  }
  return nullptr;
}

// bf16 copy of a stored column-major matrix (rows x cols, leading dimension ld) into `slot`, with
// leading dimension padded_ld(ld); the padding between columns is never read. A matrix inside a
// registered mirror is not copied: the mirror is returned (its ld is already padded_ld(ld)).
const __nv_bfloat16* to_bf16(Scratch slot, const void* src, int rows, int cols, int ld, cudaStream_t stream) {
  if (const __nv_bfloat16* m =
          mirrored(static_cast<const float*>(src), static_cast<size_t>(ld) * (cols - 1) + rows, ld))
    return m;
  const int ld16 = padded_ld(ld);
  const size_t extent = static_cast<size_t>(ld16) * (cols - 1) + rows;
  auto* dst = scratch_as<__nv_bfloat16>(slot, extent);
  cast_fp32_to_bf16(dst, static_cast<size_t>(ld16), static_cast<const float*>(src), static_cast<size_t>(ld),
                    static_cast<size_t>(rows), static_cast<size_t>(cols), stream);
  return dst;
}

// The act16 GEMM's BGRADB: off, the bias gradient is summed by row_sums_bf16 instead (a second read of dout).
// GPU-CHECK: cuBLASLt's BGRADB reduction must be bitwise run to run (the model's "bitwise twice" tests).
constexpr bool kBiasGradientInGemm = true;

// An act16 GEMM operand as the column-major call reads it: bf16 in place, or an fp32 parameter's bf16 mirror (a
// rounded copy into `slot` if none); *ld gets the leading dimension of what is returned.
const void* operand_bf16(Scratch slot, const Gemm16Operand& op, int rows, int cols, cudaStream_t stream, int* ld) {
  if (op.bf16) {
    *ld = op.ld;
    return op.p;
  }
  *ld = padded_ld(op.ld);
  return to_bf16(slot, op.p, rows, cols, op.ld, stream);
}

// The bf16 copy of the fp32 vector v[0, n) (a bias, for a bf16 D's epilogue): inside the model's mirror of the
// parameters, else rounded into scratch.
const __nv_bfloat16* vector_bf16(const float* v, int n, cudaStream_t stream) {
  for (const Mirror& m : g_mirrors) {
    if (m.ld != 0 || !m.n || v < m.src || static_cast<size_t>(v - m.src) + n > m.n) continue;
    return m.copy + (v - m.src);
  }
  auto* copy = scratch_as<__nv_bfloat16>(Scratch::kGemmBias16, static_cast<size_t>(n));
  cast_fp32_to_bf16(copy, n, v, n, n, 1, stream);
  return copy;
}

// out[i] = Σ_k A[k·ld + i] for i < M, k ascending, fp32: the row sums of op(A) = Aᵀ of a bf16 [K, M] matrix.
__global__ void column_sums_bf16_kernel(float* out, const __nv_bfloat16* A, int ld, int M, int K) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[static_cast<size_t>(k) * ld + i]);
  out[i] = acc;
}

void row_sums_bf16(float* out, const Gemm16Operand& A, int M, int K, cudaStream_t stream) {
  SFTDP_ASSERT(A.bf16, "gemm16: row sums of an fp32 operand");
  constexpr int kBlock = 256;
  SFTDP_LAUNCH(column_sums_bf16_kernel, static_cast<unsigned>(ceil_div(M, kBlock)), kBlock, 0, stream, out,
               static_cast<const __nv_bfloat16*>(A.p), A.ld, M, K);
  CHECK_LAUNCH();
}

// The act16 epilogues on z (fp32 [M,N], row stride N), into a bf16 D, as cuBLASLt computes them:
//   kBias: D = bf16(z + bias)     kGeluAuxBias: v = z + bias, aux = bf16(v), D = bf16(gelu(v))
//   kDgelu: D = bf16(z·gelu'(aux))
// bias: bf16 (D's type; null: none). gelu and gelu': kernels/cuda/gelu.cu's expressions (cuBLASLt's GELU is the
// tanh form; the simulator's equals gelu.cu bit for bit).
__global__ void epilogue_bf16_kernel(int kind, const float* z, const __nv_bfloat16* bias, __nv_bfloat16* aux,
                                     int ld_aux, __nv_bfloat16* D, int ldd, int M, int N) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  for (int i = blockIdx.y; i < M; i += gridDim.y) {
    const size_t row = static_cast<size_t>(i);
    float v = z[row * N + j];
    if (kind == Gemm16Epilogue::kDgelu) {
      D[row * ldd + j] = __float2bfloat16_rn(v * gelu_grad(__bfloat162float(aux[row * ld_aux + j])));
      continue;
    }
    if (bias) v += __bfloat162float(bias[j]);
    if (kind == Gemm16Epilogue::kGeluAuxBias) {
      aux[row * ld_aux + j] = __float2bfloat16_rn(v);
      v = gelu(v);
    }
    D[row * ldd + j] = __float2bfloat16_rn(v);
  }
}

void apply_epilogue(Gemm16Epilogue::Kind kind, const float* z, const __nv_bfloat16* bias, uint16_t* aux, int ld_aux,
                    __nv_bfloat16* D, int ldd, int M, int N, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const dim3 grid(static_cast<unsigned>(ceil_div(N, kBlock)), static_cast<unsigned>(M < 65535 ? M : 65535));
  SFTDP_LAUNCH(epilogue_bf16_kernel, grid, kBlock, 0, stream, static_cast<int>(kind), z, bias,
               reinterpret_cast<__nv_bfloat16*>(aux), ld_aux, D, ldd, M, N);
  CHECK_LAUNCH();
}

}  // namespace

void set_bf16_mirror(int slot, const float* src, const __nv_bfloat16* copy, size_t n) {
  SFTDP_ASSERT(slot >= 0 && slot <= kGemmPrivateMirror, "set_bf16_mirror: no slot " + std::to_string(slot));
  SFTDP_ASSERT(n == 0 || (src && copy), "set_bf16_mirror: a mirror needs both buffers");
  g_mirrors[slot] = n ? Mirror{src, copy, n, 0} : Mirror{};
}

void set_bf16_matrix_mirror(const float* src, int rows, int ld, const __nv_bfloat16* copy) {
  g_mirrors[kGemmPrivateMirror] = rows > 0 ? Mirror{src, copy, static_cast<size_t>(rows) * ld, ld} : Mirror{};
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, const float* bias, bool bf16_inputs, const GemmBatch& batch,
          cudaStream_t stream) {
  if (M == 0 || N == 0 || batch.count == 0) return;
  // Only built when a check fails: gemm runs hundreds of times per step.
  const auto shape = [&] {
    return "gemm M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " batch=" + std::to_string(batch.count);
  };
  SFTDP_ASSERT(M > 0 && N > 0 && K > 0 && batch.count > 0, shape() + ": sizes must be positive");
  SFTDP_ASSERT(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
               shape() + ": a leading dimension is smaller than its row");
  SFTDP_ASSERT(!bias || batch.count == 1, shape() + ": bias is supported for batch 1 only");
  SFTDP_ASSERT(!bf16_inputs || batch.count == 1, shape() + ": bf16 inputs are supported for batch 1 only");

  // Row-major C = op(A)·op(B)  <=>  column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B comes first.
  LtCall call;
  call.trans_a = trans_b;
  call.trans_b = trans_a;
  call.m = N;
  call.n = M;
  call.k = K;
  call.a = B;
  call.lda = ldb;
  call.stride_a = batch.stride_b;
  call.b = A;
  call.ldb = lda;
  call.stride_b = batch.stride_a;
  call.c = C;
  call.ldc = ldc;
  call.stride_c = batch.stride_c;
  call.d = C;  // in place
  call.ldd = ldc;
  call.batch = batch.count;
  call.alpha = alpha;
  call.beta = beta;
  if (bf16_inputs) {
    call.ab_type = CUDA_R_16BF;
    call.a = to_bf16(Scratch::kGemmA16, call.a, call.trans_a ? call.k : call.m, call.trans_a ? call.m : call.k,
                     call.lda, stream);
    call.lda = padded_ld(call.lda);
    call.b = to_bf16(Scratch::kGemmB16, call.b, call.trans_b ? call.n : call.k, call.trans_b ? call.k : call.n,
                     call.ldb, stream);
    call.ldb = padded_ld(call.ldb);
  }
  if (bias && alignment_of(bias) >= 16) {
    LtCall fused = call;
    fused.epilogue = CUBLASLT_EPILOGUE_BIAS;
    fused.bias = bias;
    if (run(fused, stream)) return;
    // No algorithm fuses this bias: plain GEMM, then the bias kernel below.
  }
  SFTDP_ASSERT(run(call, stream), shape() + ": cuBLASLt has no algorithm for this shape/alignment");
  if (bias) {
    // Biases at < 16-byte-aligned offsets of the flat parameter buffer (or shapes with no fused
    // algorithm) come here; tests/kernels/test_cuda_gemm_vs_cpu.cpp reaches it with a bias one
    // float past a cudaMalloc'd (256-byte-aligned) address and checks it against the CPU twin.
    constexpr int kBlock = 256;
    SFTDP_LAUNCH(add_bias_kernel, row_blocks(M, kBlock), kBlock, 0, stream, C, bias, M, N, ldc);
    CHECK_LAUNCH();
  }
}

void gemm16(bool trans_a, bool trans_b, int M, int N, int K, Gemm16Operand A, Gemm16Operand B, float beta,
            const float* C, int ldc, void* D, bool d_bf16, int ldd, const Gemm16Epilogue& ep, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  const auto shape = [&] {
    return "gemm16 M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  };
  SFTDP_ASSERT(M > 0 && N > 0 && K > 0, shape() + ": sizes must be positive");
  SFTDP_ASSERT(A.ld >= (trans_a ? M : K) && B.ld >= (trans_b ? K : N) && ldd >= N && (beta == 0.f || ldc >= N),
               shape() + ": a leading dimension is smaller than its row");
  SFTDP_ASSERT(beta == 0.f || (C && !d_bf16), shape() + ": C is read with an fp32 D only");
  SFTDP_ASSERT(!ep.a_row_sums || (trans_a && !d_bf16), shape() + ": row sums of op(A) need trans_a and fp32 D");
  const bool bf16_epilogue = ep.kind == Gemm16Epilogue::kGeluAuxBias || ep.kind == Gemm16Epilogue::kDgelu;
  SFTDP_ASSERT(!bf16_epilogue || (d_bf16 && ep.aux && ep.ld_aux >= N && beta == 0.f),
               shape() + ": GELU epilogues need a bf16 D, its aux matrix and no C");

  // Row-major D = op(A)·op(B)  <=>  column-major Dᵀ = op(B)ᵀ·op(A)ᵀ: B comes first.
  LtCall call;
  call.trans_a = trans_b, call.trans_b = trans_a;
  call.m = N, call.n = M, call.k = K;
  call.ab_type = CUDA_R_16BF;
  call.a = operand_bf16(Scratch::kGemmA16, B, call.trans_a ? call.k : call.m, call.trans_a ? call.m : call.k, stream,
                        &call.lda);
  call.b = operand_bf16(Scratch::kGemmB16, A, call.trans_b ? call.n : call.k, call.trans_b ? call.k : call.n, stream,
                        &call.ldb);
  call.beta = beta;
  call.c = beta != 0.f ? C : nullptr;
  call.ldc = ldc;
  call.d = D, call.ldd = ldd;
  call.d_type = d_bf16 ? CUDA_R_16BF : CUDA_R_32F;

  const bool has_bias = ep.bias && (ep.kind == Gemm16Epilogue::kBias || ep.kind == Gemm16Epilogue::kGeluAuxBias);
  // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD "must be divisible by 8": other aux matrices take the epilogue kernel.
  const bool aux_fusable = ep.ld_aux % 8 == 0;
  const void* bias = nullptr;
  if (has_bias) bias = d_bf16 ? static_cast<const void*>(vector_bf16(ep.bias, N, stream)) : ep.bias;
  LtCall fused = call;
  switch (ep.kind) {
    case Gemm16Epilogue::kNone:
      break;
    case Gemm16Epilogue::kBias:
      if (has_bias) fused.epilogue = CUBLASLT_EPILOGUE_BIAS, fused.bias = bias;
      break;
    case Gemm16Epilogue::kGeluAuxBias:
      fused.epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      fused.bias = bias, fused.aux = ep.aux, fused.ld_aux = ep.ld_aux;
      break;
    case Gemm16Epilogue::kDgelu:
      fused.epilogue = CUBLASLT_EPILOGUE_DGELU, fused.aux = ep.aux, fused.ld_aux = ep.ld_aux;
      break;
  }
  const bool epilogue_kernel_only = bf16_epilogue && !aux_fusable;
  // The row sums of op(A) are the column-major call's BGRADB (the sums of op(B)ᵀ's columns, one per column of D),
  // which overwrites its vector: the caller's scratch, added where it belongs by the caller.
  if (ep.a_row_sums && fused.epilogue == CUBLASLT_EPILOGUE_DEFAULT && kBiasGradientInGemm)
    fused.epilogue = CUBLASLT_EPILOGUE_BGRADB, fused.bias = ep.a_row_sums;
  if (fused.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {  // nothing to fuse
    SFTDP_ASSERT(run(call, stream), shape() + ": cuBLASLt has no algorithm for this shape/alignment");
    if (ep.a_row_sums) row_sums_bf16(ep.a_row_sums, A, M, K, stream);
    return;
  }
  if (!epilogue_kernel_only && run(fused, stream)) return;
  // No algorithm takes the epilogue (an aux leading dimension that is not a multiple of 8, an unaligned bias, or a
  // library without one): the plain GEMM, then the epilogue's arithmetic in a kernel (for a bf16 D: into fp32
  // scratch first), rounding where cuBLASLt rounds.
  if (!d_bf16) {
    SFTDP_ASSERT(run(call, stream), shape() + ": cuBLASLt has no algorithm for this shape/alignment");
    if (has_bias) {  // fp32 D: D = (acc + C) + bias, as the epilogue adds
      constexpr int kBlock = 256;
      SFTDP_LAUNCH(add_bias_kernel, row_blocks(M, kBlock), kBlock, 0, stream, static_cast<float*>(D), ep.bias, M, N,
                   ldd);
      CHECK_LAUNCH();
    }
    if (ep.a_row_sums) row_sums_bf16(ep.a_row_sums, A, M, K, stream);
    return;
  }
  LtCall plain = call;
  float* z = scratch_as<float>(Scratch::kGemmEpilogue, static_cast<size_t>(M) * N);
  plain.d = z, plain.ldd = N, plain.d_type = CUDA_R_32F;
  SFTDP_ASSERT(run(plain, stream), shape() + ": cuBLASLt has no algorithm for this shape/alignment");
  apply_epilogue(ep.kind, z, static_cast<const __nv_bfloat16*>(bias), ep.aux, ep.ld_aux, static_cast<__nv_bfloat16*>(D),
                 ldd, M, N, stream);
}

}  // namespace sftdp::cuda
