// tests/train/test_memory_plan.cpp — the memory plan (src/train/memory_plan.h): model::footprint
// finds what a model allocates without allocating (the same activation, parameter and gradient
// bytes as the real model, remat and GQA included); activations are linear in T now that
// attention keeps (B,NH,T) log-sum-exps, not (B,NH,T,T) probabilities; ZeRO-1 divides the moments;
// and check_memory passes a plan that fits, refuses one that does not with the figures and every
// single change that fits (remat, fewer rows per micro-step, zero_stage 1), or says nothing fits.
#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "train/memory_plan.h"

namespace sftdp::test {
namespace {

config::ModelDims llama_dims() {
  config::ModelDims d;
  d.L = 3, d.NH = 6, d.C = 48, d.F = 96, d.V = 101, d.maxT = 4096;
  d.block = config::Block::kLlama, d.KVH = 2, d.HS = 8, d.tied = false;
  return d;
}

TEST(MemoryPlan, FootprintIsWhatTheModelAllocates) {
  auto gpt2 = tiny_dims();
  gpt2.L = 3;
  for (const auto& d : {gpt2, llama_dims()})
    for (bool remat : {false, true}) {
      const auto f = model::footprint(d, cpu_ops(), 5, 12, remat);
      const auto m = model::make_model(d, cpu_ops(), 5, 12, remat);
      EXPECT_EQ(f.activations, m->activation_bytes());
      EXPECT_EQ(f.params, m->layout().total * sizeof(float));
      EXPECT_EQ(f.grads, m->grad_buffer_floats() * sizeof(float));
      EXPECT_GT(f.other, 5u * 12 * 4 * sizeof(int32_t));  // at least the micro-batch's ids
    }
}

TEST(MemoryPlan, ActivationsAreLinearInT) {
  const auto d = llama_dims();
  const size_t at_1k = model::footprint(d, cpu_ops(), 2, 1024).activations;
  EXPECT_EQ(model::footprint(d, cpu_ops(), 2, 4096).activations, 4 * at_1k);
  EXPECT_EQ(model::footprint(d, cpu_ops(), 2, 4096, /*remat=*/true).activations,
            4 * model::footprint(d, cpu_ops(), 2, 1024, true).activations);
}

TEST(MemoryPlan, ZeroStageOneDividesTheMoments) {
  const auto d = llama_dims();
  const train::MemoryChoice zero0{4, false, 0}, zero1{4, false, 1};
  const auto p0 = train::plan_memory(d, cpu_ops(), 64, zero0, 1, 4, false, false, 2);
  const auto p1 = train::plan_memory(d, cpu_ops(), 64, zero1, 1, 4, false, false, 2);
  EXPECT_EQ(p0.params, p1.params);
  EXPECT_LT(p1.moments, p0.moments / 3);  // about a quarter: the shard plus a small replicated tail
  EXPECT_EQ(p0.activations, p1.activations);
}

struct Case {
  config::Config cfg;
  config::BatchPlan batch;
  config::ModelDims d;
};
Case setup(int world) {
  Case s;
  s.cfg.max_target_length = 256, s.cfg.global_batch_size = 8 * world, s.cfg.gradient_accumulation_steps = 1;
  s.batch = config::BatchPlan{8 * world, 8, 1, world};
  s.d = llama_dims();
  return s;
}

TEST(MemoryPlan, APlanThatFitsPassesAndOneThatDoesNotNamesWhatWouldFit) {
  const Case s = setup(2);
  train::Available a{size_t{1} << 40, true, "a test's 1 TiB"};
  const auto plan = train::check_memory(s.cfg, s.batch, s.d, cpu_ops(), a, 1, 2, false, 2);
  a.bytes = plan.total() - 1, a.what = "one byte too few";
  const std::string msg =
      user_error_of([&] { train::check_memory(s.cfg, s.batch, s.d, cpu_ops(), a, 1, 2, false, 2); });
  EXPECT_CONTAINS(msg, "memory: this rank needs " + plan.describe());
  EXPECT_CONTAINS(msg, "is available (one byte too few)");
  EXPECT_CONTAINS(msg, "would fit: remat: true (");
  EXPECT_CONTAINS(msg, "gradient_accumulation_steps: 2 (4 rows per micro-step)");
  EXPECT_CONTAINS(msg, "zero_stage: 1 (");
  a.bytes = 1, a.what = "one byte";
  EXPECT_CONTAINS(user_error_of([&] { train::check_memory(s.cfg, s.batch, s.d, cpu_ops(), a, 1, 2, false, 2); }),
                  "nothing fits on this rank, even with remat: true, 1 row per micro-step and zero_stage: 1");
  a.known = false;  // nothing known, nothing refused
  EXPECT_NO_THROW(train::check_memory(s.cfg, s.batch, s.d, cpu_ops(), a, 1, 2, false, 2));
}

}  // namespace
}  // namespace sftdp::test
