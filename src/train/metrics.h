// src/train/metrics.h — metrics.jsonl (SPEC §6), written by rank 0 only. On resume from step S
// the lines of steps > S (written after that checkpoint by a run that then died) are dropped,
// so the file always describes one trajectory.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace sftdp::train {

struct StepMetrics {
  int64_t step = 0;  // completed steps (first line: 1)
  double loss = 0, lr = 0, grad_norm = 0, weight_sum = 0, tokens_per_s = 0, step_time_s = 0;
  int64_t epoch = 0;
  bool skipped = false;
};

class MetricsWriter {
 public:
  // Opens path for appending after keeping only lines with step <= keep_up_to_step.
  MetricsWriter(const std::string& path, int64_t keep_up_to_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void step(const StepMetrics& m);
  void eval(int64_t step, double eval_loss, double eval_weight_sum);

 private:
  void write_line(const std::string& line);
  FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace sftdp::train
