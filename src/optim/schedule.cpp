// src/optim/schedule.cpp — learning rate: linear warmup over warmup_steps_fraction × steps (step s
// of W warmup steps gets peak·(s+1)/(W+1)), then cosine from the peak down to
// peak × learning_rate_final_fraction, which the last step always gets.
#include <algorithm>
#include <cmath>

#include "sftdp/optim.h"

namespace sftdp::optim {

double learning_rate(const config::Config& cfg, int64_t step, int64_t total_steps) {
  const double peak = cfg.learning_rate;
  const double final_lr = peak * cfg.learning_rate_final_fraction;
  if (total_steps > 1 && step >= total_steps - 1) return final_lr;  // the last step, always
  const int64_t warmup = static_cast<int64_t>(std::llround(cfg.warmup_steps_fraction * total_steps));
  // Warmup climbs towards the peak without reaching it; the first decay step is the peak.
  if (step < warmup) return peak * double(step + 1) / double(warmup + 1);
  const int64_t decay_steps = total_steps - 1 - warmup;  // from the peak step to the last step
  if (decay_steps <= 0) return peak;
  const double progress = std::clamp(double(step - warmup) / double(decay_steps), 0.0, 1.0);
  return final_lr + 0.5 * (peak - final_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace sftdp::optim
