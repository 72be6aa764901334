// sftdp/optim.h — the update after the allreduce (SPEC §1): divide by the global weight sum,
// global-norm clipping, AdamW; and the learning-rate schedule (linear warmup, cosine decay to
// learning_rate × learning_rate_final_fraction at the last step). ZeRO-1 (zero_stage 1): each
// rank keeps the AdamW moments of, and updates, only its shard of the flat buffer (ZeroShard).
#pragma once
#include "kernels/adamw.h"
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp::model {
class GraphCache;
}

namespace sftdp::optim {

// Learning rate of 0-based step `step` out of `total_steps` (SPEC §3: warmup, then lr_schedule's decay, in
// lr_schedule_convention's ends).
double learning_rate(const config::Config& cfg, int64_t step, int64_t total_steps);
// Warmup steps of a run of total_steps: warmup_steps, or warmup_steps_fraction × total_steps rounded as the
// convention rounds it (sft-dp: to nearest; transformers: up).
int64_t warmup_steps(const config::Config& cfg, int64_t total_steps);

struct StepStats {
  double loss = 0;        // global loss sum / global weight sum (0 when skipped)
  double weight_sum = 0;  // global weight sum: tokens that counted
  double grad_norm = 0;   // of the normalised gradient, before clipping
  bool skipped = false;   // weight sum 0: no update
  bool nonfinite = false; // loss or gradient norm is NaN/Inf: no update (the trainer stops)
};

// What rank `rank` of `world` owns of a flat buffer of `total` floats whose [0, n_decay) take
// weight decay. The buffer splits into `world` equal blocks of `block` = floor(total / world)
// floats, block r = [r·block, (r+1)·block), plus a tail [world·block, total) of fewer than `world`
// floats that every rank owns (no padding: the model's gradient buffer is total + 2 floats and
// cannot grow, and the tail travels in the small allreduce that carries the loss and weight sums
// anyway). A rank's moments: block floats for its block, then tail floats. decay_block/decay_tail:
// how many leading floats of each piece take weight decay ([0, n_decay) intersected with it).
// world 1 (and zero_stage 0): one block, the whole buffer, no tail.
struct ZeroShard {
  size_t block = 0, begin = 0;           // this rank's block: [begin, begin + block)
  size_t tail_begin = 0, tail = 0;       // [tail_begin, tail_begin + tail), on every rank
  size_t decay_block = 0, decay_tail = 0;
  size_t owned() const { return block + tail; }  // moments per rank, each of m and v
};
ZeroShard zero_shard(size_t total, size_t n_decay, int rank, int world);

// ZeRO-2/3 (zero_stage 2 and 3, issue 25): what rank `rank` of `world` holds of each unit
// (model::Unit) of a flat buffer. A unit of n floats splits into world pieces of
// piece = ceil(n / world) floats: rank r holds the unit's floats [r·piece, min((r+1)·piece, n))
// (`held` of them; fewer, or none, for the last ranks), stored padded with zeros to `piece`, so the
// reduce-scatters and all-gathers move equal blocks (the unit's slot is world·piece floats). A rank's
// shard is its pieces in unit order, piece u at `offset` (the same on every rank): `total` floats
// each of master weights, AdamW m and v and gradient sums. Units are wholly decayed or not and the
// decayed ones come first, so the shard's first `decayed` floats take weight decay.
struct UnitShard {
  size_t begin = 0, size = 0;  // the unit: [begin, begin + size) of the flat buffer
  size_t piece = 0;            // floats per rank
  size_t offset = 0;           // of this unit's piece in the shard
  size_t held = 0;             // this rank's floats of the unit (<= piece)
};
struct UnitShards {
  int rank = 0, world = 1;
  std::vector<UnitShard> units;
  size_t total = 0;    // floats per rank (padding included)
  size_t decayed = 0;  // the shard's leading decayed floats
  // Flat offset of rank r's piece of unit u (its first float), and how many floats r holds of it.
  size_t piece_begin(size_t u, int r) const;
  size_t held_by(size_t u, int r) const;
};
UnitShards unit_shards(const std::vector<model::Unit>& units, size_t n_decay, int rank, int world);

class ZeroUnits;  // src/optim/zero_units.h

class AdamW {
 public:
  // zero_stage 0 without a communicator: moments for the whole buffer; the caller sums the
  // gradient buffer across ranks itself (tests, benches).
  explicit AdamW(model::Model& model);
  // The trainer's: zero_stage 0 (every rank keeps all moments and updates every parameter), 1
  // (ZeRO-1: only this rank's ZeroShard of the moments; the update covers only that shard, then
  // the parameters are all-gathered), or 2 and 3 (issue 25: the model must have been made with the
  // same zero_stage; this installs ZeroUnits as its residency, which holds the gradient sums' and
  // master weights' shards (UnitShards), and the moments follow the same shard). comm and model
  // must outlive this object.
  AdamW(model::Model& model, comm::Communicator& comm, int zero_stage);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  bool sharded() const { return sharded_; }  // zero_stage 1 on more than one rank
  int zero_stage() const { return zero_stage_; }
  // Whether moments_to_host is a collective (every rank must call it; rank 0 receives them).
  bool moments_collective() const { return sharded_ || zero_ != nullptr; }
  const ZeroShard& shard() const { return shard_; }
  size_t owned_floats() const;  // this rank's floats of each of m and v
  size_t moment_bytes() const { return 2 * owned_floats() * sizeof(float); }  // this rank's m and v
  ZeroUnits* zero_units() { return zero_.get(); }  // zero_stage 2 and 3, and 1 with bf16 weights
  const ZeroUnits* zero_units() const { return zero_.get(); }
  float* m() { return m_; }  // device, shard().owned() floats
  float* v() { return v_; }
  // m, v: the GLOBAL layout (layout.total floats); this rank keeps its shard of them.
  void set_moments_from_host(const std::vector<float>& m, const std::vector<float>& v);
  // Floats [begin, begin + n) of the global m (which 0) or v (1), the same on every rank: this rank
  // keeps its part of them (a resume streams the moments in chunks: restore in run_restore.cpp).
  void set_moment_range(int which, size_t begin, const float* data, size_t n);
  // The GLOBAL m and v. moments_collective(): a collective (every rank must call it) that uses
  // model.grads() or gradient slots as scratch, so call it only between steps (after apply); only
  // rank 0 receives them (the checkpoint writer), the others get empty vectors and hold no global
  // copy on the host.
  void moments_to_host(std::vector<float>& m, std::vector<float>& v);

  // Sums model.grads() (gradient sums, loss sum, weight sum) across ranks: zero_stage 0 one
  // allreduce of the whole buffer; sharded, a reduce-scatter of the blocks (only this rank's
  // block is summed afterwards) and one allreduce of the tail and the two sums. Needs the comm.
  // zero_stage 2/3 (and 1 with bf16 weights): the gradient sums were reduce-scattered during each
  // micro-step's backward (stage 1: here, once); the loss and weight sums (model.sums()) stay this
  // rank's: apply sums them across ranks in the gradient norm's allreduce, no collective of their own.
  void reduce_gradients();
  // model.grads() holds the GLOBAL gradient sums and trailing sums (after reduce_gradients, or
  // the caller's allreduce), at least in this rank's shard (ZeroUnits: its shard holds the global
  // gradient sums, model.sums() this rank's loss and weight sums; StepStats has the global ones). t: 1-based step number for bias
  // correction. Skips the update when the weight sum is 0. Sharded: the gradient norm is the
  // square root of the allreduced per-shard sums of squares, and the updated parameters are
  // all-gathered, so every rank ends with the same parameters. zero_stage 0: the device decides from
  // the sums (Ops::adamw_step) and the host waits once, for the step's statistics, at the end.
  StepStats apply(const config::Config& cfg, double lr, int t);

 private:
  void allocate(size_t floats);
  StepStats apply_on_device(const config::Config& cfg, double lr, int t);  // zero_stage 0, unsharded
  void gather_moment(const float* mine, std::vector<float>& out);
  double sum_squares(const float* x, size_t n);  // of n device floats, on the host (0 for none)
  model::Model& model_;
  comm::Communicator* comm_ = nullptr;
  bool sharded_ = false;
  int zero_stage_ = 0;
  std::unique_ptr<ZeroUnits> zero_;
  ZeroShard shard_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* scratch_ = nullptr;  // device scalar for the sum of squares
  AdamwHyper* hyper_ = nullptr;  // device: the step's settings (apply_on_device)
  AdamwStats* stats_ = nullptr;  // device: what the step decided
  std::unique_ptr<model::GraphCache> graphs_;  // apply_on_device's update, a CUDA graph once repeated
};

}  // namespace sftdp::optim
