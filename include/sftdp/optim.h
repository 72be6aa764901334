// sftdp/optim.h — the update after the allreduce (SPEC §1): divide by the global weight sum,
// global-norm clipping, AdamW; and the learning-rate schedule (linear warmup, cosine decay to
// learning_rate × learning_rate_final_fraction at the last step). ZeRO-1 (zero_stage 1): each
// rank keeps the AdamW moments of, and updates, only its shard of the flat buffer (ZeroShard).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sftdp/comm.h"
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

class AdamW {
 public:
  // zero_stage 0 without a communicator: moments for the whole buffer; the caller sums the
  // gradient buffer across ranks itself (tests, benches).
  explicit AdamW(model::Model& model);
  // The trainer's: zero_stage 0 (every rank keeps all moments and updates every parameter) or 1
  // (ZeRO-1: only this rank's ZeroShard of the moments; the update covers only that shard, then
  // the parameters are all-gathered). comm must outlive this object.
  AdamW(model::Model& model, comm::Communicator& comm, int zero_stage);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  bool sharded() const { return sharded_; }  // zero_stage 1 on more than one rank
  const ZeroShard& shard() const { return shard_; }
  size_t moment_bytes() const { return 2 * shard_.owned() * sizeof(float); }  // this rank's m and v
  float* m() { return m_; }  // device, shard().owned() floats
  float* v() { return v_; }
  // m, v: the GLOBAL layout (layout.total floats); this rank keeps its shard of them.
  void set_moments_from_host(const std::vector<float>& m, const std::vector<float>& v);
  // The GLOBAL m and v. Sharded: a collective (every rank must call it) that uses model.grads()
  // as scratch, so call it only between steps (after apply); only rank 0 receives them (the
  // checkpoint writer), the others get empty vectors and hold no global copy on the host.
  void moments_to_host(std::vector<float>& m, std::vector<float>& v);

  // Sums model.grads() (gradient sums, loss sum, weight sum) across ranks: zero_stage 0 one
  // allreduce of the whole buffer; sharded, a reduce-scatter of the blocks (only this rank's
  // block is summed afterwards) and one allreduce of the tail and the two sums. Needs the comm.
  void reduce_gradients();
  // model.grads() holds the GLOBAL gradient sums and trailing sums (after reduce_gradients, or
  // the caller's allreduce), at least in this rank's shard. t: 1-based step number for bias
  // correction. Skips the update when the weight sum is 0. Sharded: the gradient norm is the
  // square root of the allreduced per-shard sums of squares, and the updated parameters are
  // all-gathered, so every rank ends with the same parameters.
  StepStats apply(const config::Config& cfg, double lr, int t);

 private:
  void allocate(const ZeroShard& shard);
  void gather_moment(const float* mine, std::vector<float>& out);
  model::Model& model_;
  comm::Communicator* comm_ = nullptr;
  bool sharded_ = false;
  ZeroShard shard_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* scratch_ = nullptr;  // device scalar for the sum of squares
};

}  // namespace sftdp::optim
