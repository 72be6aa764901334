// src/model/llama.cpp — Llama-family blocks (Llama 2/3, Mistral-class, SmolLM2, Qwen2, Qwen3)
// through the Ops table, on the same loss-SUM contract as GPT-2 (model.cpp does the step).
// Legend: B batch, T seq, C channels, F mlp dim, V vocab, NH query heads, KVH k/v heads,
// HS head size, QKV = (NH + 2·KVH)·HS fused q|k|v width, A = NH·HS, L layers, N = B*T.
// One block, as Hugging Face's LlamaDecoderLayer:
//   h   = x + o_proj(attn(rope(qk_norm?(qkv(rmsnorm_1(x)) [+ qkv bias]))))
//   out = h + down(silu(gate(rmsnorm_2(h))) · up(rmsnorm_2(h)))
// then rmsnorm_f; the LM head (wte when tied) and the cross-entropy are Model's (model.cpp), which
// hands backward d(loss sum)/d rmsnorm_f output in scratch_btc. RoPE positions come from the batch's
// /positions (packed segments restart at 0) or 0..T-1; attention stays inside a segment.
// remat: as GPT-2's (gpt2.cpp): all layers but their residual3 share one set of activation buffers,
// and backward re-runs block l's forward up to fch_act before block l's backward (l < L-1). That
// writes the shared buffers and scratch_btc only; scratch_btc is free then (the previous block's
// last rmsnorm_bwd, or rmsnorm_f's backward, consumed it) and dresidual is never touched.
// bf16 activations: as GPT-2's (gpt2.cpp), for ln1, ln2 and fch_act (atty stays fp32: attention's
// backward reads it). The act16 path (sftdp/model.h's act16()): src/model/llama_act16.cpp.
#include <algorithm>
#include <climits>

#include "kernels/bf16.h"
#include "kernels/ops.h"
#include "model/llama_layer.h"
#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

// Activations for max_B rows, in device memory. Per layer: what backward needs again (remat: all
// layers' pointers but residual3 alias layer 0's).
struct Llama::Acts {
  struct Layer {
    float *ln1, *ln1_rstd;         // (N,C) (N)
    float *qkv_raw, *qk_rstd;      // (N,QKV) (N,NH+KVH): before the q/k norm (Qwen3 only)
    float *qkv;                    // (N,QKV) as attention reads it: normed (Qwen3), rotated
    float *atty, *lse;             // (N,A) (B,NH,T): attention's log-sum-exp, not its T×T
    float *residual2;              // (N,C)
    float *ln2, *ln2_rstd;         // (N,C) (N)
    float *fch, *fch_act;          // (N,2F) (N,F)
    float *residual3;              // (N,C)
    // bf16 activations only (else null): the layer's copies of ln1, ln2, fch_act
    uint16_t *ln1_16 = nullptr, *ln2_16 = nullptr, *fch_act_16 = nullptr;
  };
  std::vector<Layer> layers;
  float *encoded;                  // (N,C)
  float *lnf, *lnf_rstd;           // (N,C) (N)
  float *scratch_btc;              // (N,C) projections forward; activation grads backward
  float *scratch_bta;              // (N,A) d atty
  float *dresidual;                // (N,C)
  float *dfch, *dact;              // (N,2F) (N,F)
  float *dqkv, *dqkv_raw;          // (N,QKV) (N,QKV)
};

Llama::Llama(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat, bool bf16_activations,
             const LoraSpec& lora, int zero_stage, bool bf16_weights)
    : Model(d, ops, max_B, T, llama_layout(d), remat, bf16_activations, lora, zero_stage, bf16_weights) {
  SFTDP_ASSERT(d.block == config::Block::kLlama, "Llama model built from GPT-2 dims");
  SFTDP_ASSERT(d.NH % d.kv_heads() == 0 && d.head_size() % 2 == 0, "bad head configuration");
  auto offset = [&](const std::string& name, bool present) {
    return present ? layout_.find(name).offset : kAbsent;
  };
  layer_offsets_.resize(d.L);
  for (int l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto& o = layer_offsets_[l];
    o[kLn1] = offset(h + "ln_1.weight", true);
    o[kQkvW] = offset(h + "attn.qkv.weight", true);
    o[kQkvB] = offset(h + "attn.qkv.bias", d.qkv_bias);
    o[kQNorm] = offset(h + "attn.q_norm.weight", d.qk_norm);
    o[kKNorm] = offset(h + "attn.k_norm.weight", d.qk_norm);
    o[kProj] = offset(h + "attn.proj.weight", true);
    o[kLn2] = offset(h + "ln_2.weight", true);
    o[kFc] = offset(h + "mlp.fc.weight", true);
    o[kMlpProj] = offset(h + "mlp.proj.weight", true);
  }
  wte_ = layout_.find("wte").offset;
  lnf_ = layout_.find("ln_f.weight").offset;
  head_ = d.tied ? wte_ : layout_.find("lm_head.weight").offset;
  const auto inv_freq = rope_inv_freq(d);
  inv_freq_ = alloc_floats(inv_freq.size());  // a constant table, not an activation
  ops_.to_device(inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float));
  if (act16_) {
    make_acts16();
    return;
  }

  acts_ = new Acts();
  auto& a = *acts_;
  const size_t N = size_t(max_B) * T, C = d.C, F = d.F, QKV = d.qkv_dim(), A = d.attn_dim();
  const size_t lse = size_t(max_B) * d.NH * T, heads = size_t(d.NH) + d.kv_heads();
  auto f = [&](size_t n) { return alloc_acts(n); };
  a.layers.resize(d.L);
  // Everything but residual3: the part remat shares (L copies without it, one with it).
  const size_t shared = 3 * N * C + 2 * N + (d.qk_norm ? N * QKV + N * heads : 0) + N * QKV + N * A + lse + 3 * N * F;
  const size_t gemm_only = 2 * N * C + N * F;  // ln1, ln2, fch_act
  for (int i = 0; i < d.L; ++i) {
    auto& l = a.layers[i];
    if (remat && i > 0) {
      l = a.layers[0];
    } else {
      const Acts::Layer* first = bf16_acts_ && i > 0 ? &a.layers[0] : nullptr;  // the shared fp32 set
      l.ln1 = first ? first->ln1 : f(N * C), l.ln1_rstd = f(N);
      l.qkv_raw = d.qk_norm ? f(N * QKV) : nullptr;
      l.qk_rstd = d.qk_norm ? f(N * heads) : nullptr;
      l.qkv = f(N * QKV);
      l.atty = f(N * A), l.lse = f(lse);
      l.residual2 = f(N * C);
      l.ln2 = first ? first->ln2 : f(N * C), l.ln2_rstd = f(N);
      l.fch = f(N * 2 * F), l.fch_act = first ? first->fch_act : f(N * F);
      if (bf16_acts_) {
        l.ln1_16 = alloc_acts_bf16(N * C), l.ln2_16 = alloc_acts_bf16(N * C);
        l.fch_act_16 = alloc_acts_bf16(N * F);
      }
    }
    l.residual3 = f(N * C);
  }
  const size_t layers_after_first = size_t(std::max(d.L - 1, 0));
  remat_saved_bytes_ = bf16_acts_ ? layers_after_first * (shared - gemm_only) * sizeof(float) +
                                        size_t(d.L) * gemm_only * sizeof(uint16_t)
                                  : layers_after_first * shared * sizeof(float);
  a.encoded = f(N * C);
  a.lnf = f(N * C), a.lnf_rstd = f(N);
  a.scratch_btc = f(N * C), a.scratch_bta = f(N * A), a.dresidual = f(N * C);
  a.dfch = f(N * 2 * F), a.dact = f(N * F);
  a.dqkv = f(N * QKV), a.dqkv_raw = d.qk_norm ? f(N * QKV) : nullptr;
  hidden_ = a.lnf, dhidden_ = a.scratch_btc;
}

Llama::~Llama() {  // device memory: Model's
  delete acts_;
  destroy_acts16();
}

void Llama::block_forward(int l, int B, bool through_output) {
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, KVH = d_.kv_heads(), HS = d_.head_size();
  const int QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  const float eps = static_cast<float>(d_.norm_eps);
  auto& x = a.layers[l];
  const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
  const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
  o.rmsnorm_fwd(x.ln1, x.ln1_rstd, residual, w.ln1, N, C, eps);
  if (x.ln1_16) o.bf16_pack(x.ln1_16, x.ln1, size_t(N) * C), mirror(kMirrorAct0, x.ln1, x.ln1_16, size_t(N) * C);
  if (d_.qk_norm) {
    o.matmul_fwd(x.qkv_raw, x.ln1, w.qkvw, w.qkvb, N, C, QKV);
    lora_forward(l, LoraSite::kQkv, x.qkv_raw, QKV, x.ln1, B);
    o.qk_rmsnorm_fwd(x.qkv, x.qk_rstd, x.qkv_raw, w.qnorm, w.knorm, N, NH, KVH, HS, eps);
  } else {
    o.matmul_fwd(x.qkv, x.ln1, w.qkvw, w.qkvb, N, C, QKV);
    lora_forward(l, LoraSite::kQkv, x.qkv, QKV, x.ln1, B);
  }
  o.rope_fwd(x.qkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
  attention_forward(x.atty, x.lse, x.qkv, B, NH, KVH, HS);
  o.matmul_fwd(a.scratch_btc, x.atty, w.proj, nullptr, N, A, C);
  lora_forward(l, LoraSite::kAttnProj, a.scratch_btc, C, x.atty, B);
  o.residual_fwd(x.residual2, residual, a.scratch_btc, size_t(N) * C);
  o.rmsnorm_fwd(x.ln2, x.ln2_rstd, x.residual2, w.ln2, N, C, eps);
  if (x.ln2_16) o.bf16_pack(x.ln2_16, x.ln2, size_t(N) * C), mirror(kMirrorAct1, x.ln2, x.ln2_16, size_t(N) * C);
  o.matmul_fwd(x.fch, x.ln2, w.fc, nullptr, N, C, 2 * F);
  lora_forward(l, LoraSite::kFc, x.fch, 2 * F, x.ln2, B);
  o.swiglu_fwd(x.fch_act, x.fch, N, F);
  if (x.fch_act_16)
    o.bf16_pack(x.fch_act_16, x.fch_act, size_t(N) * F), mirror(kMirrorAct2, x.fch_act, x.fch_act_16, size_t(N) * F);
  if (!through_output) return;
  o.matmul_fwd(a.scratch_btc, x.fch_act, w.mlpproj, nullptr, N, F, C);
  lora_forward(l, LoraSite::kMlpProj, a.scratch_btc, C, x.fch_act, B);
  o.residual_fwd(x.residual3, x.residual2, a.scratch_btc, size_t(N) * C);
}

void Llama::run_forward(int B) {
  if (acts16_) return run_forward16(B);
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, N = B * T;
  use_embeddings();
  o.encoder_fwd(a.encoded, io_.inputs, nullptr, param(wte_), nullptr, B, T, C);
  for (int l = 0; l < d_.L; ++l) {
    use_block(l);
    block_forward(l, B, /*through_output=*/true);
  }
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  o.rmsnorm_fwd(a.lnf, a.lnf_rstd, last, param(lnf_), N, C, static_cast<float>(d_.norm_eps));
}

void Llama::run_backward(int B) {
  if (acts16_) return run_backward16(B);
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, KVH = d_.kv_heads(), HS = d_.head_size();
  const int QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  // base_grad: null under LoRA (the base is frozen, the kernels skip its gradients).
  // a.scratch_btc (dhidden_) holds d rmsnorm_f output; the head's gradient is already in its sums
  // (tied: wte's, where the embedding's gradient lands as well).
  o.zero(a.dresidual, size_t(N) * C * sizeof(float));
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  o.rmsnorm_bwd(a.dresidual, base_grad(lnf_), a.scratch_btc, last, param(lnf_), a.lnf_rstd, N, C);
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    if (remat_ && l < d_.L - 1) block_forward(l, B, /*through_output=*/false);  // see the file header
    auto& x = a.layers[l];
    if (x.ln1_16 && bf16_mirrors() && C % 8 == 0 && F % 8 == 0) {  // as GPT-2's (gpt2.cpp)
      mirror(kMirrorAct0, x.ln1, x.ln1_16, size_t(N) * C), mirror(kMirrorAct1, x.ln2, x.ln2_16, size_t(N) * C);
      mirror(kMirrorAct2, x.fch_act, x.fch_act_16, size_t(N) * F);
    } else if (x.ln1_16) {  // this layer's GEMM inputs back into the shared fp32 set
      o.bf16_unpack(x.ln1, x.ln1_16, size_t(N) * C), o.bf16_unpack(x.ln2, x.ln2_16, size_t(N) * C);
      o.bf16_unpack(x.fch_act, x.fch_act_16, size_t(N) * F);
    }
    const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
    const auto dw = layer_ptrs(layer_offsets_[l], [&](size_t o) { return base_grad(o); });
    // a.dresidual = d residual3; the MLP branch
    o.matmul_bwd(a.dact, dw.mlpproj, nullptr, a.dresidual, x.fch_act, w.mlpproj, N, F, C);
    lora_backward(l, LoraSite::kMlpProj, a.dact, a.dresidual, C, x.fch_act, B);
    o.swiglu_bwd(a.dfch, x.fch, a.dact, N, F);
    o.matmul_bwd(a.scratch_btc, dw.fc, nullptr, a.dfch, x.ln2, w.fc, N, C, 2 * F);
    lora_backward(l, LoraSite::kFc, a.scratch_btc, a.dfch, 2 * F, x.ln2, B);
    o.rmsnorm_bwd(a.dresidual, dw.ln2, a.scratch_btc, x.residual2, w.ln2, x.ln2_rstd, N, C);
    // a.dresidual = d residual2; the attention branch
    o.matmul_bwd(a.scratch_bta, dw.proj, nullptr, a.dresidual, x.atty, w.proj, N, A, C);
    lora_backward(l, LoraSite::kAttnProj, a.scratch_bta, a.dresidual, C, x.atty, B);
    attention_backward(a.dqkv, a.scratch_bta, x.qkv, x.atty, x.lse, B, NH, KVH, HS);
    o.rope_bwd(a.dqkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
    const float* dqkv_linear = a.dqkv;  // gradient at the qkv projection's output
    if (d_.qk_norm) {
      o.qk_rmsnorm_bwd(a.dqkv_raw, dw.qnorm, dw.knorm, a.dqkv, x.qkv_raw, w.qnorm, w.knorm, x.qk_rstd, N, NH,
                       KVH, HS);
      dqkv_linear = a.dqkv_raw;
    }
    o.matmul_bwd(a.scratch_btc, dw.qkvw, dw.qkvb, dqkv_linear, x.ln1, w.qkvw, N, C, QKV);
    lora_backward(l, LoraSite::kQkv, a.scratch_btc, dqkv_linear, QKV, x.ln1, B);
    o.rmsnorm_bwd(a.dresidual, dw.ln1, a.scratch_btc, residual, w.ln1, x.ln1_rstd, N, C);
    layer_backward_done(l);  // block l's weight gradients are final
  }
  if (!lora()) o.encoder_bwd(base_grad(wte_), nullptr, a.dresidual, io_.inputs, nullptr, io_.buckets, B, T, C);
}

}  // namespace sftdp::model
