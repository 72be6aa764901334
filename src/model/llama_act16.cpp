// src/model/llama_act16.cpp — Llama-family blocks on the act16 path (kernels/act16.h; sftdp/model.h's act16()), as
// GPT-2's (src/model/gpt2_act16.cpp): bf16 what only GEMMs and attention read, fp32 the residual stream, its
// gradient, the norms' statistics and every gradient sum. Per block, forward:
//   ln1 = rmsnorm(x); qkv = ln1·Wqkvᵀ (+ b: Qwen2) [→ q/k norm: Qwen3]; rope(qkv) in place; atty = attention(qkv)
//   x2 = x + atty·Wprojᵀ                (linear_fwd kFp32Residual: the residual add in the GEMM)
//   ln2 = rmsnorm(x2); fch = ln2·Wfcᵀ (gate | up); act = silu(gate)·up
//   x3 = x2 + act·Wdownᵀ
// backward from dres = d x3 (fp32) and its bf16 copy, each norm's backward one kernel that also writes that copy.
// remat: as gpt2_act16.cpp's.
#include <algorithm>

#include "kernels/ops.h"
#include "model/llama_layer.h"
#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

// Activations for max_B rows, in device memory. Per layer: what backward needs again (remat: all layers' pointers
// but residual3 alias layer 0's).
struct Llama::Acts16 {
  struct Layer {
    uint16_t* ln1;               // (N,C) bf16
    float* ln1_rstd;             // (N)
    uint16_t* qkv_raw;           // (N,QKV) bf16 before the q/k norm (Qwen3 only)
    float* qk_rstd;              // (N,NH+KVH) (Qwen3 only)
    uint16_t *qkv, *atty;        // (N,QKV) as attention reads it: normed (Qwen3), rotated; (N,A) bf16
    float* lse;                  // (B,NH,T)
    float* residual2;            // (N,C)
    uint16_t* ln2;               // (N,C) bf16
    float* ln2_rstd;             // (N)
    uint16_t *fch, *fch_act;     // (N,2F) (N,F) bf16
    float* residual3;            // (N,C)
  };
  std::vector<Layer> layers;
  float* encoded;                // (N,C)
  uint16_t* lnf;                 // (N,C) bf16: hidden16_
  float* lnf_rstd;               // (N)
  float* dresidual;              // (N,C)
  uint16_t *dresidual16, *dln;   // (N,C) (N,C) bf16
  uint16_t *datty, *dfch, *dact;  // (N,A) (N,2F) (N,F) bf16
  uint16_t *dqkv, *dqkv_raw;     // (N,QKV) (N,QKV) bf16 (the second Qwen3 only)
  uint16_t* dhidden;             // (N,C) bf16: dhidden16_
};

void Llama::make_acts16() {
  acts16_ = new Acts16();
  auto& a = *acts16_;
  const size_t N = size_t(max_B_) * T_, C = d_.C, F = d_.F, QKV = d_.qkv_dim(), A = d_.attn_dim();
  const size_t lse = size_t(max_B_) * d_.NH * T_, heads = size_t(d_.NH) + d_.kv_heads();
  auto f = [&](size_t n) { return alloc_acts(n); };
  auto h = [&](size_t n) { return alloc_acts_bf16(n); };
  a.layers.resize(d_.L);
  // Everything but residual3, in bytes: the part remat shares (L copies without it, one with it).
  const size_t shared = (2 * N + (d_.qk_norm ? N * heads : 0) + lse + N * C) * sizeof(float) +
                        (2 * N * C + (d_.qk_norm ? N * QKV : 0) + N * QKV + N * A + 3 * N * F) * sizeof(uint16_t);
  for (int i = 0; i < d_.L; ++i) {
    auto& l = a.layers[i];
    if (remat_ && i > 0) {
      l = a.layers[0];
    } else {
      l.ln1 = h(N * C), l.ln1_rstd = f(N);
      l.qkv_raw = d_.qk_norm ? h(N * QKV) : nullptr;
      l.qk_rstd = d_.qk_norm ? f(N * heads) : nullptr;
      l.qkv = h(N * QKV), l.atty = h(N * A), l.lse = f(lse);
      l.residual2 = f(N * C);
      l.ln2 = h(N * C), l.ln2_rstd = f(N);
      l.fch = h(N * 2 * F), l.fch_act = h(N * F);
    }
    l.residual3 = f(N * C);
  }
  remat_saved_bytes_ = size_t(std::max(d_.L - 1, 0)) * shared;
  a.encoded = f(N * C);
  // lnf and dhidden: one spare row more (row N: zeros, read and written by the LM head's padding rows, Model::upload)
  a.lnf = h((N + 1) * C), a.lnf_rstd = f(N);
  a.dresidual = f(N * C), a.dresidual16 = h(N * C), a.dln = h(N * C);
  a.datty = h(N * A), a.dfch = h(N * 2 * F), a.dact = h(N * F);
  a.dqkv = h(N * QKV), a.dqkv_raw = d_.qk_norm ? h(N * QKV) : nullptr;
  a.dhidden = h((N + 1) * C);
  hidden16_ = a.lnf, dhidden16_ = a.dhidden;
}

void Llama::destroy_acts16() { delete acts16_; }

void Llama::block_forward16(int l, int B, bool through_output) {
  auto& a = *acts16_;
  const Ops::Act16& o = ops_.act16;
  using act16::LinearOut;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, KVH = d_.kv_heads(), HS = d_.head_size();
  const int QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  const float eps = static_cast<float>(d_.norm_eps);
  auto& x = a.layers[l];
  const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
  const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
  o.rmsnorm_fwd(x.ln1, x.ln1_rstd, residual, w.ln1, N, C, eps);
  if (d_.qk_norm) {
    o.linear_fwd(x.qkv_raw, QKV, nullptr, nullptr, x.ln1, w.qkvw, w.qkvb, N, C, QKV, LinearOut::kBf16);
    o.qk_rmsnorm_fwd(x.qkv, x.qk_rstd, x.qkv_raw, w.qnorm, w.knorm, N, NH, KVH, HS, eps);
  } else {
    o.linear_fwd(x.qkv, QKV, nullptr, nullptr, x.ln1, w.qkvw, w.qkvb, N, C, QKV, LinearOut::kBf16);
  }
  o.rope_fwd(x.qkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
  o.attention_fwd(x.atty, x.lse, x.qkv, io_.seg(), B, T, NH, KVH, HS);
  o.linear_fwd(x.residual2, C, nullptr, residual, x.atty, w.proj, nullptr, N, A, C, LinearOut::kFp32Residual);
  o.rmsnorm_fwd(x.ln2, x.ln2_rstd, x.residual2, w.ln2, N, C, eps);
  o.linear_fwd(x.fch, 2 * F, nullptr, nullptr, x.ln2, w.fc, nullptr, N, C, 2 * F, LinearOut::kBf16);
  o.swiglu_fwd(x.fch_act, x.fch, N, F);
  if (!through_output) return;
  o.linear_fwd(x.residual3, C, nullptr, x.residual2, x.fch_act, w.mlpproj, nullptr, N, F, C,
               LinearOut::kFp32Residual);
}

void Llama::run_forward16(int B) {
  auto& a = *acts16_;
  const int T = T_, C = d_.C, N = B * T;
  use_embeddings();
  ops_.encoder_fwd(a.encoded, io_.inputs, nullptr, param(wte_), nullptr, B, T, C);
  for (int l = 0; l < d_.L; ++l) {
    use_block(l);
    block_forward16(l, B, /*through_output=*/true);
  }
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  ops_.act16.rmsnorm_fwd(a.lnf, a.lnf_rstd, last, param(lnf_), N, C, static_cast<float>(d_.norm_eps));
}

void Llama::run_backward16(int B) {
  auto& a = *acts16_;
  const Ops::Act16& o = ops_.act16;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, KVH = d_.kv_heads(), HS = d_.head_size();
  const int QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  // a.dhidden (dhidden16_) holds d rmsnorm_f output; the head's gradient is already in its sums.
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  o.rmsnorm_bwd(a.dresidual, a.dresidual16, base_grad(lnf_), nullptr, a.dhidden, last, param(lnf_), a.lnf_rstd, N, C);
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    if (remat_ && l < d_.L - 1) block_forward16(l, B, /*through_output=*/false);  // see gpt2_act16.cpp
    auto& x = a.layers[l];
    const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
    const auto dw = layer_ptrs(layer_offsets_[l], [&](size_t o) { return base_grad(o); });
    // a.dresidual = d residual3; the MLP branch
    o.linear_bwd(a.dact, nullptr, dw.mlpproj, nullptr, a.dresidual16, C, x.fch_act, w.mlpproj, N, F, C);
    o.swiglu_bwd(a.dfch, x.fch, a.dact, N, F);
    o.linear_bwd(a.dln, nullptr, dw.fc, nullptr, a.dfch, 2 * F, x.ln2, w.fc, N, C, 2 * F);
    o.rmsnorm_bwd(a.dresidual, a.dresidual16, dw.ln2, a.dresidual, a.dln, x.residual2, w.ln2, x.ln2_rstd, N, C);
    // a.dresidual = d residual2; the attention branch
    o.linear_bwd(a.datty, nullptr, dw.proj, nullptr, a.dresidual16, C, x.atty, w.proj, N, A, C);
    o.attention_bwd(a.dqkv, a.datty, x.qkv, x.atty, x.lse, io_.seg(), B, T, NH, KVH, HS);
    o.rope_bwd(a.dqkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
    const uint16_t* dqkv_linear = a.dqkv;  // gradient at the qkv projection's output
    if (d_.qk_norm) {
      o.qk_rmsnorm_bwd(a.dqkv_raw, dw.qnorm, dw.knorm, a.dqkv, x.qkv_raw, w.qnorm, w.knorm, x.qk_rstd, N, NH, KVH,
                       HS);
      dqkv_linear = a.dqkv_raw;
    }
    o.linear_bwd(a.dln, nullptr, dw.qkvw, dw.qkvb, dqkv_linear, QKV, x.ln1, w.qkvw, N, C, QKV);
    o.rmsnorm_bwd(a.dresidual, a.dresidual16, dw.ln1, a.dresidual, a.dln, residual, w.ln1, x.ln1_rstd, N, C);
    layer_backward_done(l);  // block l's weight gradients are final
  }
  ops_.encoder_bwd(base_grad(wte_), nullptr, a.dresidual, io_.inputs, nullptr, io_.buckets, B, T, C);
}

}  // namespace sftdp::model
