// src/optim/adamw.cpp — the update after the allreduce (SPEC §1): read the global loss and weight
// sums, skip when the weight sum is 0, global grad norm of g/W, clip, one fused AdamW whose
// grad_scale folds 1/W and the clip factor (no extra pass over the gradients).
#include <cmath>

#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/optim.h"

namespace sftdp::optim {

AdamW::AdamW(model::Model& model) : model_(model) {
  const Ops& o = model_.ops();
  const size_t bytes = model_.layout().total * sizeof(float);
  m_ = static_cast<float*>(o.alloc(bytes));
  v_ = static_cast<float*>(o.alloc(bytes));
  scratch_ = static_cast<float*>(o.alloc(sizeof(float)));
}

AdamW::~AdamW() {
  const Ops& o = model_.ops();
  o.free(m_);
  o.free(v_);
  o.free(scratch_);
}

void AdamW::set_moments_from_host(const std::vector<float>& m, const std::vector<float>& v) {
  const size_t n = model_.layout().total;
  SFTDP_ASSERT(m.size() == n && v.size() == n, "moment buffer size mismatch");
  model_.ops().to_device(m_, m.data(), n * sizeof(float));
  model_.ops().to_device(v_, v.data(), n * sizeof(float));
}

void AdamW::moments_to_host(std::vector<float>& m, std::vector<float>& v) const {
  const size_t n = model_.layout().total;
  m.resize(n);
  v.resize(n);
  model_.ops().to_host(m.data(), m_, n * sizeof(float));
  model_.ops().to_host(v.data(), v_, n * sizeof(float));
}

StepStats AdamW::apply(const config::Config& cfg, double lr, int t) {
  const Ops& o = model_.ops();
  const auto& lay = model_.layout();
  float sums[2];
  o.to_host(sums, model_.grads() + lay.total, sizeof sums);
  StepStats s;
  s.weight_sum = sums[1];
  if (!(s.weight_sum > 0)) {  // no token counted anywhere: nothing to learn from
    s.skipped = true;
    return s;
  }
  s.loss = double(sums[0]) / s.weight_sum;
  o.sum_squares(scratch_, model_.grads(), lay.total);
  float sumsq = 0;
  o.to_host(&sumsq, scratch_, sizeof sumsq);
  s.grad_norm = std::sqrt(double(sumsq)) / s.weight_sum;
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    s.nonfinite = true;
    return s;
  }
  double clip = 1.0;
  if (cfg.gradient_clipping_threshold > 0 && s.grad_norm > cfg.gradient_clipping_threshold)
    clip = cfg.gradient_clipping_threshold / s.grad_norm;
  const float grad_scale = static_cast<float>(clip / s.weight_sum);
  o.adamw_update(model_.params(), m_, v_, model_.grads(), lay.total, lay.n_decay,
                 static_cast<float>(lr), static_cast<float>(cfg.adam_b1),
                 static_cast<float>(cfg.adam_b2), static_cast<float>(cfg.adam_eps),
                 static_cast<float>(cfg.adam_weight_decay), t, grad_scale);
  return s;
}

}  // namespace sftdp::optim
