// tests/model/test_remat.cpp — activation recomputation (config key remat, SPEC §1): a model that
// keeps only each block's output and recomputes the rest in backward gives bitwise the gradient
// sums, loss sum and weight sum of one that keeps everything, for GPT-2 and Llama-family variants
// (GQA with an untied head, Qwen2 q/k/v biases, Qwen3 q/k norm), with and without packed segments,
// over accumulated micro-batches of fewer rows than max_B, and over optimizer steps; evaluation is
// unchanged; and the activation memory shrinks by exactly (L-1) blocks' worth of the shared buffers.
// Sharing the buffers without refilling them in backward would give the last block's activations to
// every block, so the bitwise comparisons fail if the recomputation is skipped.
#include <gtest/gtest.h>

#include <algorithm>
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
  config::ModelDims gpt2 = tiny_dims();  // maxT 12 = kT: every position embedding is used
  gpt2.L = 3;
  config::ModelDims llama;
  llama.L = 3, llama.NH = 4, llama.C = 16, llama.F = 24, llama.V = 37, llama.maxT = 64;
  llama.block = config::Block::kLlama, llama.KVH = 2, llama.HS = 4, llama.tied = false;
  config::ModelDims qwen2 = llama;
  qwen2.tied = true, qwen2.qkv_bias = true, qwen2.norm_eps = 1e-6;
  config::ModelDims qwen3 = llama;
  qwen3.tied = true, qwen3.qk_norm = true, qwen3.HS = 6, qwen3.KVH = 1;  // head size != C / NH
  return {{"gpt2", gpt2}, {"llama_gqa_untied", llama}, {"qwen2_qkv_bias", qwen2}, {"qwen3_qk_norm_mqa", qwen3}};
}

class Remat : public ::testing::TestWithParam<Family> {};

// Seeded initialisation plus noise, every 7th element zero and one block's attention projection
// all zero (that block's attention branch then adds nothing to the residual stream).
std::vector<float> partly_zero_params(const config::ModelDims& d) {
  const auto layout = model::param_layout(d);
  std::vector<float> p;
  model::init_params(p, layout, d, 5);
  const auto noise = uniform(p.size(), 17, -0.1f, 0.1f);
  for (size_t i = 0; i < p.size(); ++i) p[i] = i % 7 == 3 ? 0.0f : p[i] + noise[i];
  const auto& proj = layout.find("h.1.attn.proj.weight");
  std::fill(p.begin() + static_cast<std::ptrdiff_t>(proj.offset),
            p.begin() + static_cast<std::ptrdiff_t>(proj.offset + proj.numel), 0.0f);
  return p;
}

// Gradient buffer (with the loss and weight sums) after one forward_backward per micro-batch.
std::vector<float> grads_of(const config::ModelDims& d, bool remat, int max_B, const std::vector<float>& params,
                            const std::vector<data::Batch>& micro_batches) {
  const auto m = model::make_model(d, cpu_ops(), max_B, kT, remat);
  EXPECT_EQ(m->remat(), remat);
  m->set_params_from_host(params);
  m->zero_grads();
  for (const auto& b : micro_batches) m->forward_backward(b);
  return m->grads_to_host();
}

TEST_P(Remat, OneMicroBatchGivesBitwiseTheSameGradients) {
  const auto& d = GetParam().dims;
  const auto params = partly_zero_params(d);
  const size_t P = model::param_layout(d).total;
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "one sequence per row");
    const std::vector<data::Batch> batch = {random_rows(5, kT, d.V, 41, segments)};  // row 3 fully masked
    const auto keep = grads_of(d, false, 5, params, batch);
    const auto remat = grads_of(d, true, 5, params, batch);
    ASSERT_GT(keep[P + 1], 0.0f);
    ASSERT_GT(keep[P], 0.0f);
    EXPECT_GT(std::count_if(keep.begin(), keep.begin() + static_cast<std::ptrdiff_t>(P),
                            [](float g) { return g != 0.0f; }),
              static_cast<std::ptrdiff_t>(P / 2))
        << "most gradients are zero: the comparison would prove little";
    EXPECT_TRUE(bitwise_equal(remat, keep));  // every gradient sum and both trailing sums
  }
}

// Two micro-batches, the second with fewer rows than max_B, accumulated; with an evaluation pass
// between them (it overwrites the shared buffers too).
TEST_P(Remat, AccumulatedSmallerMicroBatchesAndEvaluationAreBitwiseTheSame) {
  const auto& d = GetParam().dims;
  const auto params = partly_zero_params(d);
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "one sequence per row");
    const auto rows = random_rows(7, kT, d.V, 77, segments);
    const auto first = slice_rows(rows, 0, 4), second = slice_rows(rows, 4, 7);
    std::vector<std::vector<float>> grads;
    std::vector<model::LossSums> evals;
    for (bool remat : {false, true}) {
      const auto m = model::make_model(d, cpu_ops(), 4, kT, remat);
      m->set_params_from_host(params);
      m->zero_grads();
      m->forward_backward(first);
      evals.push_back(m->forward(first));
      m->forward_backward(second);
      grads.push_back(m->grads_to_host());
    }
    EXPECT_TRUE(bitwise_equal(grads[1], grads[0]));
    EXPECT_EQ(evals[1].loss_sum, evals[0].loss_sum);
    EXPECT_EQ(evals[1].weight_sum, evals[0].weight_sum);
    // Accumulation really happened: the sum of the two micro-batches differs from the second alone.
    EXPECT_FALSE(bitwise_equal(grads[1], grads_of(d, true, 4, params, {second})));
  }
}

struct Trained {
  std::vector<float> params, m, v;
  std::vector<double> losses;
};

Trained train_three_steps(const config::ModelDims& d, bool remat, const std::vector<float>& params) {
  config::Config cfg;  // AdamW defaults, clipping at 1.0
  const auto model = model::make_model(d, cpu_ops(), 3, kT, remat);
  model->set_params_from_host(params);
  optim::AdamW opt(*model);
  Trained t;
  for (int step = 1; step <= 3; ++step) {
    model->zero_grads();
    const auto rows = random_rows(5, kT, d.V, 300 + step, /*segments=*/step % 2 == 0);
    model->forward_backward(slice_rows(rows, 0, 3));
    model->forward_backward(slice_rows(rows, 3, 5));
    t.losses.push_back(opt.apply(cfg, 1e-3, step).loss);
  }
  t.params = model->params_to_host();
  opt.moments_to_host(t.m, t.v);
  return t;
}

TEST_P(Remat, ThreeOptimizerStepsAreBitwiseTheSame) {
  const auto& d = GetParam().dims;
  const auto params = partly_zero_params(d);
  const auto keep = train_three_steps(d, false, params), remat = train_three_steps(d, true, params);
  EXPECT_FALSE(bitwise_equal(keep.params, params)) << "the steps changed no parameter";
  EXPECT_TRUE(bitwise_equal(remat.params, keep.params));
  EXPECT_TRUE(bitwise_equal(remat.m, keep.m));
  EXPECT_TRUE(bitwise_equal(remat.v, keep.v));
  EXPECT_EQ(remat.losses, keep.losses);
}

// Floats of one block's activations other than its output residual3 (the part remat shares), and
// of everything else the family allocates for activations, for max_B rows.
struct ActFloats {
  size_t shared_per_layer, rest;
};

ActFloats act_floats(const config::ModelDims& d, size_t max_B) {
  // lse: attention keeps (B,NH,T) log-sum-exps, no (B,NH,T,T) matrix and no T×T scratch
  const size_t N = max_B * kT, C = d.C, F = d.F, L = d.L, lse = max_B * d.NH * kT;
  if (d.block == config::Block::kGpt2) {
    // ln1 (N,C)+(N)+(N), qkv (N,3C), atty (N,C), lse, residual2 (N,C), ln2 (N,C)+(N)+(N), fch and fch_gelu (N,F)
    const size_t shared = N * C + 2 * N + 3 * N * C + N * C + lse + N * C + N * C + 2 * N + 2 * N * F;
    // residual3 per layer; encoded, ln_f (+mean, rstd), scratch_btc, dresidual, dbtf_a/b, dqkv
    const size_t rest = L * N * C + N * C + (N * C + 2 * N) + N * C + N * C + 2 * N * F + 3 * N * C;
    return {shared, rest};
  }
  const size_t QKV = d.qkv_dim(), A = d.attn_dim(), heads = size_t(d.NH) + d.kv_heads();
  // ln1 (N,C)+(N), qkv_raw and qk_rstd (Qwen3), qkv, atty (N,A), lse, residual2, ln2 (N,C)+(N),
  // fch (N,2F), fch_act (N,F)
  const size_t shared =
      N * C + N + (d.qk_norm ? N * QKV + N * heads : 0) + N * QKV + N * A + lse + N * C + N * C + N + 2 * N * F + N * F;
  // residual3 per layer; encoded, ln_f (+rstd), scratch_btc, scratch_bta (d atty: scratch_btc itself when A = C),
  // dresidual, dfch, dact, dqkv, dqkv_raw (Qwen3)
  const size_t rest = L * N * C + N * C + (N * C + N) + N * C + (A == C ? 0 : N * A) + N * C + 2 * N * F + N * F +
                      N * QKV + (d.qk_norm ? N * QKV : 0);
  return {shared, rest};
}

TEST_P(Remat, ActivationBytesShrinkByAllButOneBlocksSharedBuffers) {
  for (int L : {3, 1}) {
    auto d = GetParam().dims;
    d.L = L;
    SCOPED_TRACE("L = " + std::to_string(L));
    const int max_B = 4;
    const auto keep = model::make_model(d, cpu_ops(), max_B, kT, false);
    const auto remat = model::make_model(d, cpu_ops(), max_B, kT, true);
    const auto f = act_floats(d, max_B);
    EXPECT_EQ(keep->activation_bytes(), (L * f.shared_per_layer + f.rest) * sizeof(float));
    EXPECT_EQ(remat->activation_bytes(), (f.shared_per_layer + f.rest) * sizeof(float));
    const size_t saved = (L - 1) * f.shared_per_layer * sizeof(float);
    EXPECT_EQ(keep->remat_saved_bytes(), saved);
    EXPECT_EQ(remat->remat_saved_bytes(), saved);
    if (L > 1) {
      EXPECT_LT(remat->activation_bytes(), keep->activation_bytes());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Remat, ::testing::ValuesIn(families()), family_name);

}  // namespace
}  // namespace sftdp::test
