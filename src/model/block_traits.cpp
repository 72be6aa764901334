// src/model/block_traits.cpp — see block_traits.h: each family's block as traits.
#include "model/block_traits.h"

#include <algorithm>

#include "sftdp/model.h"

namespace sftdp::model {

BlockTraits block_traits(const config::ModelDims& d) {
  BlockTraits t;
  switch (d.block) {
    case config::Block::kGpt2:
      t.norm = Norm::kLayerNorm, t.mlp = Mlp::kGelu, t.positions = Positions::kLearned;
      t.linear_biases = t.qkv_bias = true, t.qk_norm = false, t.tied_head = true;
      t.scaled_residual_init = true;
      break;
    case config::Block::kLlama:
      t.norm = Norm::kRmsNorm, t.mlp = Mlp::kSwiGlu, t.positions = Positions::kRope;
      t.linear_biases = false, t.qkv_bias = d.qkv_bias, t.qk_norm = d.qk_norm, t.tied_head = d.tied;
      t.scaled_residual_init = false;
      break;
  }
  return t;
}

const char* layer_tensor_name(LayerTensor k) {
  static const char* const kNames[kLayerTensors] = {
      "ln_1.weight",      "ln_1.bias",      "attn.qkv.weight", "attn.qkv.bias", "attn.q_norm.weight",
      "attn.k_norm.weight", "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
      "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};
  return kNames[k];
}

std::vector<LayerOffsets> layer_offsets(const BlockTraits& t, const ParamLayout& layout, int L) {
  std::vector<LayerOffsets> out(size_t(std::max(L, 0)));
  for (int l = 0; l < L; ++l)
    for (int k = 0; k < kLayerTensors; ++k)
      out[l][k] = block_has(t, LayerTensor(k))
                      ? layout.find("h." + std::to_string(l) + "." + layer_tensor_name(LayerTensor(k))).offset
                      : kAbsent;
  return out;
}

bool block_has(const BlockTraits& t, LayerTensor k) {
  switch (k) {
    case kLn1B: case kLn2B: return t.norm == Norm::kLayerNorm;
    case kQkvB: return t.qkv_bias || t.linear_biases;
    case kQNorm: case kKNorm: return t.qk_norm;
    case kProjB: case kFcB: case kMlpProjB: return t.linear_biases;
    default: return true;
  }
}

}  // namespace sftdp::model
