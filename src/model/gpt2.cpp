// src/model/gpt2.cpp — GPT-2 blocks: forward and backward through the Ops table (llm.c's structure).
// Legend: B batch, T seq, C channels, F mlp dim, V vocab, NH heads, L layers, N = B*T.
// The passes stop at ln_f: Model runs the LM head (tied to wte) and the cross-entropy on the loss
// SUM between them (model.cpp) and hands backward d(loss sum)/d ln_f in scratch_btc; gradient sums
// accumulate (+=).
// The act16 path (bf16 activations on the bf16-GEMM table, sftdp/model.h's act16()): src/model/gpt2_act16.cpp.
// remat: every layer's activations but residual3 (its output, the next block's input) are one set
// of buffers all layers share. Forward overwrites them block by block; backward re-runs block l's
// forward up to fch_gelu (block_forward(l, B, false)) right before block l's backward, for every l
// but the last, whose activations are still there after forward. Recomputation writes only those
// shared buffers and scratch_btc, which is free then: the previous block's backward consumed it
// (its last layernorm_bwd reads it), and ln_f's backward consumed d ln_f before the first block.
// dresidual, which carries d residual3 of block l into its backward, is never touched.
// bf16 activations (sftdp/model.h): ln1, ln2 and fch_gelu, which only Linear GEMMs read, are one
// fp32 set all layers share; forward packs each into the layer's bf16 copy right after it is made
// (its GEMM reads the fp32 value and rounds it as the copy does), and backward unpacks the three
// before the layer's backward (or, with bf16_mirrors() and C, F multiples of 8, registers the copies
// as the GEMMs' inputs instead: sftdp/model.h). Nothing else reads them in between. atty stays fp32 per layer:
// attention's backward reads it too (D = Σ dO·O), and a rounded O would change that gradient.
#include <algorithm>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/ops.h"
#include "sftdp/check.h"
#include "model/gpt2_layer.h"
#include "sftdp/model.h"

namespace sftdp::model {

// Activations for max_B rows, in device memory. Per layer: what backward needs again (remat: all
// layers' pointers but residual3 alias layer 0's).
struct Gpt2::Acts {
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;  // (N,C) (N) (N)
    float *qkv, *atty, *lse;           // (N,3C) (N,C) (B,NH,T): attention's log-sum-exp, not its T×T
    float *residual2;                  // (N,C)
    float *ln2, *ln2_mean, *ln2_rstd;  // (N,C) (N) (N)
    float *fch, *fch_gelu;             // (N,F) (N,F)
    float *residual3;                  // (N,C)
    // bf16 activations only (else null): the layer's copies of ln1, ln2, fch_gelu
    uint16_t *ln1_16 = nullptr, *ln2_16 = nullptr, *fch_gelu_16 = nullptr;
  };
  std::vector<Layer> layers;
  float *encoded;                      // (N,C)
  float *lnf, *lnf_mean, *lnf_rstd;    // (N,C) (N) (N)
  float *scratch_btc;                  // (N,C) attproj / fcproj forward; activation grads backward
  float *dresidual;                    // (N,C)
  float *dbtf_a, *dbtf_b;              // (N,F)
  float* dqkv;                         // (N,3C)
};

Gpt2::Gpt2(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat, bool bf16_activations,
           const LoraSpec& lora, int zero_stage, bool bf16_weights)
    : Model(d, ops, max_B, T, gpt2_layout(d), remat, bf16_activations, lora, zero_stage, bf16_weights) {
  SFTDP_ASSERT(d.C % d.NH == 0, "emb_dim must be divisible by num_heads");
  static const char* const kLayerTensors[12] = {
      "ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
      "ln_2.weight", "ln_2.bias", "mlp.fc.weight",   "mlp.fc.bias",   "mlp.proj.weight",  "mlp.proj.bias"};
  layer_offsets_.resize(d.L);
  for (int l = 0; l < d.L; ++l)
    for (int k = 0; k < 12; ++k)
      layer_offsets_[l][k] = layout_.find("h." + std::to_string(l) + "." + kLayerTensors[k]).offset;
  wte_ = layout_.find("wte").offset, wpe_ = layout_.find("wpe").offset;
  lnf_w_ = layout_.find("ln_f.weight").offset, lnf_b_ = layout_.find("ln_f.bias").offset;
  head_ = wte_;  // LM head tied to wte, no bias
  if (act16_) {
    make_acts16();
    return;
  }
  acts_ = new Acts();
  auto& a = *acts_;
  const size_t N = size_t(max_B) * T, C = d.C, F = d.F, lse = size_t(max_B) * d.NH * T;
  auto f = [&](size_t n) { return alloc_acts(n); };
  a.layers.resize(d.L);
  // Everything but residual3: the part remat shares (L copies without it, one with it).
  const size_t shared = 7 * N * C + 4 * N + lse + 2 * N * F;
  const size_t gemm_only = 2 * N * C + N * F;  // ln1, ln2, fch_gelu: bf16 copies with bf16 activations
  for (int i = 0; i < d.L; ++i) {
    auto& l = a.layers[i];
    if (remat && i > 0) {
      l = a.layers[0];
    } else {
      const Acts::Layer* first = bf16_acts_ && i > 0 ? &a.layers[0] : nullptr;  // the shared fp32 set
      l.ln1 = first ? first->ln1 : f(N * C), l.ln1_mean = f(N), l.ln1_rstd = f(N);
      l.qkv = f(N * 3 * C), l.atty = f(N * C), l.lse = f(lse);
      l.residual2 = f(N * C);
      l.ln2 = first ? first->ln2 : f(N * C), l.ln2_mean = f(N), l.ln2_rstd = f(N);
      l.fch = f(N * F), l.fch_gelu = first ? first->fch_gelu : f(N * F);
      if (bf16_acts_) {
        l.ln1_16 = alloc_acts_bf16(N * C), l.ln2_16 = alloc_acts_bf16(N * C);
        l.fch_gelu_16 = alloc_acts_bf16(N * F);
      }
    }
    l.residual3 = f(N * C);
  }
  const size_t layers_after_first = size_t(std::max(d.L - 1, 0));
  remat_saved_bytes_ = bf16_acts_ ? layers_after_first * (shared - gemm_only) * sizeof(float) +
                                        size_t(d.L) * gemm_only * sizeof(uint16_t)
                                  : layers_after_first * shared * sizeof(float);
  a.encoded = f(N * C);
  a.lnf = f(N * C), a.lnf_mean = f(N), a.lnf_rstd = f(N);
  a.scratch_btc = f(N * C), a.dresidual = f(N * C);
  a.dbtf_a = f(N * F), a.dbtf_b = f(N * F);
  a.dqkv = f(N * 3 * C);
  hidden_ = a.lnf, dhidden_ = a.scratch_btc, head_ = wte_;  // LM head tied to wte, no bias
}

Gpt2::~Gpt2() {  // device memory: Model's
  delete acts_;
  destroy_acts16();
}

void Gpt2::block_forward(int l, int B, bool through_output) {
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, N = B * T;
  auto& x = a.layers[l];
  const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
  const auto w = layer_params(layer_offsets_[l], [&](size_t o) { return param(o); });
  const size_t NC = size_t(N) * C, NF = size_t(N) * F;
  o.layernorm_fwd(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
  if (x.ln1_16) o.bf16_pack(x.ln1_16, x.ln1, NC), mirror(kMirrorAct0, x.ln1, x.ln1_16, NC);
  o.matmul_fwd(x.qkv, x.ln1, w.qkvw, w.qkvb, N, C, 3 * C);
  lora_forward(l, LoraSite::kQkv, x.qkv, 3 * C, x.ln1, B);
  attention_forward(x.atty, x.lse, x.qkv, B, NH, NH, C / NH);
  o.matmul_fwd(a.scratch_btc, x.atty, w.projw, w.projb, N, C, C);
  lora_forward(l, LoraSite::kAttnProj, a.scratch_btc, C, x.atty, B);
  o.residual_fwd(x.residual2, residual, a.scratch_btc, NC);
  o.layernorm_fwd(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2w, w.ln2b, N, C);
  if (x.ln2_16) o.bf16_pack(x.ln2_16, x.ln2, NC), mirror(kMirrorAct1, x.ln2, x.ln2_16, NC);
  o.matmul_fwd(x.fch, x.ln2, w.fcw, w.fcb, N, C, F);
  lora_forward(l, LoraSite::kFc, x.fch, F, x.ln2, B);
  o.gelu_fwd(x.fch_gelu, x.fch, NF);
  if (x.fch_gelu_16) o.bf16_pack(x.fch_gelu_16, x.fch_gelu, NF), mirror(kMirrorAct2, x.fch_gelu, x.fch_gelu_16, NF);
  if (!through_output) return;
  o.matmul_fwd(a.scratch_btc, x.fch_gelu, w.fcprojw, w.fcprojb, N, F, C);
  lora_forward(l, LoraSite::kMlpProj, a.scratch_btc, C, x.fch_gelu, B);
  o.residual_fwd(x.residual3, x.residual2, a.scratch_btc, size_t(N) * C);
}

void Gpt2::run_forward(int B) {
  if (acts16_) return run_forward16(B);
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, N = B * T;
  use_embeddings();
  o.encoder_fwd(a.encoded, io_.inputs, io_.pos(), param(wte_), param(wpe_), B, T, C);
  for (int l = 0; l < d_.L; ++l) {
    use_block(l);
    block_forward(l, B, /*through_output=*/true);
  }
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  o.layernorm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, last, param(lnf_w_), param(lnf_b_), N, C);
}

void Gpt2::run_backward(int B) {
  if (acts16_) return run_backward16(B);
  auto& a = *acts_;
  const Ops& o = ops_;
  const int T = T_, C = d_.C, F = d_.F, NH = d_.NH, N = B * T;
  // base_grad: null under LoRA (the base is frozen, the kernels skip its gradients).
  // a.scratch_btc (dhidden_) holds d ln_f output; the head's share of dwte is already in its sums.
  o.zero(a.dresidual, size_t(N) * C * sizeof(float));
  const float* last = d_.L > 0 ? a.layers[d_.L - 1].residual3 : a.encoded;
  o.layernorm_bwd(a.dresidual, base_grad(lnf_w_), base_grad(lnf_b_), a.scratch_btc, last, param(lnf_w_), a.lnf_mean,
                  a.lnf_rstd, N, C);
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    if (remat_ && l < d_.L - 1) block_forward(l, B, /*through_output=*/false);  // see the file header
    auto& x = a.layers[l];
    if (x.ln1_16 && bf16_mirrors() && C % 8 == 0 && F % 8 == 0) {
      // bf16 activations: the GEMMs, their only readers, take this layer's copies in place (the
      // shared fp32 set keeps another layer's values: nothing else reads it)
      mirror(kMirrorAct0, x.ln1, x.ln1_16, size_t(N) * C), mirror(kMirrorAct1, x.ln2, x.ln2_16, size_t(N) * C);
      mirror(kMirrorAct2, x.fch_gelu, x.fch_gelu_16, size_t(N) * F);
    } else if (x.ln1_16) {  // this layer's GEMM inputs back into the shared fp32 set
      o.bf16_unpack(x.ln1, x.ln1_16, size_t(N) * C), o.bf16_unpack(x.ln2, x.ln2_16, size_t(N) * C);
      o.bf16_unpack(x.fch_gelu, x.fch_gelu_16, size_t(N) * F);
    }
    const float* residual = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    const auto w = layer_params(layer_offsets_[l], [&](size_t o) { return param(o); });
    const auto dw = layer_params(layer_offsets_[l], [&](size_t o) { return base_grad(o); });
    auto mut = [](const float* q) { return const_cast<float*>(q); };
    // a.dresidual = d residual3; the MLP branch
    o.matmul_bwd(a.dbtf_a, mut(dw.fcprojw), mut(dw.fcprojb), a.dresidual, x.fch_gelu, w.fcprojw, N, F, C);
    lora_backward(l, LoraSite::kMlpProj, a.dbtf_a, a.dresidual, C, x.fch_gelu, B);
    o.gelu_bwd(a.dbtf_b, x.fch, a.dbtf_a, size_t(N) * F);
    o.matmul_bwd(a.scratch_btc, mut(dw.fcw), mut(dw.fcb), a.dbtf_b, x.ln2, w.fcw, N, C, F);
    lora_backward(l, LoraSite::kFc, a.scratch_btc, a.dbtf_b, F, x.ln2, B);
    o.layernorm_bwd(a.dresidual, mut(dw.ln2w), mut(dw.ln2b), a.scratch_btc, x.residual2, w.ln2w,
                    x.ln2_mean, x.ln2_rstd, N, C);
    // a.dresidual = d residual2; the attention branch
    o.matmul_bwd(a.scratch_btc, mut(dw.projw), mut(dw.projb), a.dresidual, x.atty, w.projw, N, C, C);
    lora_backward(l, LoraSite::kAttnProj, a.scratch_btc, a.dresidual, C, x.atty, B);
    attention_backward(a.dqkv, a.scratch_btc, x.qkv, x.atty, x.lse, B, NH, NH, C / NH);
    o.matmul_bwd(a.scratch_btc, mut(dw.qkvw), mut(dw.qkvb), a.dqkv, x.ln1, w.qkvw, N, C, 3 * C);
    lora_backward(l, LoraSite::kQkv, a.scratch_btc, a.dqkv, 3 * C, x.ln1, B);
    o.layernorm_bwd(a.dresidual, mut(dw.ln1w), mut(dw.ln1b), a.scratch_btc, residual, w.ln1w,
                    x.ln1_mean, x.ln1_rstd, N, C);
    layer_backward_done(l);  // block l's weight gradients are final
  }
  if (!lora()) o.encoder_bwd(base_grad(wte_), base_grad(wpe_), a.dresidual, io_.inputs, io_.pos(), io_.buckets, B, T, C);
}

}  // namespace sftdp::model
