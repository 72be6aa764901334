// src/train/speed_window.cpp — see speed_window.h. The sum is kept beside the window (a step's time
// is added once and subtracted once), so the mean costs nothing per step.
#include "train/speed_window.h"

#include <algorithm>

namespace sftdp::train {

SpeedWindow::SpeedWindow(int64_t log_period)
    : capacity_(static_cast<size_t>(std::max<int64_t>(log_period, kMinSteps))) {}

void SpeedWindow::add(double step_s) {
  if (first_seen_ && !first_dropped_) {  // a second step is here: the warm-up step leaves
    sum_ -= times_.front();
    times_.pop_front();
    first_dropped_ = true;
  }
  first_seen_ = true;
  times_.push_back(step_s);
  sum_ += step_s;
  if (times_.size() > capacity_) {
    sum_ -= times_.front();
    times_.pop_front();
  }
}

double SpeedWindow::mean_step_s() const { return times_.empty() ? 0 : sum_ / double(times_.size()); }

}  // namespace sftdp::train
