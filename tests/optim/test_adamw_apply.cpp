// tests/optim/test_adamw_apply.cpp — the update after the allreduce (SPEC §1): gradients and loss
// divided by the global weight sum, global-norm clipping of that normalised gradient, AdamW, and
// no update at all when the weight sum is 0 (the step is reported skipped).
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

using namespace sftdp;

namespace {

config::ModelDims dims() {
  config::ModelDims d;
  d.L = 1, d.NH = 2, d.C = 8, d.F = 16, d.V = 11, d.maxT = 4;
  return d;
}

struct UpdateFixture {
  std::unique_ptr<model::Model> m_owned = model::make_model(dims(), cpu_ops(), 1, 4);
  model::Model& m = *m_owned;
  std::vector<float> p0, g;
  UpdateFixture(float loss_sum, float weight_sum) {
    model::init_params(p0, m.layout(), dims(), 3);
    m.set_params_from_host(p0);
    g = test::uniform(m.grad_buffer_floats(), 8, -2.f, 2.f);
    g[m.layout().total] = loss_sum;
    g[m.layout().total + 1] = weight_sum;
    cpu_ops().to_device(m.grads(), g.data(), g.size() * sizeof(float));
  }
  // Plain AdamW, step 1, on g·scale: the independent host reference.
  std::vector<float> reference(double lr, double scale, const config::Config& c) {
    std::vector<float> p = p0;
    const auto& lay = m.layout();
    for (size_t i = 0; i < lay.total; ++i) {
      const double gi = g[i] * scale;
      const double mh = (1 - c.adam_b1) * gi / (1 - c.adam_b1), vh = (1 - c.adam_b2) * gi * gi / (1 - c.adam_b2);
      const double wd = i < lay.n_decay ? c.adam_weight_decay : 0.0;
      p[i] = float(p0[i] - lr * (mh / (std::sqrt(vh) + c.adam_eps) + wd * p0[i]));
    }
    return p;
  }
  double raw_norm() const {
    double s = 0;
    for (size_t i = 0; i < m.layout().total; ++i) s += double(g[i]) * g[i];
    return std::sqrt(s);
  }
};

}  // namespace

TEST(AdamWApply, DividesByTheGlobalWeightSumThenUpdates) {
  UpdateFixture s(/*loss_sum=*/30.0f, /*weight_sum=*/12.0f);
  config::Config c;
  c.gradient_clipping_threshold = 0;  // off
  optim::AdamW opt(s.m);
  const auto st = opt.apply(c, 1e-3, 1);
  EXPECT_FALSE(st.skipped);
  EXPECT_DOUBLE_EQ(st.loss, 30.0 / 12.0);
  EXPECT_DOUBLE_EQ(st.weight_sum, 12.0);
  EXPECT_NEAR(st.grad_norm, s.raw_norm() / 12.0, 1e-5 * st.grad_norm);
  EXPECT_TRUE(test::allclose(s.m.params_to_host(), s.reference(1e-3, 1.0 / 12.0, c), 1e-7, 1e-5));
}

TEST(AdamWApply, ClipsTheNormalisedGradientToTheThreshold) {
  UpdateFixture s(5.0f, 2.0f);
  config::Config c;
  const double norm = s.raw_norm() / 2.0;
  c.gradient_clipping_threshold = norm / 4;  // must clip by 4
  c.adam_eps = 1e-3;  // so that the scale of g shows in the update (Adam is scale-invariant at step 1 otherwise)
  optim::AdamW opt(s.m);
  const auto st = opt.apply(c, 1e-2, 1);
  EXPECT_NEAR(st.grad_norm, norm, 1e-5 * norm);  // reported before clipping
  EXPECT_TRUE(test::allclose(s.m.params_to_host(), s.reference(1e-2, 0.25 / 2.0, c), 1e-7, 1e-5));
  EXPECT_FALSE(test::allclose(s.m.params_to_host(), s.reference(1e-2, 1.0 / 2.0, c), 1e-7, 1e-5));
}

TEST(AdamWApply, ZeroWeightSumSkipsTheStepAndChangesNothing) {
  UpdateFixture s(0.0f, 0.0f);
  config::Config c;
  optim::AdamW opt(s.m);
  const auto st = opt.apply(c, 1e-3, 1);
  EXPECT_TRUE(st.skipped);
  EXPECT_TRUE(test::bitwise_equal(s.m.params_to_host(), s.p0));
  std::vector<float> m, v;
  opt.moments_to_host(m, v);
  for (size_t i = 0; i < m.size(); ++i) ASSERT_TRUE(m[i] == 0 && v[i] == 0);
}
