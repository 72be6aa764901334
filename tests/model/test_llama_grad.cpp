// tests/model/test_llama_grad.cpp — the Llama-family model (RMSNorm, RoPE, SwiGLU, grouped-query
// attention; Qwen2 q/k/v biases, Qwen3 q/k norm, untied head, Llama-3 RoPE scaling): gradient
// sums against central finite differences of the loss SUM for every tensor, packed segments that
// behave exactly like separate rows (positions restart, attention stays inside), and the GA
// factorisation invariance of SPEC §1 on one rank.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/model.h"

using namespace sftdp;

namespace {

struct Variant {
  const char* name;
  config::ModelDims dims;
};

config::ModelDims llama_base() {
  config::ModelDims d;
  d.L = 2, d.NH = 4, d.C = 16, d.F = 24, d.V = 37, d.maxT = 64;
  d.block = config::Block::kLlama, d.KVH = 2, d.HS = 4, d.norm_eps = 1e-5, d.rope_theta = 10000;
  return d;
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"llama_gqa_tied", llama_base()});
  auto untied = llama_base();
  untied.tied = false, untied.KVH = 1, untied.rope_theta = 500000;
  untied.rope_scaling = {true, 8, 1, 4, 16};  // original context 16 < T: every band is exercised
  v.push_back({"llama_untied_mqa_llama3_rope", untied});
  auto qwen2 = llama_base();
  qwen2.qkv_bias = true, qwen2.norm_eps = 1e-6;
  v.push_back({"qwen2_qkv_bias", qwen2});
  auto qwen3 = llama_base();
  qwen3.qk_norm = true, qwen3.HS = 6, qwen3.KVH = 4;  // head size independent of C / NH
  v.push_back({"qwen3_qk_norm", qwen3});
  return v;
}

std::vector<float> random_params(const model::ParamLayout& lay, const config::ModelDims& d, uint64_t seed) {
  std::vector<float> p;
  model::init_params(p, lay, d, seed);
  // Norm weights and biases away from 1/0, and weights large enough that attention is not uniform.
  const auto noise = test::uniform(p.size(), seed + 92, -0.15f, 0.15f);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

class LlamaModel : public ::testing::TestWithParam<Variant> {};

}  // namespace

TEST_P(LlamaModel, LayoutHasTheVariantsTensors) {
  const auto& d = GetParam().dims;
  const auto lay = model::param_layout(d);
  auto has = [&](const std::string& name) {
    for (const auto& t : lay.tensors)
      if (t.name == name) return true;
    return false;
  };
  EXPECT_FALSE(has("wpe"));
  EXPECT_EQ(has("h.0.attn.qkv.bias"), d.qkv_bias);
  EXPECT_EQ(has("h.1.attn.q_norm.weight"), d.qk_norm);
  EXPECT_EQ(has("lm_head.weight"), !d.tied);
  EXPECT_EQ(lay.find("h.0.attn.qkv.weight").shape, (std::vector<int64_t>{d.qkv_dim(), d.C}));
  EXPECT_EQ(lay.find("h.1.attn.proj.weight").shape, (std::vector<int64_t>{d.C, d.attn_dim()}));
  EXPECT_EQ(lay.find("h.1.mlp.fc.weight").shape, (std::vector<int64_t>{2 * d.F, d.C}));
  EXPECT_EQ(lay.find("h.0.mlp.proj.weight").shape, (std::vector<int64_t>{d.C, d.F}));
}

// The loss sum is Σ w·CE; its gradient must match d(loss sum)/dθ by central differences, for a
// few elements of every tensor, with and without packed segments.
TEST_P(LlamaModel, GradientsMatchFiniteDifferencesOfLossSum) {
  const auto& d = GetParam().dims;
  for (bool segments : {false, true}) {
    const int B = 3, T = 20;
    const auto m = model::make_model(d, cpu_ops(), B, T);
    const auto params = random_params(m->layout(), d, 7);
    m->set_params_from_host(params);
    const auto batch = test::random_rows(B, T, d.V, 11, segments);
    m->zero_grads();
    m->forward_backward(batch);
    const auto grads = m->grads_to_host();
    int checked = 0;
    for (const auto& t : m->layout().tensors) {
      for (size_t k = 0; k < 4; ++k) {
        const size_t i = t.offset + (k * 7919 + 13) % t.numel;
        auto p = params;
        const float h = 1e-2f;
        p[i] = params[i] + h;
        m->set_params_from_host(p);
        const double up = m->forward(batch).loss_sum;
        p[i] = params[i] - h;
        m->set_params_from_host(p);
        const double down = m->forward(batch).loss_sum;
        const double fd = (up - down) / (2.0 * h);
        EXPECT_NEAR(grads[i], fd, 2e-3 + 2e-2 * std::fabs(fd))
            << GetParam().name << " " << t.name << "[" << i - t.offset << "] segments=" << segments;
        ++checked;
      }
    }
    EXPECT_GE(checked, 4 * static_cast<int>(m->layout().tensors.size()));
  }
}

// A packed segment is its own example: segment B placed after segment A (positions restarting at
// 0, attention inside the segment) gives the same loss as B at the start of a row. Fails if RoPE
// ignores /positions or attention crosses segments.
TEST_P(LlamaModel, PackedSegmentEqualsTheSameTokensAtRowStart) {
  const auto& d = GetParam().dims;
  const int T = 16, cut = 7, len_b = T - cut;
  const auto m = model::make_model(d, cpu_ops(), 1, T);
  m->set_params_from_host(random_params(m->layout(), d, 3));
  const auto src = test::random_rows(2, T, d.V, 5);
  data::Batch packed, alone;
  for (auto* b : {&packed, &alone}) {
    b->B = 1, b->T = T;
    b->inputs.assign(T, 0), b->targets.assign(T, 0), b->loss_weights.assign(T, 0.0f);
    b->segment_ids.assign(T, 0), b->positions.assign(T, 0);
  }
  for (int t = 0; t < T; ++t) {  // packed: [A (cut) | B (len_b)]; alone: [B (len_b) | filler]
    const bool in_b = t >= cut;
    packed.inputs[t] = in_b ? src.inputs[T + t - cut] : src.inputs[t];
    packed.targets[t] = in_b ? src.targets[T + t - cut] : src.targets[t];
    packed.loss_weights[t] = in_b ? 1.0f : 0.0f;
    packed.segment_ids[t] = in_b ? 2 : 1;
    packed.positions[t] = in_b ? t - cut : t;
    const bool is_b = t < len_b;
    alone.inputs[t] = is_b ? src.inputs[T + t] : src.inputs[t];
    alone.targets[t] = is_b ? src.targets[T + t] : src.targets[t];
    alone.loss_weights[t] = is_b ? 1.0f : 0.0f;
    alone.segment_ids[t] = is_b ? 1 : 2;
    alone.positions[t] = is_b ? t : t - len_b;
  }
  const auto a = m->forward(packed), b = m->forward(alone);
  EXPECT_EQ(a.weight_sum, len_b);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 2e-6 * b.loss_sum) << GetParam().name;
  // RoPE is relative, so inside a segment a shifted position is invisible; across the boundary it
  // is not: without segment ids B's tokens attend to A's, and restarted positions change their
  // distances. Fails if the model ignores /positions.
  packed.segment_ids.clear();
  const double restarted = m->forward(packed).loss_sum;
  packed.positions.clear();
  EXPECT_GT(std::fabs(m->forward(packed).loss_sum - restarted), 1e-4 * restarted) << GetParam().name;
}

// SPEC §1 on one rank: global batch 8 as GA 8×1, 4×2, 2×4, 1×8 gives the same normalised loss
// and gradients, on rows of very different token counts (some fully masked).
TEST_P(LlamaModel, GradientAccumulationIsOneBigBatch) {
  const auto& d = GetParam().dims;
  const int G = 8, T = 12;
  const auto batch = test::random_rows(G, T, d.V, 2024, true);
  const auto p = random_params(model::param_layout(d), d, 9);
  std::vector<std::vector<float>> normalised;
  std::vector<double> losses;
  for (int ga : {1, 2, 4, 8}) {
    const int b = G / ga;
    const auto m = model::make_model(d, cpu_ops(), b, T);
    m->set_params_from_host(p);
    m->zero_grads();
    for (int micro = 0; micro < ga; ++micro) m->forward_backward(test::slice_rows(batch, micro * b, (micro + 1) * b));
    auto g = m->grads_to_host();
    const double W = g[m->layout().total + 1];
    losses.push_back(g[m->layout().total] / W);
    g.resize(m->layout().total);
    for (auto& x : g) x = static_cast<float>(x / W);
    normalised.push_back(std::move(g));
  }
  for (size_t k = 1; k < losses.size(); ++k) {
    EXPECT_NEAR(losses[k], losses[0], 1e-6 * losses[0]) << "GA split " << k;
    EXPECT_LE(test::max_rel_diff(normalised[k], normalised[0]), 1e-6) << "GA split " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, LlamaModel, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

// Llama-3 RoPE scaling, against transformers' _compute_llama3_parameters worked by hand for
// HS = 8, theta = 500000, factor 8, low 1, high 4, original context 8192: wavelengths
// 2π·theta^(i/4) = 6.28, 167, 4443, 118138 → kept, kept, smoothed, divided by 8.
TEST(RopeInvFreq, Llama3ScalingKeepsShortDividesLongAndSmoothsBetween) {
  config::ModelDims d = llama_base();
  d.HS = 8, d.rope_theta = 500000;
  const auto plain = model::rope_inv_freq(d);
  ASSERT_EQ(plain.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(plain[i], std::pow(500000.0, -i / 4.0), 1e-6 * plain[i]);
  d.rope_scaling = {true, 8, 1, 4, 8192};
  const auto scaled = model::rope_inv_freq(d);
  EXPECT_EQ(scaled[0], plain[0]);
  EXPECT_EQ(scaled[1], plain[1]);
  const double wavelen = 2 * M_PI / plain[2], smooth = (8192 / wavelen - 1) / (4 - 1);
  EXPECT_NEAR(scaled[2], (1 - smooth) * plain[2] / 8 + smooth * plain[2], 1e-6 * plain[2]);
  EXPECT_NEAR(scaled[3], plain[3] / 8, 1e-7 * plain[3]);
}
