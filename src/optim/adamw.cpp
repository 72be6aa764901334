// src/optim/adamw.cpp — the update after the gradient sums are summed across ranks (SPEC §1):
// read the global loss and weight sums, skip when the weight sum is 0, global grad norm of g/W,
// clip, one fused AdamW whose grad_scale folds 1/W and the clip factor (no extra pass over the
// gradients). Under ZeRO-1 the same update runs on this rank's ZeroShard only (block, then tail),
// and an all-gather of the parameters follows; under ZeRO-2/3 on the UnitShards shard of ZeroUnits
// (master weights, gradient sums), whose publish() takes the masters back to the model.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/graph_cache.h"
#include "optim/zero_units.h"
#include "sftdp/check.h"
#include "sftdp/config.h"
#include "sftdp/optim.h"

namespace sftdp::optim {

AdamW::AdamW(model::Model& model) : model_(model) {
  SFTDP_ASSERT(model.zero_stage() < 2, "AdamW without a communicator: zero_stage 0 or 1 only");
  shard_ = zero_shard(model_.trainable_layout().total, model_.trainable_layout().n_decay, 0, 1);
  allocate(shard_.owned());
}

AdamW::AdamW(model::Model& model, comm::Communicator& comm, int zero_stage)
    : model_(model),
      comm_(&comm),
      sharded_(zero_stage == 1 && comm.world() > 1 && !model.bf16_weights()),
      zero_stage_(zero_stage) {
  SFTDP_ASSERT(zero_stage >= 0 && zero_stage <= 3, "zero_stage must be 0..3");
  SFTDP_ASSERT(model.zero_stage() == config::model_zero_stage(zero_stage),
               "AdamW: the model was made for another zero_stage");
  const auto& lay = model_.trainable_layout();
  // Stage 1 with bf16 weights keeps the fp32 masters in ZeroUnits's shard too (the model has none).
  if (zero_stage >= 2 || (zero_stage == 1 && model.bf16_weights())) {
    zero_ = std::make_unique<ZeroUnits>(model, comm, zero_stage);
    model.set_residency(zero_.get());
    allocate(zero_->plan().total);
    return;
  }
  shard_ = sharded_ ? zero_shard(lay.total, lay.n_decay, comm.rank(), comm.world())
                    : zero_shard(lay.total, lay.n_decay, 0, 1);
  allocate(shard_.owned());
}

void AdamW::allocate(size_t floats) {
  const Ops& o = model_.ops();
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  m_ = static_cast<float*>(o.alloc(bytes));
  v_ = static_cast<float*>(o.alloc(bytes));
  scratch_ = static_cast<float*>(o.alloc(sizeof(float)));
  hyper_ = static_cast<AdamwHyper*>(o.alloc(sizeof(AdamwHyper)));
  stats_ = static_cast<AdamwStats*>(o.alloc(sizeof(AdamwStats)));
  graphs_ = std::make_unique<model::GraphCache>(o);
}

AdamW::~AdamW() {
  graphs_.reset();  // before the buffers its graphs use
  if (zero_) model_.set_residency(nullptr);
  const Ops& o = model_.ops();
  o.free(m_);
  o.free(v_);
  o.free(scratch_);
  o.free(hyper_);
  o.free(stats_);
}

size_t AdamW::owned_floats() const { return zero_ ? zero_->plan().total : shard_.owned(); }

void AdamW::set_moments_from_host(const std::vector<float>& m, const std::vector<float>& v) {
  const size_t n = model_.trainable_layout().total;
  SFTDP_ASSERT(m.size() == n && v.size() == n, "moment buffer size mismatch");
  set_moment_range(0, 0, m.data(), n);
  set_moment_range(1, 0, v.data(), n);
}

void AdamW::set_moment_range(int which, size_t begin, const float* data, size_t n) {
  SFTDP_ASSERT(begin + n <= model_.trainable_layout().total, "moment range beyond the layout");
  float* mine = which == 0 ? m_ : v_;
  if (zero_) return zero_->shard_from_range(mine, begin, data, n);
  // ZeroShard: this rank's block at mine[0, block), the tail after it (zero_stage 0: one block, all).
  const Ops& o = model_.ops();
  const ZeroShard& s = shard_;
  auto take = [&](size_t piece_begin, size_t piece_len, float* dst) {
    const size_t lo = std::max(piece_begin, begin), hi = std::min(piece_begin + piece_len, begin + n);
    if (lo < hi) o.to_device(dst + (lo - piece_begin), data + (lo - begin), (hi - lo) * sizeof(float));
  };
  take(s.begin, s.block, mine);
  take(s.tail_begin, s.tail, mine + s.block);
}

// Sharded: every rank's block through the gradient buffer (free between steps), all-gathered
// (NCCL has no gather); rank 0 copies it out, with the tail (the same on every rank) from its own.
void AdamW::gather_moment(const float* mine, std::vector<float>& out) {
  const Ops& o = model_.ops();
  const ZeroShard& s = shard_;
  if (!sharded_) {
    out.resize(model_.trainable_layout().total);
    o.to_host(out.data(), mine, s.block * sizeof(float));
    return;
  }
  float* scratch = model_.grads();
  o.copy(scratch + s.begin, mine, s.block * sizeof(float));
  comm_->all_gather(scratch, s.block);
  out.clear();
  if (comm_->rank() != 0) return;
  out.resize(model_.trainable_layout().total);
  o.to_host(out.data(), scratch, s.tail_begin * sizeof(float));
  o.to_host(out.data() + s.tail_begin, mine + s.block, s.tail * sizeof(float));
}

void AdamW::moments_to_host(std::vector<float>& m, std::vector<float>& v) {
  if (zero_) {
    m = zero_->shard_to_host(m_);
    v = zero_->shard_to_host(v_);
    return;
  }
  gather_moment(m_, m);
  gather_moment(v_, v);
}

void AdamW::reduce_gradients() {
  SFTDP_ASSERT(comm_ != nullptr, "AdamW::reduce_gradients needs the communicator constructor");
  if (zero_) {  // the gradient sums were reduce-scattered during backward (stage 1: now, once); the loss
                // and weight sums go with the gradient norm's allreduce in apply
    if (zero_->stage() == 1) zero_->reduce_full_gradients();
    return;
  }
  float* g = model_.grads();
  if (!sharded_) {  // one allreduce: gradient sums, loss sum and weight sum together
    comm_->allreduce_sum(g, model_.grad_buffer_floats());
    return;
  }
  comm_->reduce_scatter_sum(g, shard_.block);
  // The tail and the two trailing sums are contiguous: [tail_begin, total + 2).
  comm_->allreduce_sum(g + shard_.tail_begin, shard_.tail + 2);
}

double AdamW::sum_squares(const float* x, size_t n) {
  if (n == 0) return 0.0;
  const Ops& o = model_.ops();
  float r = 0;
  o.sum_squares(scratch_, x, n);
  o.to_host(&r, scratch_, sizeof r);
  return double(r);
}

// zero_stage 0: Σg² and the update queued, the skip / not-finite / clip decisions made on the device from the sums
// (Ops::adamw_step: the host's arithmetic, so bitwise the update the host path made), one wait for the statistics.
StepStats AdamW::apply_on_device(const config::Config& cfg, double lr, int t) {
  SFTDP_ASSERT(t >= 1, "AdamW::apply: the step t is 1-based");
  const Ops& o = model_.ops();
  const size_t P = model_.trainable_layout().total;
  const float b1 = static_cast<float>(cfg.adam_b1), b2 = static_cast<float>(cfg.adam_b2);
  const AdamwHyper h{static_cast<float>(lr),
                     b1,
                     b2,
                     static_cast<float>(cfg.adam_eps),
                     static_cast<float>(cfg.adam_weight_decay),
                     static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t))),
                     static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t))),
                     cfg.gradient_clipping_threshold};
  o.to_device_async(hyper_, &h, sizeof h);  // before the update queued next, graph or not
  graphs_->set_enabled(cfg.cuda_graphs);
  graphs_->run({static_cast<int64_t>(P)}, [&] {
    o.sum_squares(scratch_, model_.grads(), P);
    o.adamw_step(model_.trainable_params(), m_, v_, model_.grads(), P, shard_.decay_block, hyper_, model_.sums(),
                 scratch_, stats_);
  });
  AdamwStats d{};
  o.to_host(&d, stats_, sizeof d);
  StepStats s;
  s.weight_sum = d.weight_sum, s.loss = d.loss, s.grad_norm = d.grad_norm;
  s.skipped = d.skipped != 0, s.nonfinite = d.nonfinite != 0;
  return s;
}

StepStats AdamW::apply(const config::Config& cfg, double lr, int t) {
  if (!zero_ && !sharded_) return apply_on_device(cfg, lr, t);
  const Ops& o = model_.ops();
  float sums[2];
  o.to_host(sums, model_.sums(), sizeof sums);
  StepStats s;
  // The global norm: the sum of squares of this rank's part, summed across ranks where parts differ.
  // ZeroUnits (zero_stage 2/3, and 1 with bf16 weights): the unit shard (its padding holds zeros), whose
  // sum of squares is allreduced together with this rank's loss and weight sums (3 doubles): the
  // reduce-scatters leave each rank only its pieces, and the norm of the gradient SUMS needs no global
  // weight sum yet (‖g/W‖ = ‖g‖/W), so the counts need no collective of their own.
  double sumsq = 0, loss_sum = sums[0];
  s.weight_sum = sums[1];
  if (zero_) {
    double reduced[3] = {sum_squares(zero_->grad_sums(), zero_->plan().total), loss_sum, s.weight_sum};
    comm_->allreduce_sum_host(reduced, 3);
    sumsq = reduced[0], loss_sum = reduced[1], s.weight_sum = reduced[2];
  }
  if (!(s.weight_sum > 0)) {  // no token counted anywhere: nothing to learn from
    s.skipped = true;
    return s;
  }
  s.loss = loss_sum / s.weight_sum;
  // Otherwise zero_stage 1: the block, then the tail that every rank holds added once; 0: the whole
  // buffer, the same on every rank.
  const ZeroShard& sh = shard_;
  if (!zero_ && !sharded_) {
    sumsq = sum_squares(model_.grads(), model_.trainable_layout().total);
  } else if (!zero_) {
    sumsq = sum_squares(model_.grads() + sh.begin, sh.block);
    comm_->allreduce_sum_host(&sumsq, 1);
    sumsq += sum_squares(model_.grads() + sh.tail_begin, sh.tail);
  }
  s.grad_norm = std::sqrt(sumsq) / s.weight_sum;
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    s.nonfinite = true;
    return s;
  }
  double clip = 1.0;
  if (cfg.gradient_clipping_threshold > 0 && s.grad_norm > cfg.gradient_clipping_threshold)
    clip = cfg.gradient_clipping_threshold / s.grad_norm;
  const float grad_scale = static_cast<float>(clip / s.weight_sum);
  auto update = [&](float* params, float* m, float* v, const float* g, size_t n, size_t n_decay) {
    if (n == 0) return;
    o.adamw_update(params, m, v, g, n, n_decay, static_cast<float>(lr), static_cast<float>(cfg.adam_b1),
                   static_cast<float>(cfg.adam_b2), static_cast<float>(cfg.adam_eps),
                   static_cast<float>(cfg.adam_weight_decay), t, grad_scale);
  };
  if (zero_) {  // one fused update of the shard (decayed units first), then the masters to the model
    const UnitShards& plan = zero_->plan();
    update(zero_->master(), m_, v_, zero_->grad_sums(), plan.total, plan.decayed);
    zero_->publish();
    return s;
  }
  float* p = model_.trainable_params();
  float* g = model_.grads();
  update(p + sh.begin, m_, v_, g + sh.begin, sh.block, sh.decay_block);
  update(p + sh.tail_begin, m_ + sh.block, v_ + sh.block, g + sh.tail_begin, sh.tail, sh.decay_tail);
  if (sharded_) comm_->all_gather(p, sh.block);
  return s;
}

}  // namespace sftdp::optim
