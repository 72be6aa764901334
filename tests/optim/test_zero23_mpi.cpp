// tests/optim/test_zero23_mpi.cpp — under mpiexec: ZeRO-2 and ZeRO-3 (zero_stage 2 and 3, SPEC §1)
// are the zero_stage 0 optimisation. On every world size CTest runs (2 and 4) and GA 1 and 2:
// - the gradient sums each rank holds in its shard after step 1's micro-steps, gathered into the global
//   layout, equal the float64 PyTorch reference's gradient of the loss sum over the whole global batch
//   (tests/model/reference_gpt2.py) to 1e-4 per tensor, and the loss and weight sums equal its sums;
// - those two sums make no collective of their own: they travel in the gradient norm's allreduce;
// - four steps with clipping on a GPT-2, a Llama-family model (GQA, q/k norm, untied head) and LoRA
//   adapters with dropout on that Llama: the loss and gradient norm of zero_stage 0 to 1e-6, the
//   parameters and both moments to 1e-6 after step 1 and 1e-5 after step 4; the frozen base of the
//   LoRA run bitwise unchanged;
// - a rank whose micro-batch has no weighted token still makes every collective (the schedule is
//   replayed without kernels) and the step equals zero_stage 0's;
// - two runs of the same stage are bitwise equal; global moments and parameters split into shards
//   and gathered back bit for bit; the shard is 1/world of the parameters plus padding;
// - at every stage 0-3, parameters and moments loaded in chunks of any size (as restore streams them)
//   are what loading the whole vectors gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "common/reference_gpt2.h"
#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "optim/zero_units.h"
#include "sftdp/comm.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

using namespace sftdp;

namespace {

constexpr int kB = 2, kT = 8;
// The global weight sum of zero_stage 0 is the ranks' fp32 sums summed in fp32 (the tail of its one
// allreduce); of stages 2/3 the same fp32 values summed in fp64 (the norm's allreduce). With these
// tests' fractional loss weights the two round apart by at most world − 1 fp32 ulps (3 · 2^-24 of the
// sum at 4 ranks); with 0/1 weights, as training data has, both are exact integers and equal (the
// integration tests compare them bitwise).
constexpr double kSumOfRanks = 3.0 / (1 << 24);

config::ModelDims llama_dims() {
  auto d = test::tiny_llama_dims();
  d.qk_norm = true, d.tied = false;
  return d;
}

model::LoraSpec lora_on(const config::ModelDims& d) {
  model::LoraSpec s;
  s.rank = 4, s.alpha = 8, s.dropout = 0.1, s.seed = 3;
  for (const auto& m : model::linear_modules(d)) s.modules.push_back(m.name);
  return s;
}

// rows_of_rank with the row ids LoRA's dropout keys on (row index in the "training data").
data::Batch rows(int rank, int micro, int V) {
  auto b = test::rows_of_rank(rank, micro, kB, kT, V);
  for (int r = 0; r < kB; ++r) b.row_ids.push_back(int64_t(micro) * 1000 + rank * kB + r);
  return b;
}

// ||a − b|| / ||b|| over the whole vector (the integration tests' max_rel). Not the largest element's
// error: after an AdamW step an element whose gradient is near 0 moves by lr·g/(|g| + eps), so the
// order of a few fp32 sums can move it by a visible fraction of lr (1.04e-6 of the largest parameter
// in clang's -O1 build, 0.6e-6 in gcc's) while the vector as a whole agrees to 1e-7.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    s += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(s, 1e-300));
}

// One model and its optimiser at a ZeRO stage, seeded identically on every rank and stage.
struct Trained {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<optim::AdamW> opt;
  int ga;
  Trained(comm::Communicator& c, const config::ModelDims& d, int stage, int ga_steps, const model::LoraSpec& lora = {})
      : ga(ga_steps) {
    m = model::make_model(d, cpu_ops(), kB, kT, false, false, lora, stage >= 2 ? stage : 0);
    opt = std::make_unique<optim::AdamW>(*m, c, stage);
    std::vector<float> p;
    model::init_params(p, m->layout(), d, 1);
    m->set_params_from_host(p);
    if (lora.enabled()) {
      model::init_lora(p, m->trainable_layout(), 5);
      const auto noise = test::uniform(p.size(), 6, -0.05f, 0.05f);  // B starts at 0: make it matter
      for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
      m->set_trainable_from_host(p);
    }
  }
  // Step `step` (1-based) of rank `rank`; `empty_rank` feeds a micro-batch with no weighted token.
  optim::StepStats step(const config::Config& cfg, int rank, int step, int empty_rank = -1) {
    m->set_step(step);
    m->zero_grads();
    for (int micro = 0; micro < ga; ++micro) {
      auto b = rows(rank, step * 10 + micro, m->dims().V);
      if (rank == empty_rank && micro == 0) std::fill(b.loss_weights.begin(), b.loss_weights.end(), 0.0f);
      m->forward_backward(b);
    }
    opt->reduce_gradients();
    return opt->apply(cfg, 1e-2, step);
  }
  // Collectives: every rank calls them; rank 0 gets the global vectors (zero_stage 0: every rank).
  std::vector<float> params() { return m->trainable_to_host(); }
  std::pair<std::vector<float>, std::vector<float>> moments() {
    std::vector<float> a, b;
    opt->moments_to_host(a, b);
    return {a, b};
  }
};

// Forwards every collective to the MPI communicator and counts the ones a step's end makes.
class CountingComm : public comm::Communicator {
 public:
  explicit CountingComm(comm::Communicator& c) : c_(c) {}
  int float_allreduces = 0;             // allreduce_sum and start_allreduce_sum
  std::vector<size_t> host_allreduces;  // n of each allreduce_sum_host
  const char* name() const override { return c_.name(); }
  int rank() const override { return c_.rank(); }
  int world() const override { return c_.world(); }
  void allreduce_sum(float* buf, size_t n) override { ++float_allreduces, c_.allreduce_sum(buf, n); }
  void start_allreduce_sum(float* buf, size_t n) override { ++float_allreduces, c_.start_allreduce_sum(buf, n); }
  void wait_allreduces() override { c_.wait_allreduces(); }
  void reduce_scatter_sum(float* buf, size_t block) override { c_.reduce_scatter_sum(buf, block); }
  void all_gather(float* buf, size_t block) override { c_.all_gather(buf, block); }
  Ticket start_reduce_scatter_sum(const float* send, float* recv, size_t block) override {
    return c_.start_reduce_scatter_sum(send, recv, block);
  }
  Ticket start_all_gather(const float* send, float* recv, size_t block) override {
    return c_.start_all_gather(send, recv, block);
  }
  Ticket start_all_gather_bf16(uint16_t* buf, size_t block) override { return c_.start_all_gather_bf16(buf, block); }
  void wait(Ticket t) override { c_.wait(t); }
  void wait_all() override { c_.wait_all(); }
  void allreduce_sum_host(double* buf, size_t n) override { host_allreduces.push_back(n), c_.allreduce_sum_host(buf, n); }
  void broadcast_host(void* buf, size_t bytes, int root) override { c_.broadcast_host(buf, bytes, root); }
  void barrier() override { c_.barrier(); }
  std::unique_ptr<comm::Group> context_group(int n) override { return c_.context_group(n); }
  [[noreturn]] void abort(int code) override {
    c_.abort(code);
    std::abort();  // not reached (gcc does not carry [[noreturn]] through the virtual call)
  }

 private:
  comm::Communicator& c_;
};

class Zero23 : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(Zero23, StepOneGradientSumsAreTheFloat64ReferencesOverTheGlobalBatch) {
  auto c = comm::make_mpi_communicator();
  const int stage = GetParam(), W = c->world();
  const auto d = test::tiny_dims();
  for (int ga : {1, 2}) {
    Trained run(*c, d, stage, ga);
    run.m->zero_grads();
    for (int micro = 0; micro < ga; ++micro) run.m->forward_backward(rows(c->rank(), micro, d.V));
    run.opt->reduce_gradients();
    auto* z = run.opt->zero_units();
    ASSERT_NE(z, nullptr);
    const auto grads = z->shard_to_host(z->grad_sums());  // a collective: rank 0 receives them
    const auto p = run.params();
    // The loss and weight sums stay each rank's until apply sums them with the gradient norm's
    // scalars (issue 25: they travel with the last collective, none of their own): its StepStats.
    config::Config cfg;
    const auto stats = run.opt->apply(cfg, 1e-2, 1);  // collective: every rank
    if (c->rank() != 0) {
      EXPECT_TRUE(grads.empty()) << "no global copy on the other ranks";
      continue;
    }
    // The global batch: every micro-step of every rank, in one batch for the reference.
    data::Batch all;
    all.T = kT;
    for (int micro = 0; micro < ga; ++micro)
      for (int q = 0; q < W; ++q) {
        const auto b = rows(q, micro, d.V);
        all.B += b.B;
        all.inputs.insert(all.inputs.end(), b.inputs.begin(), b.inputs.end());
        all.targets.insert(all.targets.end(), b.targets.begin(), b.targets.end());
        all.loss_weights.insert(all.loss_weights.end(), b.loss_weights.begin(), b.loss_weights.end());
      }
    const auto ref = test::reference_gpt2(d, run.m->layout(), p, all);
    ASSERT_EQ(ref.grads.size(), p.size());
    EXPECT_NEAR(stats.loss * stats.weight_sum, ref.loss_sum, 1e-5 * ref.loss_sum);
    EXPECT_NEAR(stats.weight_sum, ref.weight_sum, 1e-6 * ref.weight_sum);
    for (const auto& t : run.m->layout().tensors) {
      const std::vector<float> a(grads.begin() + t.offset, grads.begin() + t.offset + t.numel);
      const std::vector<float> b(ref.grads.begin() + t.offset, ref.grads.begin() + t.offset + t.numel);
      EXPECT_LE(test::max_rel_diff(a, b), 1e-4) << t.name << ", zero_stage " << stage << ", GA " << ga;
    }
  }
}

// Issue 25: the loss and weight sums travel with the step's last collectives; at zero_stage 2/3 that
// is the gradient norm's scalar allreduce, which carries {sum of squares, loss sum, weight sum}. No
// float allreduce of the two sums of their own, and the step's stats are still zero_stage 0's.
TEST_P(Zero23, TheLossAndWeightSumsTravelWithTheNormsAllreduce) {
  auto base = comm::make_mpi_communicator();
  CountingComm c(*base);
  const int stage = GetParam();
  config::Config cfg;
  const auto d = test::tiny_dims();
  Trained plain(*base, d, 0, 2), zero(c, d, stage, 2);
  const auto a = plain.step(cfg, c.rank(), 1);
  c.float_allreduces = 0, c.host_allreduces.clear();
  const auto b = zero.step(cfg, c.rank(), 1);
  EXPECT_EQ(c.float_allreduces, 0) << "no allreduce of the loss and weight sums";
  EXPECT_EQ(c.host_allreduces, std::vector<size_t>{3}) << "one of {sum of squares, loss sum, weight sum}";
  EXPECT_NEAR(b.weight_sum, a.weight_sum, kSumOfRanks * a.weight_sum);
  EXPECT_NEAR(b.loss, a.loss, 1e-6 * std::fabs(a.loss));
  EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-6 * a.grad_norm);
}

TEST_P(Zero23, FourStepsAreZeroStage0sForEveryFamilyAndLora) {
  auto c = comm::make_mpi_communicator();
  const int stage = GetParam();
  config::Config cfg;
  cfg.gradient_clipping_threshold = 0.05;  // small enough to clip every step
  struct Case {
    const char* name;
    config::ModelDims d;
    model::LoraSpec lora;
  };
  const auto ld = llama_dims();
  for (const Case& k : {Case{"gpt2", test::tiny_dims(), {}}, Case{"llama", ld, {}}, Case{"llama lora", ld, lora_on(ld)}}) {
    SCOPED_TRACE(k.name);
    Trained plain(*c, k.d, 0, 2, k.lora), zero(*c, k.d, stage, 2, k.lora);
    EXPECT_LT(zero.opt->moment_bytes(), plain.opt->moment_bytes() / c->world() + 64 * 1024) << "1/world of m and v";
    const auto base_before = k.lora.enabled() ? zero.m->params_to_host() : std::vector<float>{};
    for (int step = 1; step <= 4; ++step) {
      const auto a = plain.step(cfg, c->rank(), step), b = zero.step(cfg, c->rank(), step);
      ASSERT_FALSE(b.skipped);
      EXPECT_NEAR(b.loss, a.loss, 1e-6 * std::fabs(a.loss)) << "step " << step;
      EXPECT_NEAR(b.weight_sum, a.weight_sum, kSumOfRanks * a.weight_sum) << "step " << step;
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-6 * a.grad_norm) << "step " << step;
      const auto p0 = plain.params(), p1 = zero.params();
      if (c->rank() == 0) { EXPECT_LE(rel_diff(p1, p0), step == 1 ? 1e-6 : 1e-5) << "step " << step; }
    }
    const auto [m0, v0] = plain.moments();
    const auto [m1, v1] = zero.moments();
    if (c->rank() == 0) {
      EXPECT_LE(rel_diff(m1, m0), 1e-5);
      EXPECT_LE(rel_diff(v1, v0), 1e-5);
    }
    if (k.lora.enabled()) {
      const auto base_after = zero.m->params_to_host();
      if (c->rank() == 0) { EXPECT_EQ(base_after, base_before) << "the frozen base never changes"; }
    }
  }
}

TEST_P(Zero23, AMicroBatchWithNothingToLearnStillMakesEveryCollective) {
  auto c = comm::make_mpi_communicator();
  const int stage = GetParam();
  config::Config cfg;
  const auto d = llama_dims();
  Trained plain(*c, d, 0, 2), zero(*c, d, stage, 2);
  for (int step = 1; step <= 2; ++step) {
    const auto a = plain.step(cfg, c->rank(), step, /*empty_rank=*/1);
    const auto b = zero.step(cfg, c->rank(), step, /*empty_rank=*/1);
    EXPECT_NEAR(b.loss, a.loss, 1e-6 * std::fabs(a.loss));
    const auto p0 = plain.params(), p1 = zero.params();
    if (c->rank() == 0) { EXPECT_LE(rel_diff(p1, p0), 1e-5) << "step " << step; }
  }
}

TEST_P(Zero23, TwoRunsAreBitwiseEqual) {
  auto c = comm::make_mpi_communicator();
  const int stage = GetParam();
  config::Config cfg;
  cfg.gradient_clipping_threshold = 0.05;
  const auto d = llama_dims();
  Trained a(*c, d, stage, 2), b(*c, d, stage, 2);
  for (int step = 1; step <= 3; ++step) {
    a.step(cfg, c->rank(), step);
    b.step(cfg, c->rank(), step);
  }
  const auto pa = a.params(), pb = b.params();
  const auto [ma, va] = a.moments();
  const auto [mb, vb] = b.moments();
  if (c->rank() != 0) return;
  EXPECT_TRUE(test::bitwise_equal(pa, pb));
  EXPECT_TRUE(test::bitwise_equal(ma, mb));
  EXPECT_TRUE(test::bitwise_equal(va, vb));
}

TEST_P(Zero23, GlobalVectorsSplitIntoShardsAndGatherBackBitForBit) {
  auto c = comm::make_mpi_communicator();
  const int stage = GetParam();
  const auto d = llama_dims();
  Trained run(*c, d, stage, 1);
  const size_t n = run.m->trainable_layout().total;
  const auto p = test::uniform(n, 90), m = test::uniform(n, 91), v = test::uniform(n, 92, 0.f, 1.f);
  run.m->set_trainable_from_host(p);
  run.opt->set_moments_from_host(m, v);
  const auto p2 = run.params();
  const auto [m2, v2] = run.moments();
  if (c->rank() == 0 || stage == 2) { EXPECT_EQ(p2, p); }
  if (c->rank() == 0) {
    EXPECT_EQ(m2, m);
    EXPECT_EQ(v2, v);
  } else {
    EXPECT_TRUE(m2.empty() && v2.empty()) << "no global copy of the moments on the other ranks";
  }
  // This rank's shard: 1/world of every unit, padded to equal pieces.
  const auto& plan = run.opt->zero_units()->plan();
  EXPECT_EQ(plan.total, run.opt->owned_floats());
  size_t padded = 0;
  for (const auto& u : plan.units) padded += u.piece * c->world() - u.size;
  EXPECT_EQ(plan.total * c->world(), n + padded);
  EXPECT_LT(padded, plan.units.size() * c->world());
}

INSTANTIATE_TEST_SUITE_P(Stages, Zero23, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& i) { return "zero_stage" + std::to_string(i.param); });

// restore streams the starting vectors in chunks (run_restore.cpp's stream_from_rank0): loading any
// chunking of the global parameters and moments, at any stage, holds what loading them whole holds.
TEST(ZeroRanges, ChunksOfAnySizeLoadWhatTheWholeVectorLoads) {
  auto c = comm::make_mpi_communicator();
  const auto d = llama_dims();
  for (int stage : {0, 1, 2, 3}) {
    Trained run(*c, d, stage, 1);
    const size_t n = run.m->trainable_layout().total;
    const auto p = test::uniform(n, 70), m = test::uniform(n, 71), v = test::uniform(n, 72, 0.f, 1.f);
    for (size_t chunk : {size_t(7), size_t(1000), n}) {
      for (size_t b = 0; b < n; b += chunk) {
        const size_t len = std::min(chunk, n - b);
        run.m->set_trainable_range(b, p.data() + b, len);
        run.opt->set_moment_range(0, b, m.data() + b, len);
        run.opt->set_moment_range(1, b, v.data() + b, len);
      }
      const auto p2 = run.params();
      const auto [m2, v2] = run.moments();
      if (c->rank() == 0) {
        EXPECT_EQ(p2, p) << "zero_stage " << stage << ", chunks of " << chunk;
        EXPECT_EQ(m2, m) << "zero_stage " << stage << ", chunks of " << chunk;
        EXPECT_EQ(v2, v) << "zero_stage " << stage << ", chunks of " << chunk;
      }
      // Wipe them for the next chunking, so that a float it failed to load would show.
      const std::vector<float> zeros(n, 0.0f);
      run.m->set_trainable_from_host(zeros);
      run.opt->set_moments_from_host(zeros, zeros);
    }
  }
}
