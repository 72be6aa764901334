// kernels/cpu/attention.cpp — causal grouped-query self-attention, CPU twin (see
// kernels/attention.h). Legend: B batch, T seq, NH query heads, KVH key/value heads, HS head
// size, G = NH/KVH query heads per k/v head, QKV = (NH + 2·KVH)·HS. A qkv row is
// [q (NH·HS) | k (KVH·HS) | v (KVH·HS)]; head h owns the HS-slice h of its part, and query head
// h reads k/v head h/G. out rows are NH·HS wide.
// att (B,NH,T,T) holds softmax probabilities: exactly 0 above the diagonal and across segments.
// Accumulation: dqkv = (overwritten); datt is scratch.
// The products are single-threaded cblas_sgemm calls on strided views of the rows (no copies),
// in blocks of kRows query rows: rows [r0, r1) see keys [0, r1) only, so the causal upper
// triangle beyond the block is never computed (about half of T×T at large T). The softmax and its
// backward stay plain loops, one row at a time, with sequential fp32 sums. The forward splits
// work over (b, h); the backward over (b, k/v head), visiting its G query heads in increasing h
// and their row blocks in increasing r0, so the pairs write disjoint slices and every sum has one
// fixed order for any thread count.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "kernels/cpu/blas.h"
#include "sftdp/check.h"

namespace sftdp::cpu {

namespace {
constexpr int kRows = 64;  // query rows per GEMM block; fixed, so results depend on T only

// Row-major C(M,N) = alpha·op(A)·op(B) + beta·C on strided views.
void gemm(bool a_t, bool b_t, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, a_t ? CblasTrans : CblasNoTrans, b_t ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
              lda, B, ldb, beta, C, ldc);
}
}  // namespace

void attention_fwd(float* out, float* att,                // (B,T,NH·HS) (B,NH,T,T)
                   const float* qkv, const int32_t* seg,  // (B,T,QKV) (B,T) or null
                   int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               "attention_fwd: NH must be a positive multiple of KVH");
  use_single_threaded_blas();
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const int k_off = NH * HS, v_off = (NH + KVH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float masked = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int kvh = h / G;
      const float* rows = qkv + static_cast<size_t>(b) * T * QKV;
      const float* q = rows + h * HS;
      const float* k = rows + k_off + kvh * HS;
      const float* v = rows + v_off + kvh * HS;
      const int32_t* sg = seg ? seg + static_cast<size_t>(b) * T : nullptr;
      float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      for (int r0 = 0; r0 < T; r0 += kRows) {
        const int r1 = std::min(T, r0 + kRows), n = r1 - r0;
        // scores(t, t2) = scale · q_t·k_t2 for t in [r0, r1), t2 < r1
        gemm(false, true, n, r1, HS, scale, q + static_cast<size_t>(r0) * QKV, QKV, k, QKV, 0.0f,
             a + static_cast<size_t>(r0) * T, T);
        for (int t = r0; t < r1; ++t) {
          float* row = a + static_cast<size_t>(t) * T;
          // masked scores and their max; a position always sees itself, so max is finite
          float max_score = masked;
          for (int t2 = 0; t2 <= t; ++t2) {
            if (sg && sg[t2] != sg[t]) row[t2] = masked;
            if (row[t2] > max_score) max_score = row[t2];
          }
          float sum = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) {
            row[t2] = std::exp(row[t2] - max_score);  // exp(−inf) is exactly 0
            sum += row[t2];
          }
          const float inv_sum = 1.0f / sum;
          for (int t2 = 0; t2 <= t; ++t2) row[t2] *= inv_sum;
          for (int t2 = t + 1; t2 < T; ++t2) row[t2] = 0.0f;
        }
        // out_t = Σ_t2 att(t, t2) · v_t2 (the zeros above the diagonal add nothing)
        gemm(false, false, n, HS, r1, 1.0f, a + static_cast<size_t>(r0) * T, T, v, QKV, 0.0f,
             out + (static_cast<size_t>(b) * T + r0) * OC + h * HS, OC);
      }
    }
  }
}

// Per query head h and row block: datt = dout·vᵀ, dv += attᵀ·dout, per row the softmax backward
// dpre = scale · att ⊙ (datt − Σ att·datt), then dq = dpre·k and dk += dpreᵀ·q.
// Masked entries have att = 0, so dpre = 0 there and no gradient crosses a segment.
void attention_bwd(float* dqkv, float* datt,             // (B,T,QKV) = ; (B,NH,T,T) scratch
                   const float* dout, const float* qkv,  // (B,T,NH·HS) (B,T,QKV)
                   const float* att,                     // (B,NH,T,T)
                   int B, int T, int NH, int KVH, int HS) {
  SFTDP_ASSERT(NH > 0 && KVH > 0 && HS > 0 && NH % KVH == 0,
               "attention_bwd: NH must be a positive multiple of KVH");
  use_single_threaded_blas();
  const int G = NH / KVH, QKV = (NH + 2 * KVH) * HS, OC = NH * HS;
  const int k_off = NH * HS, v_off = (NH + KVH) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int kvh = 0; kvh < KVH; ++kvh) {
      const float* rows = qkv + static_cast<size_t>(b) * T * QKV;
      float* drows = dqkv + static_cast<size_t>(b) * T * QKV;
      for (int t = 0; t < T; ++t) {  // this (b, kvh) owns these slices: clear them first
        float* row = drows + static_cast<size_t>(t) * QKV;
        std::memset(row + kvh * G * HS, 0, static_cast<size_t>(G) * HS * sizeof(float));
        std::memset(row + k_off + kvh * HS, 0, HS * sizeof(float));
        std::memset(row + v_off + kvh * HS, 0, HS * sizeof(float));
      }
      const float* k = rows + k_off + kvh * HS;
      const float* v = rows + v_off + kvh * HS;
      float* dk = drows + k_off + kvh * HS;
      float* dv = drows + v_off + kvh * HS;
      for (int h = kvh * G; h < (kvh + 1) * G; ++h) {  // the group's query heads, in order
        const float* q = rows + h * HS;
        float* dq = drows + h * HS;
        const float* dout_h = dout + static_cast<size_t>(b) * T * OC + h * HS;
        const float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
        float* da = datt + (static_cast<size_t>(b) * NH + h) * T * T;
        for (int r0 = 0; r0 < T; r0 += kRows) {
          const int r1 = std::min(T, r0 + kRows), n = r1 - r0;
          const float* a_blk = a + static_cast<size_t>(r0) * T;
          float* da_blk = da + static_cast<size_t>(r0) * T;
          const float* dout_blk = dout_h + static_cast<size_t>(r0) * OC;
          // datt(t, t2) = dout_t·v_t2, t2 < r1; dv[0, r1) += attᵀ·dout
          gemm(false, true, n, r1, HS, 1.0f, dout_blk, OC, v, QKV, 0.0f, da_blk, T);
          gemm(true, false, r1, HS, n, 1.0f, a_blk, T, dout_blk, OC, 1.0f, dv, QKV);
          for (int t = r0; t < r1; ++t) {
            const float* a_row = a + static_cast<size_t>(t) * T;
            float* da_row = da + static_cast<size_t>(t) * T;
            float att_dot_datt = 0.0f;
            for (int t2 = 0; t2 <= t; ++t2) att_dot_datt += a_row[t2] * da_row[t2];
            for (int t2 = 0; t2 <= t; ++t2) da_row[t2] = a_row[t2] * (da_row[t2] - att_dot_datt) * scale;
            for (int t2 = t + 1; t2 < r1; ++t2) da_row[t2] = 0.0f;  // the block's GEMMs read them
          }
          // dq rows [r0, r1) = dpre·k (each row in exactly one block); dk[0, r1) += dpreᵀ·q
          gemm(false, false, n, HS, r1, 1.0f, da_blk, T, k, QKV, 0.0f, dq + static_cast<size_t>(r0) * QKV, QKV);
          gemm(true, false, r1, HS, n, 1.0f, da_blk, T, q + static_cast<size_t>(r0) * QKV, QKV, 1.0f, dk, QKV);
        }
      }
    }
  }
}

}  // namespace sftdp::cpu
