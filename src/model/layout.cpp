// src/model/layout.cpp — parameter names, shapes and offsets of every decoder family (SPEC §5), from its traits,
// and their seeded initialisation. Memory order puts every >= 2-D weight first, so AdamW's weight
// decay is one contiguous range [0, n_decay).
#include <cmath>
#include <cstdint>

#include "model/block_traits.h"
#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  die_internal("sftdp", "ParamLayout::find", "no parameter named " + name, __FILE__, __LINE__);
}

namespace {

struct LayoutBuilder {
  ParamLayout lay;
  void add(std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (auto s : p.shape) p.numel *= static_cast<size_t>(s);
    p.decay = p.shape.size() >= 2;
    lay.tensors.push_back(std::move(p));
  }
  // Offsets: decayed (>= 2-D) tensors first, each group in SPEC order. 16-float alignment keeps
  // every tensor 64-byte aligned for vector loads.
  ParamLayout finish() {
    size_t off = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& t : lay.tensors) {
        if (t.decay != (pass == 0)) continue;
        t.offset = off;
        off += (t.numel + 15) / 16 * 16;
      }
      if (pass == 0) lay.n_decay = off;
    }
    lay.total = off;
    return std::move(lay);
  }
};

}  // namespace

namespace {

// The family's tensors from its traits (block_traits.h), in SPEC §5 order: wte, wpe (learned positions), each
// block's tensors in LayerTensor order (those the family has), ln_f (weight, and bias with LayerNorm), lm_head
// (untied).
ParamLayout decoder_layout(const config::ModelDims& d) {
  const BlockTraits tr = block_traits(d);
  const int64_t C = d.C, F = d.F, V = d.V, HS = d.head_size(), QKV = d.qkv_dim(), A = d.attn_dim();
  const int64_t FW = tr.mlp_width(d.F);
  const std::vector<int64_t> shapes[kLayerTensors] = {{C},      {C}, {QKV, C}, {QKV}, {HS}, {HS}, {C, A},
                                                      {C},      {C}, {C},      {FW, C}, {FW}, {C, F}, {C}};
  LayoutBuilder b;
  b.add("wte", {V, C});
  if (tr.positions == Positions::kLearned) b.add("wpe", {int64_t(d.maxT), C});
  for (int l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (int k = 0; k < kLayerTensors; ++k)
      if (block_has(tr, LayerTensor(k))) b.add(h + layer_tensor_name(LayerTensor(k)), shapes[k]);
  }
  b.add("ln_f.weight", {C});
  if (tr.norm == Norm::kLayerNorm) b.add("ln_f.bias", {C});
  if (!tr.tied_head) b.add("lm_head.weight", {V, C});
  return b.finish();
}

}  // namespace

ParamLayout gpt2_layout(const config::ModelDims& d) {
  SFTDP_ASSERT(d.block == config::Block::kGpt2, "gpt2_layout of another family");
  return decoder_layout(d);
}

ParamLayout llama_layout(const config::ModelDims& d) {
  SFTDP_ASSERT(d.block == config::Block::kLlama, "llama_layout of another family");
  return decoder_layout(d);
}

ParamLayout param_layout(const config::ModelDims& d) { return decoder_layout(d); }

namespace {
// splitmix64: a small, fully specified generator, so initial weights are the same everywhere.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box–Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_params(std::vector<float>& params, const ParamLayout& layout, const config::ModelDims& d,
                 uint64_t seed) {
  params.assign(layout.total, 0.0f);
  const double std_w = 0.02, std_proj = 0.02 / std::sqrt(2.0 * d.L);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const auto& t = layout.tensors[i];
    float* p = params.data() + t.offset;
    if (!t.decay) {  // LayerNorm / RMSNorm weights 1, everything else (biases) 0
      const float v = ends_with(t.name, "ln_1.weight") || ends_with(t.name, "ln_2.weight") ||
                              ends_with(t.name, "_norm.weight") || t.name == "ln_f.weight" ? 1.0f : 0.0f;
      for (size_t j = 0; j < t.numel; ++j) p[j] = v;
      continue;
    }
    // One stream per tensor, so adding layers does not shift the others' values.
    SplitMix64 rng{seed * 0x100000001B3ull + 0x51ED27ull * (i + 1)};
    const bool proj = block_traits(d).scaled_residual_init &&
                      (ends_with(t.name, "attn.proj.weight") || ends_with(t.name, "mlp.proj.weight"));
    const double sd = proj ? std_proj : std_w;
    for (size_t j = 0; j < t.numel; ++j) p[j] = static_cast<float>(sd * rng.normal());
  }
}

}  // namespace sftdp::model
