// tests/train/test_speed_window.cpp — the step line's speed is a mean over the last
// max(log_period, 10) steps (docs/SPEC.md §6), not the last step's alone; the process's first step
// (warm-up) counts only until a second one is there.
#include <gtest/gtest.h>

#include "train/speed_window.h"

namespace sftdp::train {
namespace {

TEST(SpeedWindow, TheFirstStepAloneIsItsOwnSpeedThenLeaves) {
  SpeedWindow w(1);
  EXPECT_EQ(w.mean_step_s(), 0);
  w.add(5.0);  // warm-up
  EXPECT_DOUBLE_EQ(w.mean_step_s(), 5.0);
  w.add(1.0);
  EXPECT_DOUBLE_EQ(w.mean_step_s(), 1.0);
  w.add(3.0);
  EXPECT_DOUBLE_EQ(w.mean_step_s(), 2.0);
}

TEST(SpeedWindow, OneSlowStepMovesTheMeanByATenthAtLogPeriodOne) {
  SpeedWindow w(1);
  w.add(9.0);
  for (int i = 0; i < 10; ++i) w.add(1.0);
  EXPECT_EQ(w.steps(), 10u);
  EXPECT_DOUBLE_EQ(w.mean_step_s(), 1.0);
  w.add(101.0);  // a step 100x slower on a busy machine
  EXPECT_DOUBLE_EQ(w.mean_step_s(), 11.0) << "(9 x 1 + 101) / 10, not 101";
  for (int i = 0; i < 10; ++i) w.add(1.0);
  EXPECT_DOUBLE_EQ(w.mean_step_s(), 1.0) << "gone again after 10 steps";
}

TEST(SpeedWindow, ALongerLogPeriodIsTheWindow) {
  SpeedWindow w(50);
  w.add(7.0);
  for (int i = 1; i <= 60; ++i) w.add(double(i));
  EXPECT_EQ(w.steps(), 50u);
  EXPECT_DOUBLE_EQ(w.mean_step_s(), (11.0 + 60.0) / 2) << "steps 11..60";
}

}  // namespace
}  // namespace sftdp::train
