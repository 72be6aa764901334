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
