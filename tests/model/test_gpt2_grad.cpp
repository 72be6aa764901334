// tests/model/test_gpt2_grad.cpp — the whole model's gradient sums against central finite
// differences of its loss SUM, and the GA factorisation invariance of SPEC §1 on one rank.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/model.h"

using namespace sftdp;

namespace {

std::vector<float> random_params(const model::ParamLayout& lay, const config::ModelDims& d) {
  std::vector<float> p;
  model::init_params(p, lay, d, 7);
  // Perturb LayerNorm and bias terms too, so no parameter sits at a special value.
  const auto noise = test::uniform(p.size(), 99, -0.05f, 0.05f);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

double loss_sum(model::Model& m, const data::Batch& b) { return m.forward(b).loss_sum; }

}  // namespace

// The loss sum is Σ w·CE; its gradient must match d(loss sum)/dθ by central differences.
TEST(Gpt2Gradients, MatchFiniteDifferencesOfLossSum) {
  for (bool segments : {false, true}) {
    const auto d = test::tiny_dims();
    const auto m_owned = model::make_model(d, cpu_ops(), 3, 8);
    auto& m = *m_owned;
    const auto params = random_params(m.layout(), d);
    m.set_params_from_host(params);
    const auto batch = test::random_rows(3, 8, d.V, 11, segments);
    m.zero_grads();
    m.forward_backward(batch);
    const auto grads = m.grads_to_host();
    int checked = 0;
    for (const auto& t : m.layout().tensors) {
      // A few elements of every tensor, spread over it.
      for (size_t k = 0; k < 3; ++k) {
        const size_t i = t.offset + (k * 7919 + 13) % t.numel;
        auto p = params;
        const float h = 1e-2f;
        p[i] = params[i] + h;
        m.set_params_from_host(p);
        const double up = loss_sum(m, batch);
        p[i] = params[i] - h;
        m.set_params_from_host(p);
        const double down = loss_sum(m, batch);
        const double fd = (up - down) / (2.0 * h);
        EXPECT_NEAR(grads[i], fd, 2e-3 + 2e-2 * std::fabs(fd))
            << t.name << "[" << i - t.offset << "] segments=" << segments;
        ++checked;
      }
    }
    EXPECT_GT(checked, 30);
    m.set_params_from_host(params);
  }
}

// Trailing sums of the gradient buffer are exactly the cross-entropy's loss sum and weight sum.
TEST(Gpt2Gradients, TrailingSumsAreLossSumAndWeightSum) {
  const auto d = test::tiny_dims();
  const auto m_owned = model::make_model(d, cpu_ops(), 4, 8);
  auto& m = *m_owned;
  std::vector<float> p;
  model::init_params(p, m.layout(), d, 3);
  m.set_params_from_host(p);
  const auto batch = test::random_rows(4, 8, d.V, 5);
  double w = 0;
  for (float x : batch.loss_weights) w += x;
  const auto fwd = m.forward(batch);
  m.zero_grads();
  m.forward_backward(batch);
  const auto g = m.grads_to_host();
  EXPECT_FLOAT_EQ(g[m.layout().total + 1], static_cast<float>(w));
  EXPECT_NEAR(g[m.layout().total], fwd.loss_sum, 1e-5 * fwd.loss_sum);
  EXPECT_DOUBLE_EQ(fwd.weight_sum, w);
}

// SPEC §1 on one rank: global batch 8 as GA 8×1, 4×2, 2×4, 1×8 gives the same normalised loss
// and gradients, on rows of very different token counts (some fully masked).
TEST(Gpt2Factorisation, GradientAccumulationIsOneBigBatch) {
  const auto d = test::tiny_dims();
  const int G = 8, T = 12;
  const auto batch = test::random_rows(G, T, d.V, 2024);
  std::vector<float> p;
  {
    const auto probe_owned = model::make_model(d, cpu_ops(), 1, T);
    auto& probe = *probe_owned;
    p = random_params(probe.layout(), d);
  }
  std::vector<std::vector<float>> normalised;
  std::vector<double> losses;
  for (int ga : {1, 2, 4, 8}) {
    const int b = G / ga;
    const auto m_owned = model::make_model(d, cpu_ops(), b, T);
    auto& m = *m_owned;
    m.set_params_from_host(p);
    m.zero_grads();
    for (int micro = 0; micro < ga; ++micro) m.forward_backward(test::slice_rows(batch, micro * b, (micro + 1) * b));
    auto g = m.grads_to_host();
    const double W = g[m.layout().total + 1];
    losses.push_back(g[m.layout().total] / W);
    g.resize(m.layout().total);
    for (auto& x : g) x = static_cast<float>(x / W);
    normalised.push_back(std::move(g));
  }
  for (size_t k = 1; k < losses.size(); ++k) {
    EXPECT_NEAR(losses[k], losses[0], 1e-6 * losses[0]) << "GA split " << k;
    EXPECT_LE(test::max_rel_diff(normalised[k], normalised[0]), 1e-6) << "GA split " << k;
  }
  // The bug this project exists to avoid: a mean of micro-batch means differs measurably here.
  double mean_of_means = 0;
  for (int micro = 0; micro < 8; ++micro) {
    const auto m_owned = model::make_model(d, cpu_ops(), 1, T);
    auto& m = *m_owned;
    m.set_params_from_host(p);
    const auto s = m.forward(test::slice_rows(batch, micro, micro + 1));
    mean_of_means += s.weight_sum > 0 ? s.loss_sum / s.weight_sum / 8 : 0;
  }
  EXPECT_GT(std::fabs(mean_of_means - losses[0]), 1e-3 * losses[0]);
}
