// tests/model/test_block_traits.cpp — every family is one transformer block read through its traits
// (src/model/block_traits.h), and its layout comes from the same traits: here each family's tensors, in SPEC §5
// order with their shapes, written out by hand (not by the builder), and what each family's traits say.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "model/block_traits.h"
#include "sftdp/model.h"

using namespace sftdp;
using Shape = std::vector<int64_t>;
using Tensors = std::vector<std::pair<std::string, Shape>>;

namespace {

Tensors names_and_shapes(const model::ParamLayout& lay) {
  Tensors t;
  for (const auto& p : lay.tensors) t.emplace_back(p.name, p.shape);
  return t;
}

config::ModelDims llama_dims(bool qkv_bias, bool qk_norm, bool tied) {
  config::ModelDims d;
  d.block = config::Block::kLlama, d.L = 1, d.C = 16, d.NH = 4, d.KVH = 2, d.HS = 6, d.F = 24, d.V = 11, d.maxT = 8;
  d.qkv_bias = qkv_bias, d.qk_norm = qk_norm, d.tied = tied;
  return d;
}

}  // namespace

TEST(BlockTraits, Gpt2LayoutIsSpecOrderWithLearnedPositionsAndEveryBias) {
  config::ModelDims d;
  d.block = config::Block::kGpt2, d.L = 1, d.C = 8, d.NH = 2, d.F = 32, d.V = 11, d.maxT = 6;
  const Tensors want = {{"wte", {11, 8}},
                        {"wpe", {6, 8}},
                        {"h.0.ln_1.weight", {8}},
                        {"h.0.ln_1.bias", {8}},
                        {"h.0.attn.qkv.weight", {24, 8}},
                        {"h.0.attn.qkv.bias", {24}},
                        {"h.0.attn.proj.weight", {8, 8}},
                        {"h.0.attn.proj.bias", {8}},
                        {"h.0.ln_2.weight", {8}},
                        {"h.0.ln_2.bias", {8}},
                        {"h.0.mlp.fc.weight", {32, 8}},
                        {"h.0.mlp.fc.bias", {32}},
                        {"h.0.mlp.proj.weight", {8, 32}},
                        {"h.0.mlp.proj.bias", {8}},
                        {"ln_f.weight", {8}},
                        {"ln_f.bias", {8}}};
  EXPECT_EQ(names_and_shapes(model::param_layout(d)), want);
  EXPECT_EQ(names_and_shapes(model::gpt2_layout(d)), want);
  const auto t = model::block_traits(d);
  EXPECT_EQ(t.norm, model::Norm::kLayerNorm);
  EXPECT_EQ(t.mlp, model::Mlp::kGelu);
  EXPECT_EQ(t.positions, model::Positions::kLearned);
  EXPECT_TRUE(t.linear_biases && t.tied_head && t.scaled_residual_init);
}

TEST(BlockTraits, LlamaFamilyLayoutsFollowQkvBiasQkNormAndTying) {
  // QKV = (4 + 2·2)·6 = 48 rows, A = 4·6 = 24 columns of attn.proj, SwiGLU's gate | up: 2F = 48 rows.
  const Tensors block = {{"h.0.ln_1.weight", {16}}, {"h.0.attn.qkv.weight", {48, 16}}};
  const Tensors rest = {{"h.0.attn.proj.weight", {16, 24}},
                        {"h.0.ln_2.weight", {16}},
                        {"h.0.mlp.fc.weight", {48, 16}},
                        {"h.0.mlp.proj.weight", {16, 24}},
                        {"ln_f.weight", {16}}};
  auto expect = [&](const config::ModelDims& d, const Tensors& attn_extra, bool head) {
    Tensors want = {{"wte", {11, 16}}};
    want.insert(want.end(), block.begin(), block.end());
    want.insert(want.end(), attn_extra.begin(), attn_extra.end());
    want.insert(want.end(), rest.begin(), rest.end());
    if (head) want.push_back({"lm_head.weight", {11, 16}});
    EXPECT_EQ(names_and_shapes(model::param_layout(d)), want);
    EXPECT_EQ(names_and_shapes(model::llama_layout(d)), want);
  };
  expect(llama_dims(false, false, true), {}, false);                                             // Llama, tied
  expect(llama_dims(true, false, false), {{"h.0.attn.qkv.bias", {48}}}, true);                  // Qwen2, untied
  expect(llama_dims(false, true, true), {{"h.0.attn.q_norm.weight", {6}}, {"h.0.attn.k_norm.weight", {6}}}, false);
  const auto t = model::block_traits(llama_dims(true, true, false));
  EXPECT_EQ(t.norm, model::Norm::kRmsNorm);
  EXPECT_EQ(t.mlp, model::Mlp::kSwiGlu);
  EXPECT_EQ(t.positions, model::Positions::kRope);
  EXPECT_TRUE(t.qkv_bias && t.qk_norm && !t.tied_head && !t.linear_biases && !t.scaled_residual_init);
}

TEST(BlockTraits, DecayedWeightsComeFirstAndEveryTensorIs64ByteAligned) {
  for (const auto& d : {llama_dims(true, true, false), llama_dims(false, false, true)}) {
    const auto lay = model::param_layout(d);
    for (const auto& p : lay.tensors) {
      EXPECT_EQ(p.offset % 16, 0u) << p.name;
      EXPECT_EQ(p.decay, p.offset < lay.n_decay) << p.name;
      EXPECT_EQ(p.decay, p.shape.size() >= 2) << p.name;
    }
  }
}
