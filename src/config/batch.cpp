// src/config/batch.cpp — the batch factorisation G = (world_size / context_parallelism) × GA × micro (SPEC §1).
// global_batch_size fixes G (the optimisation does not depend on world size or GA);
// per_device_batch_size fixes micro, so G grows with the world. Either way micro is a whole
// number >= 1 or the user gets an error naming the key.
#include <string>

#include "sftdp/check.h"
#include "sftdp/config.h"

namespace sftdp::config {

std::string context_parallelism_problem(int64_t cp, int64_t T, int world) {
  if (cp < 1) return "must be >= 1, got " + std::to_string(cp);
  if (world > 0 && world % cp != 0)
    return std::to_string(cp) + " does not divide the " + std::to_string(world) +
           " ranks (the world is data-parallel groups of context_parallelism ranks)";
  if (cp > 1 && T % (2 * cp) != 0)
    return std::to_string(cp) + " needs max_target_length divisible by " + std::to_string(2 * cp) +
           " (2 chunks per rank), got " + std::to_string(T);
  return "";
}

BatchPlan resolve_batch(const Config& cfg, int world) {
  SFTDP_ASSERT(world >= 1, "world size must be >= 1");
  const int64_t cp = cfg.context_parallelism;
  if (const std::string problem = context_parallelism_problem(cp, cfg.max_target_length, world); !problem.empty())
    throw UserError("context_parallelism: " + problem);
  // The rows are the data-parallel groups' (every rank of a group holds the same rows); below, the
  // world is that number of groups.
  const int world_size = static_cast<int>(world / cp);
  const int64_t ga = cfg.gradient_accumulation_steps;
  if (ga < 1)
    throw UserError("gradient_accumulation_steps: must be >= 1, got " + std::to_string(ga));
  const bool has_global = cfg.global_batch_size != -1, has_per_device = cfg.per_device_batch_size != -1;
  if (has_global == has_per_device)
    throw UserError(has_global ? "global_batch_size: give global_batch_size or "
                                 "per_device_batch_size, not both"
                               : "global_batch_size: not set (give global_batch_size or "
                                 "per_device_batch_size)");
  const std::string factors =
      (cp == 1 ? "world_size (" + std::to_string(world_size)
               : "data-parallel groups (world_size " + std::to_string(world) + " / context_parallelism " +
                     std::to_string(cp) + " = " + std::to_string(world_size)) +
      ") × gradient_accumulation_steps (" + std::to_string(ga) + ")";
  BatchPlan plan;
  plan.world_size = world;
  plan.context_parallelism = static_cast<int>(cp);
  plan.ga_steps = ga;
  plan.zero_stage = static_cast<int>(cfg.zero_stage);
  if (has_per_device) {
    if (cfg.per_device_batch_size < 1)
      throw UserError("per_device_batch_size: must be >= 1, got " +
                      std::to_string(cfg.per_device_batch_size));
    plan.micro_batch = cfg.per_device_batch_size;
    plan.global_batch = plan.micro_batch * world_size * ga;
    return plan;
  }
  const int64_t global = cfg.global_batch_size, rows_per_micro_step = world_size * ga;
  if (global < 1)
    throw UserError("global_batch_size: must be >= 1, got " + std::to_string(global));
  if (global < rows_per_micro_step)
    throw UserError("global_batch_size: " + std::to_string(global) + " is smaller than " +
                    factors + " = " + std::to_string(rows_per_micro_step) +
                    "; every rank needs at least one row per micro-step");
  if (global % rows_per_micro_step != 0)
    throw UserError("global_batch_size: " + std::to_string(global) + " is not divisible by " +
                    factors);
  plan.global_batch = global;
  plan.micro_batch = global / rows_per_micro_step;
  return plan;
}

}  // namespace sftdp::config
