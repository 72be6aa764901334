// src/optim/schedule.cpp — the learning rate of optimizer step s of T (SPEC §3): linear warmup over W
// steps, then `lr_schedule`'s decay (cosine or linear) from the peak to peak × learning_rate_final_fraction,
// or constant at the peak. W is warmup_steps, or warmup_steps_fraction × T.
// Two conventions for the ends (lr_schedule_convention):
//   sft-dp:       warmup step s gets peak·(s+1)/(W+1) (never 0); W = round(fraction·T); the decay reaches
//                 the final value exactly at the last step.
//   transformers: its get_scheduler's lr_lambda(s) (transformers/optimization.py): warmup peak·s/max(1, W)
//                 (step 0 trains at 0 when W > 0); W = ceil(fraction·T) (TrainingArguments.get_warmup_steps);
//                 decay progress (s − W)/max(1, T − W), so the last step is one step short of the end.
#include <algorithm>
#include <cmath>

#include "sftdp/optim.h"

namespace sftdp::optim {
namespace {

// The decay's share of (peak − final) left at progress p in [0, 1]: 1 at the start, 0 at the end.
double decay_left(const std::string& shape, double p) {
  p = std::clamp(p, 0.0, 1.0);
  if (shape == "linear") return 1.0 - p;
  return 0.5 * (1.0 + std::cos(M_PI * p));  // cosine
}

// transformers' lr_lambda, in its own expressions (so the doubles are its doubles), times the peak; a final
// fraction f > 0 lifts the floor as its cosine_with_min_lr does (factor·(1 − f) + f).
double transformers_rate(const config::Config& cfg, int64_t step, int64_t total_steps, int64_t warmup) {
  const double peak = cfg.learning_rate, f = cfg.learning_rate_final_fraction;
  if (step < warmup) return peak * (double(step) / double(std::max<int64_t>(1, warmup)));
  if (cfg.lr_schedule == "constant") return peak;
  const double span = double(std::max<int64_t>(1, total_steps - warmup));
  double factor;
  if (cfg.lr_schedule == "linear") {
    factor = std::max(0.0, double(total_steps - step) / span);
  } else {  // cosine, num_cycles 0.5
    const double progress = double(step - warmup) / span;
    factor = std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
  }
  return f == 0 ? peak * factor : peak * (factor * (1 - f) + f);
}

}  // namespace

int64_t warmup_steps(const config::Config& cfg, int64_t total_steps) {
  if (cfg.warmup_steps >= 0) return cfg.warmup_steps;
  const double w = cfg.warmup_steps_fraction * double(total_steps);
  if (cfg.lr_schedule_convention == "transformers") return static_cast<int64_t>(std::ceil(w));
  return static_cast<int64_t>(std::llround(w));
}

double learning_rate(const config::Config& cfg, int64_t step, int64_t total_steps) {
  const int64_t warmup = warmup_steps(cfg, total_steps);
  if (cfg.lr_schedule_convention == "transformers") return transformers_rate(cfg, step, total_steps, warmup);
  const double peak = cfg.learning_rate;
  const double final_lr = cfg.lr_schedule == "constant" ? peak : peak * cfg.learning_rate_final_fraction;
  if (total_steps > 1 && step >= total_steps - 1) return final_lr;  // the last step, always
  // Warmup climbs towards the peak without reaching it; the first decay step is the peak.
  if (step < warmup) return peak * double(step + 1) / double(warmup + 1);
  const int64_t decay_steps = total_steps - 1 - warmup;  // from the peak step to the last step
  if (decay_steps <= 0) return peak;
  return final_lr + (peak - final_lr) * decay_left(cfg.lr_schedule, double(step - warmup) / double(decay_steps));
}

}  // namespace sftdp::optim
