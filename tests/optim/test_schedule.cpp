// tests/optim/test_schedule.cpp — the learning-rate schedule of SPEC §3: linear warmup over
// warmup_steps_fraction × steps, then cosine from the peak to peak × learning_rate_final_fraction
// exactly at the last step (always, even when warmup covers the whole run).
#include <gtest/gtest.h>

#include <cmath>

#include "sftdp/optim.h"

using sftdp::optim::learning_rate;

namespace {
sftdp::config::Config schedule(double peak, double warmup, double final_fraction) {
  sftdp::config::Config c;
  c.learning_rate = peak;
  c.warmup_steps_fraction = warmup;
  c.learning_rate_final_fraction = final_fraction;
  return c;
}
}  // namespace

TEST(LearningRate, WarmsUpLinearlyToThePeak) {
  const auto c = schedule(1e-3, 0.1, 0.1);  // 100 steps: 10 warmup steps, then the peak at step 10
  for (int s = 0; s < 10; ++s) EXPECT_DOUBLE_EQ(learning_rate(c, s, 100), 1e-3 * (s + 1) / 11.0);
  for (int s = 1; s <= 10; ++s) EXPECT_GT(learning_rate(c, s, 100), learning_rate(c, s - 1, 100));
}

TEST(LearningRate, LastStepGetsTheFinalFractionEvenWhenWarmupCoversTheRun) {
  for (double warmup : {0.85, 0.9, 1.0}) EXPECT_DOUBLE_EQ(learning_rate(schedule(1e-3, warmup, 0.1), 9, 10), 1e-4);
}

TEST(LearningRate, DecaysByCosineToTheFinalFractionAtTheLastStep) {
  const auto c = schedule(1e-3, 0.1, 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10, 100), 1e-3);           // first step after warmup: peak
  EXPECT_NEAR(learning_rate(c, 99, 100), 1e-4, 1e-15);          // last step: peak × fraction
  const double mid = learning_rate(c, 10 + 89 / 2.0, 100);     // half-way through the decay
  EXPECT_NEAR(mid, 1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + std::cos(M_PI * (44 / 89.0))), 1e-6);
  for (int s = 11; s < 100; ++s) EXPECT_LT(learning_rate(c, s, 100), learning_rate(c, s - 1, 100));
}

TEST(LearningRate, NoWarmupStartsAtThePeak) {
  const auto c = schedule(2e-4, 0.0, 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 50), 2e-4);
  EXPECT_NEAR(learning_rate(c, 49, 50), 0.0, 1e-18);
}

TEST(LearningRate, SingleStepRunUsesThePeak) {
  EXPECT_DOUBLE_EQ(learning_rate(schedule(3e-4, 0.0, 0.1), 0, 1), 3e-4);
}

// ---- lr_schedule and lr_schedule_convention (issue 42) ----

namespace {
sftdp::config::Config shaped(const char* shape, const char* convention, int64_t warmup, double final_fraction) {
  auto c = schedule(1e-3, 0.0, final_fraction);
  c.lr_schedule = shape;
  c.lr_schedule_convention = convention;
  c.warmup_steps = warmup;
  return c;
}
}  // namespace

TEST(LearningRate, LinearDecaysInAStraightLineToTheFinalFraction) {
  const auto c = shaped("linear", "sft-dp", 4, 0.1);  // 4 warmup steps, the peak at step 4, the final at 24
  for (int s = 0; s < 4; ++s) EXPECT_DOUBLE_EQ(learning_rate(c, s, 25), 1e-3 * (s + 1) / 5.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4, 25), 1e-3);
  for (int s = 5; s < 25; ++s) EXPECT_NEAR(learning_rate(c, s, 25), 1e-4 + 9e-4 * (24 - s) / 20.0, 1e-18);
  EXPECT_DOUBLE_EQ(learning_rate(shaped("constant", "sft-dp", 4, 0.1), 24, 25), 1e-3);  // constant: the peak to the end
}

TEST(LearningRate, TransformersConventionIsGetSchedulersLambda) {
  // transformers' get_linear_schedule_with_warmup(W=4, T=20): s/4 in warmup (0 at step 0), then (20-s)/16.
  const auto linear = shaped("linear", "transformers", 4, 0.0);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(learning_rate(linear, s, 20), 1e-3 * (double(s) / 4.0));
  for (int s = 4; s < 20; ++s) EXPECT_EQ(learning_rate(linear, s, 20), 1e-3 * (double(20 - s) / 16.0));
  const auto cosine = shaped("cosine", "transformers", 4, 0.0);  // 0.5·(1 + cos(π·(s − 4)/16))
  for (int s = 4; s < 20; ++s)
    EXPECT_EQ(learning_rate(cosine, s, 20), 1e-3 * (0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * (double(s - 4) / 16.0)))));
  const auto constant = shaped("constant", "transformers", 4, 0.0);  // constant_with_warmup
  EXPECT_EQ(learning_rate(constant, 2, 20), 1e-3 * 0.5);
  EXPECT_EQ(learning_rate(constant, 19, 20), 1e-3);
  // A fraction rounds up there (TrainingArguments.get_warmup_steps): ceil(0.1 × 24) = 3; sft-dp rounds to 2.
  auto fraction = shaped("linear", "transformers", -1, 0.0);
  fraction.warmup_steps_fraction = 0.1;
  EXPECT_EQ(sftdp::optim::warmup_steps(fraction, 24), 3);
  fraction.lr_schedule_convention = "sft-dp";
  EXPECT_EQ(sftdp::optim::warmup_steps(fraction, 24), 2);
}
