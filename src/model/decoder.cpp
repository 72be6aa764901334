// src/model/decoder.cpp — the one transformer block (decoder.h) on the fp32 and bf16-GEMM tables, every family
// through its traits (block_traits.h) and the Ops table. Legend: B batch, T seq, C channels, F mlp dim (FW = mlp.fc's
// rows: F, or 2F for SwiGLU's gate | up), V vocab, NH query heads, KVH k/v heads, HS head size, QKV = (NH + 2·KVH)·HS
// fused q|k|v width, A = NH·HS, L layers, N = B*T. One block, as Hugging Face's GPT2Block / LlamaDecoderLayer:
//   h   = x + proj(attn(rope?(qk_norm?(qkv(norm_1(x))))))                  (every Linear with its bias, if any)
//   out = h + mlp.proj(act(mlp.fc(norm_2(h))))      act: gelu, or silu(gate)·up
// norm: LayerNorm (GPT-2) or RMSNorm; positions: learned (wpe, added by the encoder) or RoPE from the batch's
// /positions (packed segments restart at 0) or 0..T-1; attention stays inside a segment.
// remat: every layer's activations but residual3 (its output, the next block's input) are one set of buffers all
// layers share. Forward overwrites them block by block; backward re-runs block l's forward up to fch_act
// (block_forward(l, B, false)) right before block l's backward, for every l but the last, whose activations are
// still there after forward. Recomputation writes only those shared buffers and scratch_btc, which is free then:
// the previous block's backward consumed it (its last norm backward reads it), and the final norm's backward
// consumed d hidden before the first block. dresidual, which carries d residual3 of block l into its backward, is
// never touched.
// bf16 activations (sftdp/model.h): ln1, ln2 and fch_act, which only Linear GEMMs read, are one fp32 set all layers
// share; forward packs each into the layer's bf16 copy right after it is made (its GEMM reads the fp32 value and
// rounds it as the copy does), and backward unpacks the three before the layer's backward (or, with bf16_mirrors()
// and C, F multiples of 8, registers the copies as the GEMMs' inputs instead: sftdp/model.h). Nothing else reads
// them in between. atty stays fp32 per layer: attention's backward reads it too (D = Σ dO·O), and a rounded O would
// change that gradient.
#include "model/decoder.h"

#include <algorithm>

#include "kernels/bf16.h"
#include "kernels/ops.h"
#include "sftdp/check.h"

namespace sftdp::model {

// Activations for max_B rows, in device memory. Per layer: what backward needs again (remat: all layers' pointers
// but residual3 alias layer 0's). Null: what the family has not.
struct Decoder::Acts {
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;  // (N,C) (N: LayerNorm) (N)
    float *qkv_raw, *qk_rstd;          // (N,QKV) (N,NH+KVH): before the q/k norm (qk_norm only)
    float* qkv;                        // (N,QKV) as attention reads it: normed (qk_norm), rotated (RoPE)
    float *atty, *lse;                 // (N,A) (B,NH,T): attention's log-sum-exp, not its T×T
    float* residual2;                  // (N,C)
    float *ln2, *ln2_mean, *ln2_rstd;  // (N,C) (N: LayerNorm) (N)
    float *fch, *fch_act;              // (N,FW) (N,F): the MLP's hidden layer before and after its activation
    float* residual3;                  // (N,C)
    // bf16 activations only (else null): the layer's copies of ln1, ln2, fch_act
    uint16_t *ln1_16 = nullptr, *ln2_16 = nullptr, *fch_act_16 = nullptr;
  };
  std::vector<Layer> layers;
  float* encoded;                    // (N,C)
  float *lnf, *lnf_mean, *lnf_rstd;  // (N,C) (N: LayerNorm) (N)
  float* scratch_btc;                // (N,C) projections forward; activation grads backward
  float* scratch_bta;                // (N,A) d atty: scratch_btc itself when A = C
  float* dresidual;                  // (N,C)
  float *dfch, *dact;                // (N,FW) (N,F)
  float *dqkv, *dqkv_raw;            // (N,QKV) (N,QKV: qk_norm only)
};

Decoder::Decoder(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat, bool bf16_activations,
                 const LoraSpec& lora, int zero_stage, bool bf16_weights)
    : Model(d, ops, max_B, T, param_layout(d), remat, bf16_activations, lora, zero_stage, bf16_weights),
      traits_(block_traits(d)) {
  SFTDP_ASSERT(d.NH % d.kv_heads() == 0 && d.attn_dim() > 0, "bad head configuration");
  SFTDP_ASSERT(traits_.positions != Positions::kRope || d.head_size() % 2 == 0, "RoPE needs an even head size");
  layer_offsets_ = layer_offsets(traits_, layout_, d.L);
  wte_ = layout_.find("wte").offset;
  if (traits_.positions == Positions::kLearned) wpe_ = layout_.find("wpe").offset;
  lnf_w_ = layout_.find("ln_f.weight").offset;
  if (traits_.norm == Norm::kLayerNorm) lnf_b_ = layout_.find("ln_f.bias").offset;
  head_ = traits_.tied_head ? wte_ : layout_.find("lm_head.weight").offset;
  if (traits_.positions == Positions::kRope) {
    const auto inv_freq = rope_inv_freq(d);
    inv_freq_ = alloc_floats(inv_freq.size());  // a constant table, not an activation
    ops_.to_device(inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float));
  }
  if (act_storage_ == ActivationStorage::kBf16) {
    make_acts16();
    return;
  }

  acts_ = new Acts();
  auto& a = *acts_;
  const bool ln = traits_.norm == Norm::kLayerNorm, qkn = traits_.qk_norm;
  const bool gemm_inputs16 = act_storage_ == ActivationStorage::kBf16GemmInputs;
  const size_t N = size_t(max_B) * T, C = d.C, F = d.F, FW = traits_.mlp_width(d.F), QKV = d.qkv_dim();
  const size_t A = d.attn_dim(), lse = size_t(max_B) * d.NH * T, heads = size_t(d.NH) + d.kv_heads();
  size_t counted = 0;  // floats allocated by f (the remat-shared part is what layer 0 takes but residual3)
  auto f = [&](size_t n) { return counted += n, alloc_acts(n); };
  a.layers.resize(d.L);
  size_t shared = 0;
  const size_t gemm_only = 2 * N * C + N * F;  // ln1, ln2, fch_act: bf16 copies with bf16 activations
  for (int i = 0; i < d.L; ++i) {
    auto& l = a.layers[i];
    if (remat && i > 0) {
      l = a.layers[0];
    } else {
      const size_t before = counted;
      const Acts::Layer* first = gemm_inputs16 && i > 0 ? &a.layers[0] : nullptr;  // the shared fp32 set
      l.ln1 = first ? first->ln1 : f(N * C), l.ln1_mean = ln ? f(N) : nullptr, l.ln1_rstd = f(N);
      l.qkv_raw = qkn ? f(N * QKV) : nullptr;
      l.qk_rstd = qkn ? f(N * heads) : nullptr;
      l.qkv = f(N * QKV);
      l.atty = f(N * A), l.lse = f(lse);
      l.residual2 = f(N * C);
      l.ln2 = first ? first->ln2 : f(N * C), l.ln2_mean = ln ? f(N) : nullptr, l.ln2_rstd = f(N);
      l.fch = f(N * FW), l.fch_act = first ? first->fch_act : f(N * F);
      if (gemm_inputs16) {
        l.ln1_16 = alloc_acts_bf16(N * C), l.ln2_16 = alloc_acts_bf16(N * C);
        l.fch_act_16 = alloc_acts_bf16(N * F);
      }
      if (i == 0) shared = counted - before;
    }
    l.residual3 = f(N * C);
  }
  const size_t layers_after_first = size_t(std::max(d.L - 1, 0));
  remat_saved_bytes_ = gemm_inputs16 ? layers_after_first * (shared - gemm_only) * sizeof(float) +
                                        size_t(d.L) * gemm_only * sizeof(uint16_t)
                                  : layers_after_first * shared * sizeof(float);
  a.encoded = f(N * C);
  a.lnf = f(N * C), a.lnf_mean = ln ? f(N) : nullptr, a.lnf_rstd = f(N);
  a.scratch_btc = f(N * C), a.scratch_bta = A == C ? a.scratch_btc : f(N * A), a.dresidual = f(N * C);
  a.dact = f(N * F), a.dfch = f(N * FW);
  a.dqkv = f(N * QKV), a.dqkv_raw = qkn ? f(N * QKV) : nullptr;
  hidden_ = a.lnf, dhidden_ = a.scratch_btc;
}

Decoder::~Decoder() {  // device memory: Model's
  delete acts_;
  destroy_acts16();
}

void Decoder::norm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                       int N) const {
  if (traits_.norm == Norm::kLayerNorm) return ops_.layernorm_fwd(out, mean, rstd, x, w, b, N, d_.C);
  ops_.rmsnorm_fwd(out, rstd, x, w, N, d_.C, static_cast<float>(d_.norm_eps));
}

void Decoder::norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                       const float* mean, const float* rstd, int N) const {
  if (traits_.norm == Norm::kLayerNorm) return ops_.layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N, d_.C);
  ops_.rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, d_.C);
}

void Decoder::block_forward(int l, int B, bool through_output) {
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, F = d_.F, FW = traits_.mlp_width(d_.F), NH = d_.NH, KVH = d_.kv_heads();
  const int HS = d_.head_size(), QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  const size_t NC = size_t(N) * C, NF = size_t(N) * F;
  auto& x = a.layers[l];
  const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
  const auto w = layer_ptrs(layer_offsets_[l], [&](size_t o) { return param(o); });
  norm_fwd(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1w, w.ln1b, N);
  if (x.ln1_16) o.bf16_pack(x.ln1_16, x.ln1, NC), mirror(kMirrorAct0, x.ln1, x.ln1_16, NC);
  float* qkv_linear = traits_.qk_norm ? x.qkv_raw : x.qkv;  // the projection's output
  o.matmul_fwd(qkv_linear, x.ln1, w.qkvw, w.qkvb, N, C, QKV);
  lora_forward(l, LoraSite::kQkv, qkv_linear, QKV, x.ln1, B);
  if (traits_.qk_norm)
    o.qk_rmsnorm_fwd(x.qkv, x.qk_rstd, x.qkv_raw, w.qnorm, w.knorm, N, NH, KVH, HS, static_cast<float>(d_.norm_eps));
  if (traits_.positions == Positions::kRope) o.rope_fwd(x.qkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
  attention_forward(x.atty, x.lse, x.qkv, B, NH, KVH, HS);
  o.matmul_fwd(a.scratch_btc, x.atty, w.projw, w.projb, N, A, C);
  lora_forward(l, LoraSite::kAttnProj, a.scratch_btc, C, x.atty, B);
  o.residual_fwd(x.residual2, residual, a.scratch_btc, NC);
  norm_fwd(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2w, w.ln2b, N);
  if (x.ln2_16) o.bf16_pack(x.ln2_16, x.ln2, NC), mirror(kMirrorAct1, x.ln2, x.ln2_16, NC);
  o.matmul_fwd(x.fch, x.ln2, w.fcw, w.fcb, N, C, FW);
  lora_forward(l, LoraSite::kFc, x.fch, FW, x.ln2, B);
  if (traits_.mlp == Mlp::kGelu) o.gelu_fwd(x.fch_act, x.fch, NF);
  else o.swiglu_fwd(x.fch_act, x.fch, N, F);
  if (x.fch_act_16) o.bf16_pack(x.fch_act_16, x.fch_act, NF), mirror(kMirrorAct2, x.fch_act, x.fch_act_16, NF);
  if (!through_output) return;
  o.matmul_fwd(a.scratch_btc, x.fch_act, w.mlpprojw, w.mlpprojb, N, F, C);
  lora_forward(l, LoraSite::kMlpProj, a.scratch_btc, C, x.fch_act, B);
  o.residual_fwd(x.residual3, x.residual2, a.scratch_btc, NC);
}

void Decoder::run_forward(int B) {
  if (act_storage_ == ActivationStorage::kBf16) return run_forward16(B);
  auto& a = *acts_;
  const int T = T_, C = d_.C, N = B * T;
  use_embeddings();
  ops_.encoder_fwd(a.encoded, io_.inputs, embedding_positions(), param(wte_), wpe(), B, T, C);
  for (int l = 0; l < d_.L; ++l) {
    use_block(l);
    block_forward(l, B, /*through_output=*/true);
  }
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  norm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, last, param(lnf_w_), lnf_b_ == kAbsent ? nullptr : param(lnf_b_), N);
}

void Decoder::run_backward(int B) {
  if (act_storage_ == ActivationStorage::kBf16) return run_backward16(B);
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, F = d_.F, FW = traits_.mlp_width(d_.F), NH = d_.NH, KVH = d_.kv_heads();
  const int HS = d_.head_size(), QKV = d_.qkv_dim(), A = d_.attn_dim(), N = B * T;
  // base_grad: null under LoRA (the base is frozen, the kernels skip its gradients).
  // a.scratch_btc (dhidden_) holds d(final norm output); the head's gradient is already in its sums (tied: wte's,
  // where the embedding's gradient lands as well).
  o.zero(a.dresidual, size_t(N) * C * sizeof(float));
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  norm_bwd(a.dresidual, base_grad(lnf_w_), lnf_b_ == kAbsent ? nullptr : base_grad(lnf_b_), a.scratch_btc, last,
           param(lnf_w_), a.lnf_mean, a.lnf_rstd, N);
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    if (remat_ && l < d_.L - 1) block_forward(l, B, /*through_output=*/false);  // see the file header
    auto& x = a.layers[l];
    if (x.ln1_16 && bf16_mirrors() && C % 8 == 0 && F % 8 == 0) {
      // bf16 activations: the GEMMs, their only readers, take this layer's copies in place (the shared fp32 set
      // keeps another layer's values: nothing else reads it)
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
    o.matmul_bwd(a.dact, dw.mlpprojw, dw.mlpprojb, a.dresidual, x.fch_act, w.mlpprojw, N, F, C);
    lora_backward(l, LoraSite::kMlpProj, a.dact, a.dresidual, C, x.fch_act, B);
    if (traits_.mlp == Mlp::kGelu) o.gelu_bwd(a.dfch, x.fch, a.dact, size_t(N) * F);
    else o.swiglu_bwd(a.dfch, x.fch, a.dact, N, F);
    o.matmul_bwd(a.scratch_btc, dw.fcw, dw.fcb, a.dfch, x.ln2, w.fcw, N, C, FW);
    lora_backward(l, LoraSite::kFc, a.scratch_btc, a.dfch, FW, x.ln2, B);
    norm_bwd(a.dresidual, dw.ln2w, dw.ln2b, a.scratch_btc, x.residual2, w.ln2w, x.ln2_mean, x.ln2_rstd, N);
    // a.dresidual = d residual2; the attention branch
    o.matmul_bwd(a.scratch_bta, dw.projw, dw.projb, a.dresidual, x.atty, w.projw, N, A, C);
    lora_backward(l, LoraSite::kAttnProj, a.scratch_bta, a.dresidual, C, x.atty, B);
    attention_backward(a.dqkv, a.scratch_bta, x.qkv, x.atty, x.lse, B, NH, KVH, HS);
    if (traits_.positions == Positions::kRope) o.rope_bwd(a.dqkv, io_.pos(), inv_freq_, B, T, NH, KVH, HS);
    const float* dqkv_linear = a.dqkv;  // gradient at the qkv projection's output
    if (traits_.qk_norm) {
      o.qk_rmsnorm_bwd(a.dqkv_raw, dw.qnorm, dw.knorm, a.dqkv, x.qkv_raw, w.qnorm, w.knorm, x.qk_rstd, N, NH, KVH,
                       HS);
      dqkv_linear = a.dqkv_raw;
    }
    o.matmul_bwd(a.scratch_btc, dw.qkvw, dw.qkvb, dqkv_linear, x.ln1, w.qkvw, N, C, QKV);
    lora_backward(l, LoraSite::kQkv, a.scratch_btc, dqkv_linear, QKV, x.ln1, B);
    norm_bwd(a.dresidual, dw.ln1w, dw.ln1b, a.scratch_btc, residual, w.ln1w, x.ln1_mean, x.ln1_rstd, N);
    layer_backward_done(l);  // block l's weight gradients are final
  }
  if (!lora()) o.encoder_bwd(base_grad(wte_), dwpe(), a.dresidual, io_.inputs, embedding_positions(), io_.buckets, B,
                             T, C);
}

}  // namespace sftdp::model
