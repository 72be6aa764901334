// tests/model/test_cuda_lora.cpp — LoRA models (issue 17) on the CUDA table against the CPU table,
// for GPT-2 and Llama-family variants: the same base, adapters and micro-batch (packed segments)
// give the same loss sum (1e-5), weight sum (exact) and adapter gradient sums (1e-4 of each tensor's
// largest), with dropout's masks included (the same bits on both devices); the base stays bitwise
// unchanged over AdamW steps on the GPU; the bf16-GEMM table stays within 2e-2. Skips without a
// CUDA device or the simulator.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "kernels/test_cuda_util.h"
#include "model/model_fixtures.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

namespace sftdp::test {
namespace {

constexpr int kT = 12;

std::vector<Family> families() {
  config::ModelDims llama = tiny_llama_dims();
  llama.tied = false, llama.qkv_bias = true;
  config::ModelDims qwen3 = llama;
  qwen3.tied = true, qwen3.qkv_bias = false, qwen3.qk_norm = true, qwen3.HS = 6, qwen3.KVH = 1;
  return {{"gpt2", tiny_dims()}, {"llama_gqa_untied_qkv_bias", llama}, {"qwen3_qk_norm_mqa", qwen3}};
}

class CudaLora : public ::testing::TestWithParam<Family> {};

model::LoraSpec spec_of(const config::ModelDims& d, double dropout) {
  config::Config cfg;
  cfg.lora_rank = 3, cfg.lora_alpha = 6, cfg.lora_dropout = dropout, cfg.seed = 5;
  cfg.lora_target_modules = {"all-linear"};
  return model::lora_spec(cfg, d);
}

struct Outcome {
  std::vector<float> grads;
  model::LossSums eval;
};

Outcome run_once(const Ops& ops, const config::ModelDims& d, const model::LoraSpec& spec, const data::Batch& batch) {
  std::vector<float> base, adapters;
  model::init_params(base, model::param_layout(d), d, 7);
  const auto lay = model::lora_layout(d, spec);
  model::init_lora(adapters, lay, 9);
  const auto noise = uniform(adapters.size(), 10, -0.2f, 0.2f);
  for (size_t i = 0; i < adapters.size(); ++i) adapters[i] += noise[i];
  const auto m = model::make_model(d, ops, batch.B, kT, false, false, spec);
  m->set_params_from_host(base);
  m->set_trainable_from_host(adapters);
  m->set_step(2);
  m->zero_grads();
  m->forward_backward(batch);
  return {m->grads_to_host(), m->forward(batch)};
}

TEST_P(CudaLora, MatchesTheCpuModelWithAndWithoutDropout) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto& d = GetParam().dims;
  auto batch = random_rows(3, kT, d.V, 19, /*segments=*/true);
  batch.row_ids = {8, 3, 100};
  for (double dropout : {0.0, 0.3}) {
    const auto spec = spec_of(d, dropout);
    const auto lay = model::lora_layout(d, spec);
    const Outcome cpu = run_once(cpu_ops(), d, spec, batch), gpu = run_once(*ops, d, spec, batch);
    EXPECT_NEAR(gpu.eval.loss_sum, cpu.eval.loss_sum, 1e-5 * cpu.eval.loss_sum);
    EXPECT_EQ(gpu.eval.weight_sum, cpu.eval.weight_sum);
    EXPECT_NEAR(gpu.grads[lay.total], cpu.grads[lay.total], 1e-5 * cpu.grads[lay.total]);
    EXPECT_EQ(gpu.grads[lay.total + 1], cpu.grads[lay.total + 1]);
    for (const auto& t : lay.tensors) {
      const auto at = [&](const std::vector<float>& g) {
        return std::vector<float>(g.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                  g.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
      };
      EXPECT_LE(max_rel_diff(at(gpu.grads), at(cpu.grads)), 1e-4) << t.name << " dropout " << dropout;
    }
  }
}

TEST_P(CudaLora, BaseStaysBitwiseOverStepsAndBf16StaysClose) {
  SFTDP_REQUIRE_CUDA(ops);
  SFTDP_REQUIRE_CUDA_GEMM(bf16_ops, GemmInputs::kBf16);
  const auto& d = GetParam().dims;
  const auto spec = spec_of(d, 0.0);
  std::vector<float> base, adapters;
  model::init_params(base, model::param_layout(d), d, 7);
  model::init_lora(adapters, model::lora_layout(d, spec), 9);
  std::vector<double> losses[2];
  for (int table = 0; table < 2; ++table) {
    const auto m = model::make_model(d, table ? *bf16_ops : *ops, 3, kT, false, false, spec);
    m->set_params_from_host(base);
    m->set_trainable_from_host(adapters);
    optim::AdamW opt(*m);
    config::Config cfg;
    for (int step = 1; step <= 3; ++step) {
      m->zero_grads();
      m->forward_backward(random_rows(3, kT, d.V, 30 + step, false));
      losses[table].push_back(opt.apply(cfg, 1e-2, step).loss);
    }
    EXPECT_TRUE(bitwise_equal(m->params_to_host(), base));
    EXPECT_FALSE(bitwise_equal(m->trainable_to_host(), adapters));
  }
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(losses[1][s], losses[0][s], 2e-2 * losses[0][s]);
  // bf16 activation storage stays exact with adapters, but not with their dropout (it scales x
  // before the GEMM rounds it): the model then keeps fp32 activations.
  EXPECT_EQ(model::make_model(d, *bf16_ops, 3, kT, false, true, spec_of(d, 0.0))->activation_storage(),
            model::ActivationStorage::kBf16GemmInputs);
  EXPECT_EQ(model::make_model(d, *bf16_ops, 3, kT, false, true, spec_of(d, 0.3))->activation_storage(),
            model::ActivationStorage::kFloat32);
}

// LoRA dropout under CUDA graphs (issue 43): the masks' keys (seed, step, adapter) and rows are read from device
// memory that each micro-batch's upload fills, so a replayed step draws its own step's masks: four steps of two
// micro-batches, graphs on and off, give the same adapters, moments and losses bit for bit, and the graph run did
// capture its passes.
TEST_P(CudaLora, DropoutReplaysBitwiseUnderCudaGraphs) {
  SFTDP_REQUIRE_CUDA(ops);
  const auto& d = GetParam().dims;
  const auto spec = spec_of(d, 0.3);
  std::vector<float> base, adapters;
  model::init_params(base, model::param_layout(d), d, 7);
  model::init_lora(adapters, model::lora_layout(d, spec), 9);
  auto rows = random_rows(6, kT, d.V, 41, /*segments=*/true);
  rows.row_ids = {4, 9, 1, 30, 2, 7};
  struct Run {
    std::vector<float> adapters, m, v;
    std::vector<double> losses;
    size_t graphs = 0;
  };
  const auto train = [&](bool graphs) {
    const auto m = model::make_model(d, *ops, 3, kT, false, false, spec);
    m->set_cuda_graphs(graphs);
    m->set_params_from_host(base);
    m->set_trainable_from_host(adapters);
    optim::AdamW opt(*m);
    config::Config cfg;
    Run r;
    for (int step = 1; step <= 4; ++step) {
      m->set_step(step);
      m->zero_grads();
      m->forward_backward(slice_rows(rows, 0, 3));
      m->forward_backward(slice_rows(rows, 3, 6));
      r.losses.push_back(opt.apply(cfg, 1e-2, step).loss);
    }
    r.adapters = m->trainable_to_host();
    opt.moments_to_host(r.m, r.v);
    r.graphs = m->graphs_captured();
    return r;
  };
  const Run eager = train(false), replayed = train(true);
  EXPECT_EQ(eager.graphs, 0u);
  EXPECT_GE(replayed.graphs, 1u) << "the micro-steps' passes with dropout are captured";
  EXPECT_TRUE(bitwise_equal(replayed.adapters, eager.adapters));
  EXPECT_TRUE(bitwise_equal(replayed.m, eager.m));
  EXPECT_TRUE(bitwise_equal(replayed.v, eager.v));
  EXPECT_EQ(replayed.losses, eager.losses);
}

INSTANTIATE_TEST_SUITE_P(Families, CudaLora, ::testing::ValuesIn(families()), family_name);

}  // namespace
}  // namespace sftdp::test
