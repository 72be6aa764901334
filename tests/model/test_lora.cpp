// tests/model/test_lora.cpp — LoRA on both decoder families (issue 17): target_modules resolve as
// PEFT resolves them and bad ones are UserErrors; adapters have PEFT's shapes and initialisation,
// so step 0 is bitwise the base model; the adapters' gradient sums match central finite differences
// of the loss SUM (every targeted module of GPT-2, Llama with GQA and an untied head, Qwen2 biases,
// Qwen3 q/k norm; with packed segments); the base gets no gradient and stays bitwise unchanged over
// optimizer steps, while the gradient buffer holds only the adapters and the two sums; a merged
// model (W + s·B·A) gives the adapted model's loss; micro-batch splits and remat keep their
// promises; dropout masks follow the rows, not their slots, and vanish in evaluation.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

namespace sftdp::test {
namespace {

constexpr int kT = 12;

std::vector<Family> families() {
  config::ModelDims llama = tiny_llama_dims();
  llama.tied = false;
  config::ModelDims qwen2 = llama;
  qwen2.tied = true, qwen2.qkv_bias = true;
  config::ModelDims qwen3 = llama;
  qwen3.tied = true, qwen3.qk_norm = true, qwen3.HS = 6, qwen3.KVH = 1;
  return {{"gpt2", tiny_dims()}, {"llama_gqa_untied", llama}, {"qwen2_qkv_bias", qwen2}, {"qwen3_qk_norm_mqa", qwen3}};
}
class Lora : public ::testing::TestWithParam<Family> {};

model::LoraSpec spec_of(const config::ModelDims& d, std::vector<std::string> targets, int rank = 4, double alpha = 8,
                        double dropout = 0) {
  config::Config cfg;
  cfg.lora_rank = rank, cfg.lora_alpha = alpha, cfg.lora_dropout = dropout, cfg.seed = 3;
  cfg.lora_target_modules = std::move(targets);
  return model::lora_spec(cfg, d);
}

std::vector<float> noisy_base(const config::ModelDims& d) {
  std::vector<float> p;
  model::init_params(p, model::param_layout(d), d, 7);
  const auto noise = uniform(p.size(), 8, -0.1f, 0.1f);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

// PEFT's initialisation, then B made nonzero so that every gradient path carries signal.
std::vector<float> trained_like_adapters(const model::ParamLayout& lay, uint64_t seed) {
  std::vector<float> a;
  model::init_lora(a, lay, seed);
  const auto noise = uniform(a.size(), seed + 1, -0.15f, 0.15f);
  for (size_t i = 0; i < a.size(); ++i) a[i] += noise[i];
  return a;
}

std::unique_ptr<model::Model> lora_model(const config::ModelDims& d, const model::LoraSpec& spec, int B,
                                         const std::vector<float>& base, const std::vector<float>& adapters,
                                         bool remat = false) {
  auto m = model::make_model(d, cpu_ops(), B, kT, remat, false, spec);
  m->set_params_from_host(base);
  m->set_trainable_from_host(adapters);
  return m;
}

TEST(LoraTargets, ResolveAsPeftMatchesTargetModules) {
  const auto gpt2 = tiny_dims();
  using V = std::vector<std::string>;
  EXPECT_EQ(spec_of(gpt2, {}).modules, V{"attn.c_attn"});  // PEFT's default for gpt2
  EXPECT_EQ(spec_of(gpt2, {"c_proj"}).modules, (V{"attn.c_proj", "mlp.c_proj"}));
  EXPECT_EQ(spec_of(gpt2, {"mlp.c_proj"}).modules, V{"mlp.c_proj"});
  EXPECT_EQ(spec_of(gpt2, {"c_fc", "c_attn"}).modules, (V{"attn.c_attn", "mlp.c_fc"}));
  EXPECT_EQ(spec_of(gpt2, {"all-linear"}).modules.size(), 4u);
  auto llama = families()[1].dims;
  EXPECT_EQ(spec_of(llama, {}).modules, (V{"self_attn.q_proj", "self_attn.v_proj"}));
  EXPECT_EQ(spec_of(llama, {"all-linear"}).modules,
            (V{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj"}));
  const std::string e = user_error_of([&] { spec_of(gpt2, {"q_proj"}); });
  EXPECT_CONTAINS(e, "lora_target_modules: 'q_proj' names no linear module of a gpt2 block");
  EXPECT_CONTAINS(user_error_of([&] { spec_of(llama, {"proj"}); }), "'proj'");  // a suffix, not a dot-suffix
  EXPECT_FALSE(spec_of(gpt2, {}, /*rank=*/0).enabled());
}

TEST(LoraTargets, LayoutHasPeftShapesAndInitialisation) {
  const auto d = families()[1].dims;  // GQA: k/v narrower than q
  const auto spec = spec_of(d, {"all-linear"}, 3);
  const auto lay = model::lora_layout(d, spec);
  EXPECT_EQ(lay.tensors.size(), size_t(2 * 7 * d.L));
  EXPECT_EQ(lay.n_decay, lay.total);
  EXPECT_EQ(lay.find("h.1.self_attn.q_proj.lora_A").shape, (std::vector<int64_t>{3, d.C}));
  EXPECT_EQ(lay.find("h.1.self_attn.q_proj.lora_B").shape, (std::vector<int64_t>{d.attn_dim(), 3}));
  EXPECT_EQ(lay.find("h.0.self_attn.k_proj.lora_B").shape, (std::vector<int64_t>{d.kv_heads() * d.head_size(), 3}));
  EXPECT_EQ(lay.find("h.0.self_attn.o_proj.lora_A").shape, (std::vector<int64_t>{3, d.attn_dim()}));
  EXPECT_EQ(lay.find("h.0.mlp.down_proj.lora_A").shape, (std::vector<int64_t>{3, d.F}));
  std::vector<float> a;
  model::init_lora(a, lay, 11);
  for (const auto& t : lay.tensors) {
    const bool is_a = t.name.back() == 'A';
    const double bound = 1.0 / std::sqrt(double(t.shape[1]));
    double max_abs = 0;
    for (size_t j = 0; j < t.numel; ++j) max_abs = std::max(max_abs, double(std::fabs(a[t.offset + j])));
    if (is_a)
      EXPECT_TRUE(max_abs <= bound && max_abs > 0.5 * bound) << t.name;  // Kaiming-uniform, a = sqrt(5)
    else
      EXPECT_EQ(max_abs, 0.0) << t.name;  // B = 0
  }
  std::vector<float> again;
  model::init_lora(again, lay, 11);
  EXPECT_TRUE(bitwise_equal(again, a));
}

// PEFT's initialisation (B = 0) adds exactly 0 to every Linear output: the base model's bits.
TEST_P(Lora, StepZeroIsBitwiseTheBaseModel) {
  const auto& d = GetParam().dims;
  const auto spec = spec_of(d, {"all-linear"});
  const auto base = noisy_base(d);
  std::vector<float> adapters;
  model::init_lora(adapters, model::lora_layout(d, spec), 3);
  const auto batch = random_rows(4, kT, d.V, 21, /*segments=*/true);
  const auto plain = model::make_model(d, cpu_ops(), 4, kT);
  plain->set_params_from_host(base);
  const auto with = lora_model(d, spec, 4, base, adapters);
  const auto a = plain->forward(batch), b = with->forward(batch);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(a.weight_sum, b.weight_sum);
  // The gradient buffer: the adapters' sums and the two trailing sums, nothing for the base.
  EXPECT_EQ(with->grad_buffer_floats(), with->trainable_layout().total + 2);
  plain->zero_grads(), with->zero_grads();
  plain->forward_backward(batch), with->forward_backward(batch);
  const auto gp = plain->grads_to_host(), gl = with->grads_to_host();
  EXPECT_EQ(gl[with->trainable_layout().total], gp[plain->layout().total]);  // loss sum
  EXPECT_EQ(gl[with->trainable_layout().total + 1], gp[plain->layout().total + 1]);
}

TEST_P(Lora, AdapterGradientsMatchFiniteDifferencesOfLossSum) {
  const auto& d = GetParam().dims;
  for (bool segments : {false, true}) {
    const int B = 3;
    const auto spec = spec_of(d, {"all-linear"}, 2, 5.0);
    const auto lay = model::lora_layout(d, spec);
    const auto base = noisy_base(d);
    const auto adapters = trained_like_adapters(lay, 9);
    const auto m = lora_model(d, spec, B, base, adapters);
    const auto batch = random_rows(B, kT, d.V, 13, segments);
    m->zero_grads();
    m->forward_backward(batch);
    const auto grads = m->grads_to_host();
    for (const auto& t : lay.tensors)
      for (size_t k = 0; k < 3; ++k) {
        const size_t i = t.offset + (k * 7919 + 5) % t.numel;
        auto p = adapters;
        const float h = 1e-2f;
        p[i] = adapters[i] + h;
        m->set_trainable_from_host(p);
        const double up = m->forward(batch).loss_sum;
        p[i] = adapters[i] - h;
        m->set_trainable_from_host(p);
        const double down = m->forward(batch).loss_sum;
        const double fd = (up - down) / (2.0 * h);
        EXPECT_NEAR(grads[i], fd, 2e-3 + 2e-2 * std::fabs(fd))
            << GetParam().name << " " << t.name << "[" << i - t.offset << "] segments=" << segments;
      }
    m->set_trainable_from_host(adapters);
  }
}

// W + s·B·A in the stacked base tensors (what sft_export --merge writes) is the adapted model.
TEST_P(Lora, MergedWeightsGiveTheAdaptedModelsLoss) {
  const auto& d = GetParam().dims;
  const auto spec = spec_of(d, {"all-linear"}, 3, 12.0);
  const auto lay = model::lora_layout(d, spec);
  const auto base = noisy_base(d);
  const auto adapters = trained_like_adapters(lay, 17);
  const auto batch = random_rows(4, kT, d.V, 23, true);
  const auto adapted = lora_model(d, spec, 4, base, adapters)->forward(batch);
  auto merged = base;
  model::merge_lora(merged, model::param_layout(d), d, spec, lay, adapters);
  EXPECT_FALSE(bitwise_equal(merged, base));
  const auto plain = model::make_model(d, cpu_ops(), 4, kT);
  plain->set_params_from_host(merged);
  const auto m = plain->forward(batch);
  EXPECT_NEAR(m.loss_sum, adapted.loss_sum, 1e-5 * std::fabs(adapted.loss_sum));
  EXPECT_EQ(m.weight_sum, adapted.weight_sum);
  // And the adapters matter: the base alone gives another loss.
  plain->set_params_from_host(base);
  EXPECT_GT(std::fabs(plain->forward(batch).loss_sum - adapted.loss_sum), 1e-3);
}

TEST_P(Lora, OptimizerMovesOnlyAdaptersAndTheBaseStaysBitwise) {
  const auto& d = GetParam().dims;
  const auto spec = spec_of(d, {"all-linear"});
  const auto base = noisy_base(d);
  std::vector<float> adapters;
  model::init_lora(adapters, model::lora_layout(d, spec), 3);
  const auto m = lora_model(d, spec, 3, base, adapters);
  optim::AdamW opt(*m);
  EXPECT_EQ(opt.shard().owned(), m->trainable_layout().total);  // moments for the adapters only
  config::Config cfg;                                           // weight decay 0.1, clipping 1.0
  double first = 0, last = 0;
  for (int step = 1; step <= 4; ++step) {
    m->zero_grads();
    m->forward_backward(random_rows(3, kT, d.V, 50, false));  // the same rows: the loss must fall
    const auto s = opt.apply(cfg, 1e-2, step);
    (step == 1 ? first : last) = s.loss;
  }
  EXPECT_TRUE(bitwise_equal(m->params_to_host(), base));
  EXPECT_FALSE(bitwise_equal(m->trainable_to_host(), adapters));
  EXPECT_LT(last, first);
}

// GA: two micro-batches accumulate to the whole batch's sums; remat: bitwise the same sums.
TEST_P(Lora, MicroBatchSplitsAndRematKeepTheirPromises) {
  const auto& d = GetParam().dims;
  const auto spec = spec_of(d, {"all-linear"}, 2);
  const auto lay = model::lora_layout(d, spec);
  const auto base = noisy_base(d);
  const auto adapters = trained_like_adapters(lay, 31);
  const auto rows = random_rows(6, kT, d.V, 61, true);
  auto grads = [&](int B, bool remat, const std::vector<data::Batch>& parts) {
    const auto m = lora_model(d, spec, B, base, adapters, remat);
    m->zero_grads();
    for (const auto& b : parts) m->forward_backward(b);
    return m->grads_to_host();
  };
  const auto whole = grads(6, false, {rows});
  const auto split = grads(3, false, {slice_rows(rows, 0, 3), slice_rows(rows, 3, 6)});
  EXPECT_LE(max_rel_diff(split, whole), 1e-5);
  EXPECT_EQ(split[lay.total + 1], whole[lay.total + 1]);
  EXPECT_TRUE(bitwise_equal(grads(3, true, {slice_rows(rows, 0, 3), slice_rows(rows, 3, 6)}), split));
}

TEST_P(Lora, DropoutMasksFollowRowsAndStepsAndVanishInEvaluation) {
  const auto& d = GetParam().dims;
  const auto lay = model::lora_layout(d, spec_of(d, {"all-linear"}, 2));
  const auto base = noisy_base(d);
  const auto adapters = trained_like_adapters(lay, 41);
  auto rows = random_rows(4, kT, d.V, 71, false);
  rows.row_ids = {40, 41, 42, 43};
  auto run = [&](double dropout, int64_t step, int B, const std::vector<data::Batch>& parts) {
    const auto m = lora_model(d, spec_of(d, {"all-linear"}, 2, 8, dropout), B, base, adapters);
    m->set_step(step);
    m->zero_grads();
    for (const auto& b : parts) m->forward_backward(b);
    return std::make_pair(m->grads_to_host(), m->forward(parts.front()).loss_sum);
  };
  const auto [none, eval_none] = run(0.0, 0, 4, {rows});
  const auto [drop, eval_drop] = run(0.5, 0, 4, {rows});
  EXPECT_EQ(eval_drop, eval_none);                                    // evaluation: no dropout
  EXPECT_GT(max_rel_diff(drop, none), 1e-2);                          // training: the masks changed the gradients
  EXPECT_TRUE(bitwise_equal(run(0.5, 0, 4, {rows}).first, drop));     // and the same ones again
  EXPECT_GT(max_rel_diff(run(0.5, 1, 4, {rows}).first, drop), 1e-2);  // another step, other masks
  // The rows split over two micro-batches (another rank or GA step): the same masks, so the same
  // sums to fp32 rounding; a row id that moves to another slot keeps its mask.
  auto first = slice_rows(rows, 0, 2), second = slice_rows(rows, 2, 4);
  first.row_ids = {40, 41}, second.row_ids = {42, 43};
  EXPECT_LE(max_rel_diff(run(0.5, 0, 2, {first, second}).first, drop), 1e-5);
  EXPECT_LE(max_rel_diff(run(0.5, 0, 2, {second, first}).first, drop), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, Lora, ::testing::ValuesIn(families()), family_name);

}  // namespace
}  // namespace sftdp::test
