// src/model/block_traits.h — what a decoder family's block is made of (SPEC §5), as data: the one transformer
// block (src/model/decoder.cpp, decoder_act16.cpp) and the one parameter layout (layout.cpp) read these traits and
// nothing else of the family. A new family is one entry in block_traits() plus its Hugging Face name map
// (src/hf/).
//   GPT-2:        LayerNorm (weight, bias), GELU MLP (F wide), learned positions (wpe), a bias on every Linear,
//                 tied head, the residual projections initialised N(0, 0.02/sqrt(2L)).
//   Llama family: RMSNorm (weight, eps), SwiGLU MLP (gate | up, 2F wide), RoPE (theta, llama3 scaling), no biases
//                 but q|k|v's when qkv_bias (Qwen2), q/k RMSNorm when qk_norm (Qwen3), tied or untied head.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sftdp/config.h"

namespace sftdp::model {

enum class Norm { kLayerNorm, kRmsNorm };
enum class Mlp { kGelu, kSwiGlu };
enum class Positions { kLearned, kRope };

struct BlockTraits {
  Norm norm = Norm::kLayerNorm;
  Mlp mlp = Mlp::kGelu;
  Positions positions = Positions::kLearned;
  bool linear_biases = false;   // every Linear (q|k|v, attention and MLP projections) has a bias
  bool qkv_bias = false;        // q|k|v has a bias (implied by linear_biases)
  bool qk_norm = false;         // RMSNorm over each q and k head before RoPE
  bool tied_head = true;        // the LM head is wte
  bool scaled_residual_init = false;  // attn.proj and mlp.proj start N(0, 0.02/sqrt(2L)), not N(0, 0.02)
  int mlp_width(int F) const { return mlp == Mlp::kSwiGlu ? 2 * F : F; }  // rows of mlp.fc
};
BlockTraits block_traits(const config::ModelDims& d);

// A block's tensors, by their SPEC §5 names under "h.<l>.", in layout order; a family has the ones its traits
// name (block_has).
enum LayerTensor {
  kLn1W, kLn1B, kQkvW, kQkvB, kQNorm, kKNorm, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kMlpProjW, kMlpProjB,
  kLayerTensors
};
const char* layer_tensor_name(LayerTensor k);  // e.g. "attn.qkv.weight"
bool block_has(const BlockTraits& t, LayerTensor k);
constexpr size_t kAbsent = SIZE_MAX;  // the offset of a tensor the family has not
struct ParamLayout;                   // sftdp/model.h
// Each block's tensor offsets in `layout`, looked up by name once (kAbsent where the family has none): what the
// trainer's blocks (decoder.cpp) and generation's (src/generate/generator.cpp) index with layer_ptrs.
using LayerOffsets = std::array<size_t, kLayerTensors>;
std::vector<LayerOffsets> layer_offsets(const BlockTraits& t, const ParamLayout& layout, int L);

// Where block l's tensors are now: null where the family has none.
struct LayerPtrs {
  float *ln1w, *ln1b, *qkvw, *qkvb, *qnorm, *knorm, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *mlpprojw, *mlpprojb;
};
// off: the block's offsets (kAbsent where absent); where(offset): where the tensor at that offset is now
// (Model::param, or Model::base_grad: null under LoRA).
template <class Where>
LayerPtrs layer_ptrs(const std::array<size_t, kLayerTensors>& off, Where where) {
  auto at = [&](int k) -> float* { return off[k] == kAbsent ? nullptr : where(off[k]); };
  return {at(kLn1W), at(kLn1B), at(kQkvW),  at(kQkvB), at(kQNorm), at(kKNorm),    at(kProjW),
          at(kProjB), at(kLn2W), at(kLn2B), at(kFcW),  at(kFcB),   at(kMlpProjW), at(kMlpProjB)};
}

}  // namespace sftdp::model
