// src/train/speed_window.h — the step line's speed (tok/s, TFLOP/s, MFU, ms; docs/SPEC.md §6): the
// mean step time over the last max(log_period, kMinSteps) steps of this process, not one step's, so a
// busy machine's single slow or fast step does not swing it. The process's first step (allocations,
// kernel and graph set-up) counts only until a second one is there. metrics.jsonl keeps every step's
// own time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>

namespace sftdp::train {

class SpeedWindow {
 public:
  static constexpr int64_t kMinSteps = 10;
  explicit SpeedWindow(int64_t log_period);
  void add(double step_s);        // the time of the step just finished
  double mean_step_s() const;     // over the window; 0 before the first step
  size_t steps() const { return times_.size(); }

 private:
  size_t capacity_;
  bool first_seen_ = false, first_dropped_ = false;
  std::deque<double> times_;
  double sum_ = 0;
};

}  // namespace sftdp::train
