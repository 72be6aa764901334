// src/train/metrics.h — metrics.jsonl (SPEC §6), written by rank 0 only. On resume from step S
// the lines of steps > S (written after that checkpoint by a run that then died) are dropped,
// so the file always describes one trajectory. The same values go to TensorBoard event files in
// tensorboard/ beside it (train/tensorboard.h): a new file per run, flushed with every line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "train/tensorboard.h"

namespace sftdp::train {

struct StepMetrics {
  int64_t step = 0;  // completed steps (first line: 1)
  double loss = 0, lr = 0, grad_norm = 0, weight_sum = 0, tokens_per_s = 0, step_time_s = 0;
  int64_t epoch = 0;
  double tflops = 0;  // the job's model FLOPs (train/flops.h) per second, in 1e12
  double mfu = -1;    // tflops / the job's dense bf16 peak; < 0: peak unknown (CPU), not written
  bool skipped = false;
};

// The largest `step` of the lines in a metrics.jsonl (step and eval lines); -1 when it has none or is
// missing. The trainer compares it with the step it starts from (lines beyond it are dropped).
int64_t last_logged_step(const std::string& path);

class MetricsWriter {
 public:
  // Opens path for appending after keeping only lines with step <= keep_up_to_step, and a new
  // event file in <dir of path>/tensorboard: a fresh run (keep_up_to_step < 0) first removes the
  // event files of earlier runs there; a resumed one starts its file with a SessionLog START at
  // keep_up_to_step + 1, so TensorBoard drops the later points of the run that died.
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
  std::optional<tensorboard::EventWriter> events_;
};

}  // namespace sftdp::train
