// src/model/decoder_act16.cpp — the one transformer block (decoder.h) on the act16 path (kernels/act16.h;
// ActivationStorage::kBf16 in sftdp/model.h), every family through its traits: what only GEMMs and attention
// read is bf16 — both norms' outputs, q|k|v, attention's output, the MLP's hidden layer before and after its
// activation, and every activation gradient but the residual stream's — while the residual stream, its
// gradient, the norms' statistics and all gradient sums stay fp32. Per block, forward (N = B·T):
//   ln1 = norm(x)                        act16::layernorm_fwd | rmsnorm_fwd
//   qkv = ln1·Wqkvᵀ (+ b)                linear_fwd kBf16 (BIAS epilogue) [→ q/k norm] [→ RoPE in place]
//   atty = attention(qkv)                attention_fwd (context parallelism: attention_cp_fwd, Model's)
//   x2 = x + atty·Wprojᵀ (+ b)           linear_fwd kFp32Residual (C = x: the residual add fused)
//   ln2 = norm(x2)
//   GELU:   h = gelu(ln2·Wfcᵀ + b), pre = the GELU's input    linear_fwd kBf16Gelu (GELU_AUX_BIAS epilogue)
//   SwiGLU: fch = ln2·Wfcᵀ (gate | up), h = silu(gate)·up      linear_fwd kBf16, swiglu_fwd
//   x3 = x2 + h·Wmlpprojᵀ (+ b)          linear_fwd kFp32Residual
// and backward, dres = d x3 (fp32) with its bf16 copy dres16 (written by the norm backward that made it):
//   GELU:   d pre = (dres16·Wmlpproj)·gelu'(pre), dWmlpproj += dres16ᵀ·h     linear_bwd (DGELU epilogue)
//   SwiGLU: d h = dres16·Wmlpproj, dWmlpproj += dres16ᵀ·h; d fch = swiglu'(d h) linear_bwd, swiglu_bwd
//   d ln2 = d fch·Wfc, dWfc += d fchᵀ·ln2 (dbfc += Σ d fch)               linear_bwd (BGRADB epilogue)
//   dres = d x2 = dres + norm2'(d ln2) (dbmlpproj += Σ d x3)              layernorm_bwd | rmsnorm_bwd (one kernel)
//   d atty = dres16·Wproj, dWproj += dres16ᵀ·atty                         linear_bwd
//   d qkv = attention'(d atty) [→ RoPE' → q/k norm']                      attention_bwd
//   d ln1 = d qkv·Wqkv, dWqkv += d qkvᵀ·ln1 (dbqkv += Σ d qkv)            linear_bwd
//   dres = d x = dres + norm1'(d ln1) (dbproj += Σ d x2)                  layernorm_bwd | rmsnorm_bwd
// The projections' bias gradients are the column sums of the residual stream's gradient, which the next norm's
// backward reads anyway (LayerNorm's dres_in_sum: only the LayerNorm families have those biases); the final norm's
// backward starts dres (no zeroing).
// remat: as decoder.cpp's, every layer's buffers but x3 shared, block l's forward re-run before its backward (all
// but the last), writing only those shared buffers.
#include <algorithm>

#include "kernels/ops.h"
#include "model/decoder.h"
#include "sftdp/check.h"

namespace sftdp::model {

// Activations for max_B rows, in device memory. Per layer: what backward needs again (remat: all layers' pointers
// but residual3 alias layer 0's). Null: what the family has not.
struct Decoder::Acts16 {
  struct Layer {
    uint16_t* ln1;                   // (N,C) bf16
    float *ln1_mean, *ln1_rstd;      // (N: LayerNorm) (N)
    uint16_t* qkv_raw;               // (N,QKV) bf16 before the q/k norm (qk_norm only)
    float* qk_rstd;                  // (N,NH+KVH) (qk_norm only)
    uint16_t *qkv, *atty;            // (N,QKV) as attention reads it: normed, rotated; (N,A) bf16
    float* lse;                      // (B,NH,T)
    float* residual2;                // (N,C)
    uint16_t* ln2;                   // (N,C) bf16
    float *ln2_mean, *ln2_rstd;      // (N: LayerNorm) (N)
    uint16_t *fch, *fch_act;         // (N,FW) (N,F) bf16: the activation's input and output
    float* residual3;                // (N,C)
  };
  std::vector<Layer> layers;
  float* encoded;                    // (N,C)
  uint16_t* lnf;                     // (N,C) bf16: hidden16_
  float *lnf_mean, *lnf_rstd;        // (N: LayerNorm) (N)
  float* dresidual;                  // (N,C)
  uint16_t *dresidual16, *dln;       // (N,C) (N,C) bf16: dres's copy for the GEMMs; a norm's output gradient
  uint16_t *datty, *dfch, *dact;     // (N,A) (N,FW) (N,F: SwiGLU only) bf16
  uint16_t *dqkv, *dqkv_raw;         // (N,QKV) (N,QKV: qk_norm only) bf16
  uint16_t* dhidden;                 // (N,C) bf16: dhidden16_
};

void Decoder::make_acts16() {
  acts16_ = new Acts16();
  auto& a = *acts16_;
  const bool ln = traits_.norm == Norm::kLayerNorm, qkn = traits_.qk_norm, swiglu = traits_.mlp == Mlp::kSwiGlu;
  const size_t N = size_t(max_B_) * T_, C = d_.C, F = d_.F, FW = traits_.mlp_width(d_.F), QKV = d_.qkv_dim();
  const size_t A = d_.attn_dim(), lse = size_t(max_B_) * d_.NH * T_, heads = size_t(d_.NH) + d_.kv_heads();
  size_t counted = 0;  // bytes (the remat-shared part is what layer 0 takes but residual3)
  auto f = [&](size_t n) { return counted += n * sizeof(float), alloc_acts(n); };
  auto h = [&](size_t n) { return counted += n * sizeof(uint16_t), alloc_acts_bf16(n); };
  a.layers.resize(d_.L);
  size_t shared = 0;
  for (int i = 0; i < d_.L; ++i) {
    auto& l = a.layers[i];
    if (remat_ && i > 0) {
      l = a.layers[0];
    } else {
      const size_t before = counted;
      l.ln1 = h(N * C), l.ln1_mean = ln ? f(N) : nullptr, l.ln1_rstd = f(N);
      l.qkv_raw = qkn ? h(N * QKV) : nullptr;
      l.qk_rstd = qkn ? f(N * heads) : nullptr;
      l.qkv = h(N * QKV), l.atty = h(N * A), l.lse = f(lse);
      l.residual2 = f(N * C);
      l.ln2 = h(N * C), l.ln2_mean = ln ? f(N) : nullptr, l.ln2_rstd = f(N);
      l.fch = h(N * FW), l.fch_act = h(N * F);
      shared = counted - before;
    }
    l.residual3 = f(N * C);
  }
  remat_saved_bytes_ = size_t(std::max(d_.L - 1, 0)) * shared;
  a.encoded = f(N * C);
  // lnf and dhidden: one spare row more (row N: zeros, read and written by the LM head's padding rows, Model::upload)
  a.lnf = h((N + 1) * C), a.lnf_mean = ln ? f(N) : nullptr, a.lnf_rstd = f(N);
  a.dresidual = f(N * C), a.dresidual16 = h(N * C), a.dln = h(N * C);
  a.datty = h(N * A), a.dfch = h(N * FW), a.dact = swiglu ? h(N * F) : nullptr;
  a.dqkv = h(N * QKV), a.dqkv_raw = qkn ? h(N * QKV) : nullptr;
  a.dhidden = h((N + 1) * C);
  hidden16_ = a.lnf, dhidden16_ = a.dhidden;
}

void Decoder::destroy_acts16() { delete acts16_; }

void Decoder::norm_fwd16(uint16_t* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                         int N) const {
  if (traits_.norm == Norm::kLayerNorm) return ops_.act16.layernorm_fwd(out, mean, rstd, x, w, b, N, d_.C);
  ops_.act16.rmsnorm_fwd(out, rstd, x, w, N, d_.C, static_cast<float>(d_.norm_eps));
}

void Decoder::norm_bwd16(float* dres, uint16_t* dres16, float* dw, float* db, float* dres_sum, const float* dres_in,
                         const uint16_t* dout, const float* x, const float* w, const float* mean, const float* rstd,
                         int N) const {
  if (traits_.norm == Norm::kLayerNorm)
    return ops_.act16.layernorm_bwd(dres, dres16, dw, db, dres_sum, dres_in, dout, x, w, mean, rstd, N, d_.C);
  SFTDP_ASSERT(!dres_sum, "an RMSNorm family with projection biases: the act16 rmsnorm_bwd sums no columns");
  ops_.act16.rmsnorm_bwd(dres, dres16, dw, dres_in, dout, x, w, rstd, N, d_.C);
}

void Decoder::block_forward16(int l, int B, bool through_output) {
  auto& a = *acts16_;
  const Ops::Act16& o = ops_.act16;
  using act16::LinearOut;
  const int T = T_, C = d_.C, F = d_.F, FW = traits_.mlp_width(d_.F), NH = d_.NH, KVH = d_.kv_heads();
  const int HS = d_.head_size(), QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  auto& x = a.layers[l];
  const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
  const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
  norm_fwd16(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1w, w.ln1b, N);
  uint16_t* qkv_linear = traits_.qk_norm ? x.qkv_raw : x.qkv;  // the projection's output
  o.linear_fwd(qkv_linear, QKV, nullptr, nullptr, x.ln1, w.qkvw, w.qkvb, N, C, QKV, LinearOut::kBf16);
  if (traits_.qk_norm)
    o.qk_rmsnorm_fwd(x.qkv, x.qk_rstd, x.qkv_raw, w.qnorm, w.knorm, N, NH, KVH, HS, static_cast<float>(d_.norm_eps));
  if (traits_.positions == Positions::kRope) o.rope_fwd(x.qkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
  attention_forward16(x.atty, x.lse, x.qkv, B, NH, KVH, HS);
  o.linear_fwd(x.residual2, C, nullptr, residual, x.atty, w.projw, w.projb, N, A, C, LinearOut::kFp32Residual);
  norm_fwd16(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2w, w.ln2b, N);
  if (traits_.mlp == Mlp::kGelu) {
    o.linear_fwd(x.fch_act, F, x.fch, nullptr, x.ln2, w.fcw, w.fcb, N, C, F, LinearOut::kBf16Gelu);
  } else {
    o.linear_fwd(x.fch, FW, nullptr, nullptr, x.ln2, w.fcw, w.fcb, N, C, FW, LinearOut::kBf16);
    o.swiglu_fwd(x.fch_act, x.fch, N, F);
  }
  if (!through_output) return;
  o.linear_fwd(x.residual3, C, nullptr, x.residual2, x.fch_act, w.mlpprojw, w.mlpprojb, N, F, C,
               LinearOut::kFp32Residual);
}

void Decoder::run_forward16(int B) {
  auto& a = *acts16_;
  const int T = T_, C = d_.C, N = B * T;
  use_embeddings();
  ops_.encoder_fwd(a.encoded, io_.inputs, embedding_positions(), param(wte_), wpe(), B, T, C);
  for (int l = 0; l < d_.L; ++l) {
    use_block(l);
    block_forward16(l, B, /*through_output=*/true);
  }
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  norm_fwd16(a.lnf, a.lnf_mean, a.lnf_rstd, last, param(lnf_w_), lnf_b_ == kAbsent ? nullptr : param(lnf_b_), N);
}

void Decoder::run_backward16(int B) {
  auto& a = *acts16_;
  const Ops::Act16& o = ops_.act16;
  const int T = T_, C = d_.C, F = d_.F, FW = traits_.mlp_width(d_.F), NH = d_.NH, KVH = d_.kv_heads();
  const int HS = d_.head_size(), QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  // a.dhidden (dhidden16_) holds d(final norm output); the head's gradient is already in its sums.
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  norm_bwd16(a.dresidual, a.dresidual16, base_grad(lnf_w_), lnf_b_ == kAbsent ? nullptr : base_grad(lnf_b_), nullptr,
             nullptr, a.dhidden, last, param(lnf_w_), a.lnf_mean, a.lnf_rstd, N);
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    if (remat_ && l < d_.L - 1) block_forward16(l, B, /*through_output=*/false);  // see the file header
    auto& x = a.layers[l];
    const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
    const auto dw = layer_ptrs(layer_offsets_[l], [&](size_t o) { return base_grad(o); });
    // a.dresidual = d residual3; the MLP branch
    if (traits_.mlp == Mlp::kGelu) {
      o.linear_bwd(a.dfch, x.fch, dw.mlpprojw, nullptr, a.dresidual16, C, x.fch_act, w.mlpprojw, N, F, C);
    } else {
      o.linear_bwd(a.dact, nullptr, dw.mlpprojw, nullptr, a.dresidual16, C, x.fch_act, w.mlpprojw, N, F, C);
      o.swiglu_bwd(a.dfch, x.fch, a.dact, N, F);
    }
    o.linear_bwd(a.dln, nullptr, dw.fcw, dw.fcb, a.dfch, FW, x.ln2, w.fcw, N, C, FW);
    norm_bwd16(a.dresidual, a.dresidual16, dw.ln2w, dw.ln2b, dw.mlpprojb, a.dresidual, a.dln, x.residual2, w.ln2w,
               x.ln2_mean, x.ln2_rstd, N);
    // a.dresidual = d residual2; the attention branch
    o.linear_bwd(a.datty, nullptr, dw.projw, nullptr, a.dresidual16, C, x.atty, w.projw, N, A, C);
    attention_backward16(a.dqkv, a.datty, x.qkv, x.atty, x.lse, B, NH, KVH, HS);
    if (traits_.positions == Positions::kRope) o.rope_bwd(a.dqkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
    const uint16_t* dqkv_linear = a.dqkv;  // gradient at the qkv projection's output
    if (traits_.qk_norm) {
      o.qk_rmsnorm_bwd(a.dqkv_raw, dw.qnorm, dw.knorm, a.dqkv, x.qkv_raw, w.qnorm, w.knorm, x.qk_rstd, N, NH, KVH,
                       HS);
      dqkv_linear = a.dqkv_raw;
    }
    o.linear_bwd(a.dln, nullptr, dw.qkvw, dw.qkvb, dqkv_linear, QKV, x.ln1, w.qkvw, N, C, QKV);
    norm_bwd16(a.dresidual, a.dresidual16, dw.ln1w, dw.ln1b, dw.projb, a.dresidual, a.dln, residual, w.ln1w,
               x.ln1_mean, x.ln1_rstd, N);
    layer_backward_done(l);  // block l's weight gradients are final
  }
  ops_.encoder_bwd(base_grad(wte_), dwpe(), a.dresidual, io_.inputs, embedding_positions(), io_.buckets, B, T, C);
}

}  // namespace sftdp::model
