// src/model/gpt2_act16.cpp — GPT-2 blocks on the act16 path (kernels/act16.h; sftdp/model.h's act16()): what only
// GEMMs and attention read is bf16 — both norms' outputs, q|k|v, attention's output, the MLP's hidden layer before
// and after GELU, and every activation gradient but the residual stream's — while the residual stream, its
// gradient, the norms' statistics and all gradient sums stay fp32. Per block, forward (N = B·T):
//   ln1 = LN(x)                         act16::layernorm_fwd
//   qkv = ln1·Wqkvᵀ + b                 linear_fwd kBf16        (BIAS epilogue)
//   atty = attention(qkv)               attention_fwd
//   x2 = x + atty·Wprojᵀ + b            linear_fwd kFp32Residual (C = x, BIAS epilogue: the residual add fused)
//   ln2 = LN(x2)
//   h = gelu(ln2·Wfcᵀ + b), pre = the GELU's input    linear_fwd kBf16Gelu (GELU_AUX_BIAS epilogue)
//   x3 = x2 + h·Wfcprojᵀ + b            linear_fwd kFp32Residual
// and backward, dres = d x3 (fp32) with its bf16 copy dres16 (written by the norm backward that made it):
//   d pre = (dres16·Wfcproj)·gelu'(pre), dWfcproj += dres16ᵀ·h      linear_bwd (DGELU epilogue)
//   d ln2 = d pre·Wfc, dWfc += d preᵀ·ln2, dbfc += Σ d pre            linear_bwd (BGRADB epilogue)
//   dres = d x2 = dres + LN2'(d ln2); dbfcproj += Σ d x3                layernorm_bwd (one kernel)
//   d atty = dres16·Wproj, dWproj += dres16ᵀ·atty                       linear_bwd
//   d qkv = attention'(d atty)                                          attention_bwd
//   d ln1 = d qkv·Wqkv, dWqkv += d qkvᵀ·ln1, dbqkv += Σ d qkv          linear_bwd
//   dres = d x = dres + LN1'(d ln1); dbproj += Σ d x2                   layernorm_bwd
// The projections' bias gradients are the column sums of the residual stream's gradient, which the next norm's
// backward reads anyway (its dres_in_sum); ln_f's backward starts dres (no zeroing).
// remat: as gpt2.cpp's, every layer's buffers but x3 shared, block l's forward re-run before its backward (all but
// the last), writing only those shared buffers.
#include <algorithm>

#include "kernels/ops.h"
#include "model/gpt2_layer.h"
#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

// Activations for max_B rows, in device memory. Per layer: what backward needs again (remat: all layers' pointers
// but residual3 alias layer 0's).
struct Gpt2::Acts16 {
  struct Layer {
    uint16_t* ln1;                   // (N,C) bf16
    float *ln1_mean, *ln1_rstd;      // (N) (N)
    uint16_t *qkv, *atty;            // (N,3C) (N,C) bf16
    float* lse;                      // (B,NH,T)
    float* residual2;                // (N,C)
    uint16_t* ln2;                   // (N,C) bf16
    float *ln2_mean, *ln2_rstd;      // (N) (N)
    uint16_t *fch, *fch_gelu;        // (N,F) (N,F) bf16: the GELU's input and output
    float* residual3;                // (N,C)
  };
  std::vector<Layer> layers;
  float* encoded;                    // (N,C)
  uint16_t* lnf;                     // (N,C) bf16: hidden16_
  float *lnf_mean, *lnf_rstd;        // (N) (N)
  float* dresidual;                  // (N,C)
  uint16_t *dresidual16, *dln;       // (N,C) (N,C) bf16: dres's copy for the GEMMs; a norm's output gradient
  uint16_t *datty, *dfch, *dqkv;     // (N,C) (N,F) (N,3C) bf16
  uint16_t* dhidden;                 // (N,C) bf16: dhidden16_
};

void Gpt2::make_acts16() {
  acts16_ = new Acts16();
  auto& a = *acts16_;
  const size_t N = size_t(max_B_) * T_, C = d_.C, F = d_.F, lse = size_t(max_B_) * d_.NH * T_;
  auto f = [&](size_t n) { return alloc_acts(n); };
  auto h = [&](size_t n) { return alloc_acts_bf16(n); };
  a.layers.resize(d_.L);
  // Everything but residual3, in bytes: the part remat shares (L copies without it, one with it).
  const size_t shared = (4 * N + lse + N * C) * sizeof(float) + (3 * N * C + 3 * N * C + 2 * N * F) * sizeof(uint16_t);
  for (int i = 0; i < d_.L; ++i) {
    auto& l = a.layers[i];
    if (remat_ && i > 0) {
      l = a.layers[0];
    } else {
      l.ln1 = h(N * C), l.ln1_mean = f(N), l.ln1_rstd = f(N);
      l.qkv = h(N * 3 * C), l.atty = h(N * C), l.lse = f(lse);
      l.residual2 = f(N * C);
      l.ln2 = h(N * C), l.ln2_mean = f(N), l.ln2_rstd = f(N);
      l.fch = h(N * F), l.fch_gelu = h(N * F);
    }
    l.residual3 = f(N * C);
  }
  remat_saved_bytes_ = size_t(std::max(d_.L - 1, 0)) * shared;
  a.encoded = f(N * C);
  // lnf and dhidden: one spare row more (row N: zeros, read and written by the LM head's padding rows, Model::upload)
  a.lnf = h((N + 1) * C), a.lnf_mean = f(N), a.lnf_rstd = f(N);
  a.dresidual = f(N * C), a.dresidual16 = h(N * C), a.dln = h(N * C);
  a.datty = h(N * C), a.dfch = h(N * F), a.dqkv = h(N * 3 * C);
  a.dhidden = h((N + 1) * C);
  hidden16_ = a.lnf, dhidden16_ = a.dhidden;
}

void Gpt2::destroy_acts16() { delete acts16_; }

void Gpt2::block_forward16(int l, int B, bool through_output) {
  auto& a = *acts16_;
  const Ops::Act16& o = ops_.act16;
  using act16::LinearOut;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, N = B * T;
  auto& x = a.layers[l];
  const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
  const auto w = layer_params(layer_offsets_[l], [&](size_t o) { return param(o); });
  o.layernorm_fwd(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
  o.linear_fwd(x.qkv, 3 * C, nullptr, nullptr, x.ln1, w.qkvw, w.qkvb, N, C, 3 * C, LinearOut::kBf16);
  o.attention_fwd(x.atty, x.lse, x.qkv, io_.seg(), B, T, NH, NH, C / NH);
  o.linear_fwd(x.residual2, C, nullptr, residual, x.atty, w.projw, w.projb, N, C, C, LinearOut::kFp32Residual);
  o.layernorm_fwd(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2w, w.ln2b, N, C);
  o.linear_fwd(x.fch_gelu, F, x.fch, nullptr, x.ln2, w.fcw, w.fcb, N, C, F, LinearOut::kBf16Gelu);
  if (!through_output) return;
  o.linear_fwd(x.residual3, C, nullptr, x.residual2, x.fch_gelu, w.fcprojw, w.fcprojb, N, F, C,
               LinearOut::kFp32Residual);
}

void Gpt2::run_forward16(int B) {
  auto& a = *acts16_;
  const int T = T_, C = d_.C, N = B * T;
  use_embeddings();
  ops_.encoder_fwd(a.encoded, io_.inputs, io_.pos(), param(wte_), param(wpe_), B, T, C);
  for (int l = 0; l < d_.L; ++l) {
    use_block(l);
    block_forward16(l, B, /*through_output=*/true);
  }
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  ops_.act16.layernorm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, last, param(lnf_w_), param(lnf_b_), N, C);
}

void Gpt2::run_backward16(int B) {
  auto& a = *acts16_;
  const Ops::Act16& o = ops_.act16;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, N = B * T;
  // a.dhidden (dhidden16_) holds d ln_f output; the head's share of dwte is already in its sums.
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  o.layernorm_bwd(a.dresidual, a.dresidual16, base_grad(lnf_w_), base_grad(lnf_b_), nullptr, nullptr, a.dhidden, last,
                  param(lnf_w_), a.lnf_mean, a.lnf_rstd, N, C);
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    if (remat_ && l < d_.L - 1) block_forward16(l, B, /*through_output=*/false);  // see the file header
    auto& x = a.layers[l];
    const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    const auto w = layer_params(layer_offsets_[l], [&](size_t o) { return param(o); });
    const auto dw = layer_params(layer_offsets_[l], [&](size_t o) { return base_grad(o); });
    auto mut = [](const float* q) { return const_cast<float*>(q); };
    // a.dresidual = d residual3; the MLP branch
    o.linear_bwd(a.dfch, x.fch, mut(dw.fcprojw), nullptr, a.dresidual16, C, x.fch_gelu, w.fcprojw, N, F, C);
    o.linear_bwd(a.dln, nullptr, mut(dw.fcw), mut(dw.fcb), a.dfch, F, x.ln2, w.fcw, N, C, F);
    o.layernorm_bwd(a.dresidual, a.dresidual16, mut(dw.ln2w), mut(dw.ln2b), mut(dw.fcprojb), a.dresidual, a.dln,
                    x.residual2, w.ln2w, x.ln2_mean, x.ln2_rstd, N, C);
    // a.dresidual = d residual2; the attention branch
    o.linear_bwd(a.datty, nullptr, mut(dw.projw), nullptr, a.dresidual16, C, x.atty, w.projw, N, C, C);
    o.attention_bwd(a.dqkv, a.datty, x.qkv, x.atty, x.lse, io_.seg(), B, T, NH, NH, C / NH);
    o.linear_bwd(a.dln, nullptr, mut(dw.qkvw), mut(dw.qkvb), a.dqkv, 3 * C, x.ln1, w.qkvw, N, C, 3 * C);
    o.layernorm_bwd(a.dresidual, a.dresidual16, mut(dw.ln1w), mut(dw.ln1b), mut(dw.projb), a.dresidual, a.dln,
                    residual, w.ln1w, x.ln1_mean, x.ln1_rstd, N, C);
    layer_backward_done(l);  // block l's weight gradients are final
  }
  ops_.encoder_bwd(base_grad(wte_), base_grad(wpe_), a.dresidual, io_.inputs, io_.pos(), io_.buckets, B, T, C);
}

}  // namespace sftdp::model
