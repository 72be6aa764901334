// sftdp/optim.h — the update after the allreduce (SPEC §1): divide by the global weight sum,
// global-norm clipping, AdamW; and the learning-rate schedule (linear warmup, cosine decay to
// learning_rate × learning_rate_final_fraction at the last step).
#pragma once
#include <cstdint>

#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp::optim {

// Learning rate of 0-based step `step` out of `total_steps`.
double learning_rate(const config::Config& cfg, int64_t step, int64_t total_steps);

struct StepStats {
  double loss = 0;        // global loss sum / global weight sum (0 when skipped)
  double weight_sum = 0;  // global weight sum: tokens that counted
  double grad_norm = 0;   // of the normalised gradient, before clipping
  bool skipped = false;   // weight sum 0: no update
  bool nonfinite = false; // loss or gradient norm is NaN/Inf: no update (the trainer stops)
};

class AdamW {
 public:
  AdamW(model::Model& model);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  float* m() { return m_; }  // device, layout.total
  float* v() { return v_; }
  void set_moments_from_host(const std::vector<float>& m, const std::vector<float>& v);
  void moments_to_host(std::vector<float>& m, std::vector<float>& v) const;

  // model.grads() holds the GLOBAL gradient sums and trailing sums (after the allreduce).
  // t: 1-based step number for bias correction. Skips the update when the weight sum is 0.
  StepStats apply(const config::Config& cfg, double lr, int t);

 private:
  model::Model& model_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* scratch_ = nullptr;  // device scalar for the sum of squares
};

}  // namespace sftdp::optim
