// src/model/llama_layer.h — a Llama-family block's tensors by name, where they are now (null where the family
// variant has none: Qwen2's q/k/v bias, Qwen3's q/k norms): what both of its passes (src/model/llama.cpp, the fp32
// and bf16-GEMM path; src/model/llama_act16.cpp, the act16 path) read.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace sftdp::model {

// Indices into Llama::layer_offsets_; kAbsent: the variant has no such tensor.
enum LlamaLayerTensor { kLn1, kQkvW, kQkvB, kQNorm, kKNorm, kProj, kLn2, kFc, kMlpProj, kLayerTensors };
constexpr size_t kAbsent = SIZE_MAX;

struct LlamaLayerPtrs {
  float *ln1, *qkvw, *qkvb, *qnorm, *knorm, *proj, *ln2, *fc, *mlpproj;
};
// where(offset): where the tensor at that offset is now (Model::param, or base_grad: null under LoRA).
template <class Where>
LlamaLayerPtrs layer_ptrs(const std::array<size_t, kLayerTensors>& off, Where where) {
  auto at = [&](int k) -> float* { return off[k] == kAbsent ? nullptr : where(off[k]); };
  return {at(kLn1), at(kQkvW), at(kQkvB), at(kQNorm), at(kKNorm), at(kProj), at(kLn2), at(kFc), at(kMlpProj)};
}

}  // namespace sftdp::model
