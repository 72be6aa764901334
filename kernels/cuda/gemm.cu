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

// One column-major cuBLASLt call: D = alpha·op(a)·op(b) + beta·C, D = C in place.
struct LtCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  int64_t stride_a = 0;
  const void* b = nullptr;
  int ldb = 0;
  int64_t stride_b = 0;
  float* c = nullptr;
  int ldc = 0;
  int64_t stride_c = 0;
  int batch = 1;
  cudaDataType_t ab_type = CUDA_R_32F;
  float alpha = 1.f, beta = 0.f;
};

// The descriptors of one call, destroyed with it.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LtDescs(const LtCall& call, const float* epilogue_bias) {
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (epilogue_bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epilogue_bias,
                                                  sizeof(epilogue_bias)));
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                  sizeof(bias_type)));
    }
    a = layout(call.ab_type, call.trans_a ? call.k : call.m, call.trans_a ? call.m : call.k, call.lda,
               call.batch, call.stride_a);
    b = layout(call.ab_type, call.trans_b ? call.n : call.k, call.trans_b ? call.k : call.n, call.ldb,
               call.batch, call.stride_b);
    c = layout(CUDA_R_32F, call.m, call.n, call.ldc, call.batch, call.stride_c);
  }
  ~LtDescs() {
    // Destroying descriptors cannot fail in a way we could act on; keep the destructor nothrow.
    (void)cublasLtMatrixLayoutDestroy(c);
    (void)cublasLtMatrixLayoutDestroy(b);
    (void)cublasLtMatrixLayoutDestroy(a);
    (void)cublasLtMatmulDescDestroy(op);
  }
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;

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

using AlgoKey = std::array<int64_t, 19>;
struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

struct Alignments {
  uint32_t a, b, c;
};
Alignments alignments_of(const LtCall& call) {
  const size_t ab_bytes = call.ab_type == CUDA_R_16BF ? 2 : 4;
  return {batch_alignment(call.a, call.stride_a, ab_bytes, call.batch),
          batch_alignment(call.b, call.stride_b, ab_bytes, call.batch),
          batch_alignment(call.c, call.stride_c, sizeof(float), call.batch)};
}

// epilogue_bias: the fused bias pointer, or null. Its alignment is part of the key: the heuristic
// sees the pointer in the descriptor, so an algorithm chosen for a 256-byte-aligned bias is not
// reused for one that is only 16-byte aligned.
AlgoKey key_of(const LtCall& call, const float* epilogue_bias) {
  const Alignments al = alignments_of(call);
  const int64_t bias_alignment = epilogue_bias ? alignment_of(epilogue_bias) : 0;
  return {call.trans_a, call.trans_b, call.m, call.n, call.k, call.lda, call.ldb, call.ldc,
          call.stride_a, call.stride_b, call.stride_c, call.batch, static_cast<int64_t>(call.ab_type),
          epilogue_bias != nullptr, bias_alignment, al.a, al.b, al.c, static_cast<int64_t>(kWorkspaceBytes)};
}

// The heuristic's first choice for this call, cached (the heuristic is deterministic, so the cache
// only saves host time; it never changes the result).
// GPU-CHECK: bitwise run-to-run reproducibility rests on cuBLASLt's own guarantee for a fixed
// algorithm (its split-K reduction schemes are ordered: INPLACE serialises with counters, the others
// reduce in a separate pass). The CUDA model test "three steps bitwise twice" checks it; should it
// fail, set CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK to CUBLASLT_REDUCTION_SCHEME_NONE here.
const CachedAlgo& algo_for(const LtCall& call, const LtDescs& descs, const float* epilogue_bias) {
  static std::map<AlgoKey, CachedAlgo> cache;
  const AlgoKey key = key_of(call, epilogue_bias);
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
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al.c,
                                                    sizeof(al.c)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_handle(), descs.op, descs.a, descs.b, descs.c,
                                                               descs.c, pref, 1, &result, &returned);
  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  // NOT_SUPPORTED means "no algorithm for this configuration": the caller falls back or reports.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) CHECK_CUBLAS(status);
  CachedAlgo& entry = cache[key];
  entry.found = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (entry.found) entry.algo = result.algo;
  return entry;
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

  void* workspace = scratch(Scratch::kGemmWorkspace, kWorkspaceBytes);
  if (bias && alignment_of(bias) >= 16) {
    LtDescs descs(call, bias);
    const CachedAlgo& fused = algo_for(call, descs, bias);
    if (fused.found) {
      CHECK_CUBLAS(cublasLtMatmul(lt_handle(), descs.op, &call.alpha, call.a, descs.a, call.b, descs.b,
                                  &call.beta, call.c, descs.c, call.c, descs.c, &fused.algo, workspace,
                                  kWorkspaceBytes, stream));
      return;
    }
    // No algorithm fuses this bias: plain GEMM, then the bias kernel below.
  }
  LtDescs descs(call, nullptr);
  const CachedAlgo* algo = &algo_for(call, descs, nullptr);
  SFTDP_ASSERT(algo->found, shape() + ": cuBLASLt has no algorithm for this shape/alignment");
  CHECK_CUBLAS(cublasLtMatmul(lt_handle(), descs.op, &call.alpha, call.a, descs.a, call.b, descs.b, &call.beta,
                              call.c, descs.c, call.c, descs.c, &algo->algo, workspace, kWorkspaceBytes, stream));
  if (bias) {
    // Biases at < 16-byte-aligned offsets of the flat parameter buffer (or shapes with no fused
    // algorithm) come here; tests/kernels/test_cuda_gemm_vs_cpu.cpp reaches it with a bias one
    // float past a cudaMalloc'd (256-byte-aligned) address and checks it against the CPU twin.
    constexpr int kBlock = 256;
    SFTDP_LAUNCH(add_bias_kernel, row_blocks(M, kBlock), kBlock, 0, stream, C, bias, M, N, ldc);
    CHECK_LAUNCH();
  }
}

}  // namespace sftdp::cuda
