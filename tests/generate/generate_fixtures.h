// tests/generate/generate_fixtures.h — the model families the generation tests run (GPT-2; Llama with
// grouped-query attention; Qwen2 with q/k/v biases and an untied head; Qwen3 with q/k norms and a head
// size other than C/NH) as seeded random models (model::init_params, then the norms and biases moved
// off their 1/0 so that they matter), shared by test_generator.cpp and test_cuda_generate.cpp.
#pragma once
#include <random>
#include <vector>

#include "model/model_fixtures.h"
#include "sftdp/generate.h"
#include "sftdp/model.h"

namespace sftdp::test {

inline std::vector<Family> generate_families() {
  config::ModelDims gpt2 = tiny_dims(), llama = tiny_llama_dims();
  gpt2.maxT = 16;
  config::ModelDims qwen2 = llama, qwen3 = llama;
  qwen2.qkv_bias = true, qwen2.tied = false, qwen2.KVH = 1;
  qwen3.qk_norm = true, qwen3.HS = 6, qwen3.tied = false, qwen3.norm_eps = 1e-6, qwen3.rope_theta = 1e6;
  return {{"gpt2", gpt2}, {"llama_gqa", llama}, {"qwen2", qwen2}, {"qwen3", qwen3}};
}

// Weights N(0, 0.3) (init_params' N(0, 0.02) times 15: logits sharp enough that greedy picks are far
// from ties), vectors 1 ± 0.2 or ± 0.2.
inline generate::LoadedModel random_model(const config::ModelDims& d, uint64_t seed) {
  generate::LoadedModel m;
  m.d = d;
  const model::ParamLayout layout = model::param_layout(d);
  model::init_params(m.params, layout, d, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> noise(0.f, 0.2f);
  for (const auto& t : layout.tensors)
    for (size_t i = t.offset; i < t.offset + t.numel; ++i)
      m.params[i] = t.decay ? m.params[i] * 15.f : m.params[i] + noise(rng);
  return m;
}

}  // namespace sftdp::test
