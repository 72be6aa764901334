// tests/config/test_resolve_batch.cpp — the batch factorisation of SPEC §1: each rank loads
// global_batch_size / world_size / gradient_accumulation_steps rows per micro-step, and that must
// be a whole number >= 1; per_device_batch_size instead fixes the micro-batch and G follows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {
namespace {

Config with_batch(int64_t global, int64_t per_device, int64_t ga) {
  Config cfg;
  cfg.global_batch_size = global;
  cfg.per_device_batch_size = per_device;
  cfg.gradient_accumulation_steps = ga;
  return cfg;
}

std::string batch_error(const Config& cfg, int world) {
  try {
    resolve_batch(cfg, world);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

struct Factorisation {
  int world;
  int64_t ga, global, micro;
};

TEST(ResolveBatch, GlobalBatchSplitsOverWorldAndAccumulation) {
  const Factorisation cases[] = {
      {1, 1, 32, 32}, {2, 1, 32, 16}, {4, 1, 32, 8}, {1, 4, 32, 8},
      {2, 4, 32, 4},  {4, 8, 32, 1},  {3, 2, 12, 2}, {32, 1, 32, 1},
  };
  for (const auto& c : cases) {
    const BatchPlan plan = resolve_batch(with_batch(c.global, -1, c.ga), c.world);
    EXPECT_EQ(plan.global_batch, c.global) << "world " << c.world << " ga " << c.ga;
    EXPECT_EQ(plan.micro_batch, c.micro) << "world " << c.world << " ga " << c.ga;
    EXPECT_EQ(plan.ga_steps, c.ga);
    EXPECT_EQ(plan.world_size, c.world);
    EXPECT_EQ(plan.micro_batch * plan.world_size * plan.ga_steps, plan.global_batch);
  }
}

TEST(ResolveBatch, PerDeviceBatchGrowsTheGlobalBatchWithTheWorld) {
  const BatchPlan one = resolve_batch(with_batch(-1, 4, 1), 1);
  EXPECT_EQ(one.global_batch, 4);
  EXPECT_EQ(one.micro_batch, 4);
  const BatchPlan many = resolve_batch(with_batch(-1, 4, 3), 2);
  EXPECT_EQ(many.global_batch, 24);
  EXPECT_EQ(many.micro_batch, 4);
  EXPECT_EQ(many.ga_steps, 3);
}

TEST(ResolveBatch, NotDivisibleIsAnError) {
  EXPECT_EQ(batch_error(with_batch(12, -1, 4), 2),
            "global_batch_size: 12 is not divisible by world_size (2) × "
            "gradient_accumulation_steps (4)");
  EXPECT_EQ(batch_error(with_batch(10, -1, 1), 4),
            "global_batch_size: 10 is not divisible by world_size (4) × "
            "gradient_accumulation_steps (1)");
}

TEST(ResolveBatch, FewerRowsThanRanksTimesAccumulationIsAnError) {
  EXPECT_EQ(batch_error(with_batch(4, -1, 4), 2),
            "global_batch_size: 4 is smaller than world_size (2) × gradient_accumulation_steps "
            "(4) = 8; every rank needs at least one row per micro-step");
}

TEST(ResolveBatch, BatchKeysMustBeSetExactlyOnce) {
  EXPECT_EQ(batch_error(with_batch(-1, -1, 1), 1),
            "global_batch_size: not set (give global_batch_size or per_device_batch_size)");
  EXPECT_EQ(batch_error(with_batch(8, 2, 1), 1),
            "global_batch_size: give global_batch_size or per_device_batch_size, not both");
  EXPECT_EQ(batch_error(with_batch(-1, 0, 1), 1), "per_device_batch_size: must be >= 1, got 0");
  EXPECT_EQ(batch_error(with_batch(8, -1, 0), 1),
            "gradient_accumulation_steps: must be >= 1, got 0");
}

TEST(ResolveBatch, AgreesWithAParsedConfig) {
  const Config cfg = from_yaml_text(
      "train_files: t.h5\nglobal_batch_size: 64\ngradient_accumulation_steps: 2\n"
      "max_target_length: 64\n",
      {});
  const BatchPlan plan = resolve_batch(cfg, 4);
  EXPECT_EQ(plan.micro_batch, 8);
}

// The plan is the one place the run's parallel layout is stated: the ZeRO stage rides along, the model's own stage
// follows from it (2 and 3 give the model a residency, 0 and 1 keep its full buffers), and each rank's share of a
// row's positions is T / context_parallelism.
TEST(ResolveBatch, CarriesTheZeroStageAndTheContextParallelLayout) {
  Config cfg = with_batch(8, -1, 1);
  cfg.context_parallelism = 2, cfg.max_target_length = 64, cfg.zero_stage = 3;
  const BatchPlan plan = resolve_batch(cfg, 4);
  EXPECT_EQ(plan.zero_stage, 3);
  EXPECT_EQ(plan.data_parallel(), 2);
  EXPECT_EQ(plan.micro_batch, 4);
  EXPECT_EQ(plan.local_positions(64), 32);
  const int model_stage[] = {0, 0, 2, 3};
  for (int stage = 0; stage <= 3; ++stage) EXPECT_EQ(model_zero_stage(stage), model_stage[stage]) << stage;
}

// context_parallelism's limits are stated once (context_parallelism_problem): the config check (world unknown),
// the plan (world known) and the model's split say the same words.
TEST(ResolveBatch, ContextParallelLimitsAreOneStatement) {
  EXPECT_EQ(context_parallelism_problem(1, 7, 3), "");
  EXPECT_EQ(context_parallelism_problem(2, 64, 4), "");
  EXPECT_EQ(context_parallelism_problem(0, 64, 4), "must be >= 1, got 0");
  EXPECT_EQ(context_parallelism_problem(3, 64, 4),
            "3 does not divide the 4 ranks (the world is data-parallel groups of context_parallelism ranks)");
  EXPECT_EQ(context_parallelism_problem(3, 64, 0),
            "3 needs max_target_length divisible by 6 (2 chunks per rank), got 64");
  Config cfg = with_batch(8, -1, 1);
  cfg.context_parallelism = 3, cfg.max_target_length = 64;
  EXPECT_EQ(batch_error(cfg, 6), "context_parallelism: 3 needs max_target_length divisible by 6 (2 chunks per rank), got 64");
  EXPECT_EQ(batch_error(cfg, 4), "context_parallelism: " + context_parallelism_problem(3, 64, 4));
}

}  // namespace
}  // namespace sftdp::config
