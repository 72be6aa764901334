// tests/train/test_memory_plan.cpp — the memory plan (src/train/memory_plan.h): model::footprint
// finds what a model allocates without allocating (the same activation, parameter and gradient
// bytes as the real model, remat and GQA included); activations are linear in T now that
// attention keeps (B,NH,T) log-sum-exps, not (B,NH,T,T) probabilities; ZeRO-1 divides the moments;
// ZeRO-2/3 (planned for 1, 2 and 4 ranks, no MPI) hold 4 + 16/N and 16/N bytes per parameter plus
// their unit slots (with bf16 weights 2 + 16/N and 16/N), exactly what a real optim::AdamW and ZeroUnits allocate; each Ops table states its
// kernels' working memory (the CPU table attention's tiles, the CUDA tables the formula the plan had);
// and check_memory passes a plan that fits, refuses one that does not with the figures and every
// single change that fits (remat, fewer rows per micro-step, the least other zero_stage), or says
// nothing fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/test_util.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "optim/zero_units.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "train/checkpoint_shards.h"
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

// ZeRO-2/3 as the run builds them: a real model of the stage on the CPU table and a real AdamW (which
// makes ZeroUnits) for rank `rank` of `world`; the plan's figures are theirs, byte for byte. Under LoRA
// the shards and slots are the adapters' (at stage 3 with the frozen base's shard and slots).
TEST(MemoryPlan, ZeroStagesTwoAndThreeAreWhatTheOptimiserAllocates) {
  auto gpt2 = tiny_dims();
  gpt2.L = 3, gpt2.maxT = 64;
  for (const auto& d : {gpt2, llama_dims()})
    for (bool with_lora : {false, true})
      for (int stage : {2, 3})
        for (int world : {1, 2, 4})
          for (int rank : {0, world - 1}) {
            SCOPED_TRACE("stage " + std::to_string(stage) + ", rank " + std::to_string(rank) + " of " +
                         std::to_string(world) + (d.block == config::Block::kLlama ? ", llama" : ", gpt2") +
                         (with_lora ? ", LoRA" : ""));
            model::LoraSpec lora;
            if (with_lora) {
              lora.rank = 2;
              for (const auto& m : model::linear_modules(d)) lora.modules.push_back(m.name);
            }
            const auto p = train::plan_memory(d, cpu_ops(), 16, {2, false, stage}, rank, world, false, false, 2, lora);
            const auto model = model::make_model(d, cpu_ops(), 2, 16, false, false, lora, stage);
            const auto comm = train::world_only_communicator(rank, world);
            optim::AdamW opt(*model, *comm, stage);
            const optim::ZeroUnits& units = *opt.zero_units();
            const auto& b = units.bytes();
            const size_t P = model->layout().total, trainable = model->trainable_layout().total;
            const size_t shard = units.plan().total;
            EXPECT_EQ(p.moments, opt.moment_bytes());
            EXPECT_EQ(p.moments, 2 * shard * sizeof(float));
            EXPECT_EQ(p.master_shard, b.master + b.base_shard);
            EXPECT_EQ(p.gathered_units, b.param_slots);
            EXPECT_EQ(p.grad_slots, b.grad_slots);
            EXPECT_EQ(b.master, shard * sizeof(float));
            EXPECT_EQ(b.grad_shard, shard * sizeof(float));
            EXPECT_EQ(b.base_shard > 0, with_lora && stage == 3);
            // A shard is each unit's piece, ceil(size / N) floats: 1/N and less than one float per unit more.
            EXPECT_GE(shard * world, trainable);
            EXPECT_LT(shard * world, trainable + model->trainable_units().size() * world);
            // Parameters: the full replica (and the adapters) at stage 2, none at 3; the master shard
            // (and the base's), at 3 the gathered units.
            const size_t replica = stage == 2 ? (P + (with_lora ? trainable : 0)) * sizeof(float) : 0;
            EXPECT_EQ(p.params, replica + b.master + b.base_shard + b.param_slots);
            EXPECT_EQ(stage == 3, b.param_slots > 0);
            // Gradient sums: the shard and the slots (and the loss and weight sums), no full buffer.
            EXPECT_EQ(p.grads, b.grad_shard + b.grad_slots + 2 * sizeof(float));
            if (!with_lora) {  // model state: 16/N bytes per parameter, + 4 for stage 2's replica, + slots
              const size_t state = p.params + p.grads + p.moments;
              const size_t slots = b.grad_slots + b.param_slots;
              EXPECT_EQ(state, (stage == 2 ? 4 * P : 0) + 16 * shard + slots + 2 * sizeof(float));
            }
            // The model's own part is footprint's for a model of that stage.
            const auto f = model::footprint(d, cpu_ops(), 2, 16, false, false, lora, stage);
            EXPECT_EQ(p.activations, f.activations);
            EXPECT_EQ(p.activations, model->activation_bytes());
            // The checkpoint's host copy is what train::snapshot copies of this rank's shard.
            const checkpoint::HostShard copy = train::snapshot(*model, opt, stage, rank, world);
            size_t copied = 0;
            for (const auto& g : copy.data) copied += g.size() * sizeof(float);
            EXPECT_EQ(p.checkpoint_shard, copied);
            EXPECT_LE(copied, 3 * shard * sizeof(float));
            // CPU ranks: at the start rank 0 reads the starting parameters (under LoRA the base and the
            // adapters) beside the 64 MiB chunk the others get them in (all of it here); then every rank
            // keeps its checkpoint shard's copy and, at stages below 3 on more than one rank, copies the
            // trainable parameters for the drift check.
            const size_t start = (P + (with_lora ? trainable : 0)) * sizeof(float);
            const size_t drift = stage < 3 && world > 1 ? trainable * sizeof(float) : 0;
            EXPECT_EQ(p.host_copies, std::max(rank == 0 ? 2 * start : start, copied + drift));
          }
}

TEST(MemoryPlan, ZeroStagesShrinkTheModelStateWithTheRanks) {
  config::ModelDims d = llama_dims();
  d.L = 8, d.V = 64;  // the blocks, not the embeddings, hold most parameters (as in real models)
  const size_t P = model::param_layout(d).total;
  const auto state = [&](int stage, int world) {
    const auto p = train::plan_memory(d, cpu_ops(), 16, {1, true, stage}, 0, world, true, false, 1);
    return p.params + p.grads + p.moments;
  };
  const auto slots = [&](int stage, int world) {
    const auto p = train::plan_memory(d, cpu_ops(), 16, {1, true, stage}, 0, world, true, false, 1);
    return p.gathered_units + p.grad_slots;
  };
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    EXPECT_EQ(state(0, world), 16 * P + 2 * sizeof(float));  // parameters, gradient buffer with its sums, m, v
    // 16/N bytes per parameter plus the slots, and stage 2 the replica's 4: within a float per unit and rank.
    const double per_rank = 16.0 * P / world;
    EXPECT_NEAR(double(state(3, world) - slots(3, world)), per_rank, 16.0 * 16 + 8);
    EXPECT_NEAR(double(state(2, world) - slots(2, world)), 4.0 * P + per_rank, 16.0 * 16 + 8);
    // The slots hold units, not the model: the same (world · piece) on every world.
    EXPECT_LT(slots(3, world), state(0, world) / 2);
  }
  EXPECT_LT(state(3, 4), state(3, 2));
  EXPECT_LT(state(3, 2), state(1, 2));
  EXPECT_LT(state(2, 4), state(1, 4));
}

// weight_dtype bfloat16 (issue 25) at zero_stage 1, 2 and 3 on the GPU: the parameters the model
// holds are bf16 (2 bytes each at stages 1 and 2, none at 3) and the masters fp32 in the shard (the
// all-gathers pack each piece in place: no bf16 shard): 6 + 16/N (stage 1 keeps the full fp32
// gradient buffer, as Megatron's distributed optimizer does), 2 + 16/N and 16/N bytes per parameter
// plus the slots, against fp32 storage's 10 + 8/N (with the GEMMs' bf16 copy), 4 + 16/N and 16/N (the
// same stage-3 total: only its gathers halve). At stage 0, and under LoRA, nothing changes.
TEST(MemoryPlan, Bf16WeightsStoreTwoBytesPerParameter) {
  config::ModelDims d = llama_dims();
  d.L = 8, d.V = 64;
  const size_t P = model::param_layout(d).total;
  Ops bf16 = cpu_ops();
  bf16.name = "cuda-bf16";  // the plan's GPU table by its identity (src/train/plan.cpp): it runs no kernel
  const auto plan = [&](int stage, int world, bool bf16w, const model::LoraSpec& lora = {}) {
    return train::plan_memory(d, bf16, 16, {1, true, stage}, 0, world, /*gpu=*/true, false, 1, lora, bf16w);
  };
  const auto state = [](const train::MemoryPlan& p) {
    return double(p.params + p.grads + p.moments - p.gathered_units - p.grad_slots);
  };
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const double per_rank = 16.0 * P / world, slack = 16.0 * 16 + 8;  // a padded float per unit and rank
    EXPECT_NEAR(state(plan(1, world, true)), 6.0 * P + 8 + per_rank, slack);
    EXPECT_NEAR(state(plan(2, world, true)), 2.0 * P + per_rank, slack);
    EXPECT_NEAR(state(plan(3, world, true)), per_rank, slack);
    EXPECT_EQ(plan(3, world, true).total(), plan(3, world, false).total());
    EXPECT_EQ(plan(2, world, true).bf16_params, 0u);  // the parameters are the bf16 copy
    EXPECT_EQ(plan(2, world, false).bf16_params, P * sizeof(uint16_t));
    // Stages 1 and 2 widen the units in use into slots, as stage 3 gathers them.
    for (int stage : {1, 2}) {
      EXPECT_GT(plan(stage, world, true).gathered_units, 0u);
      EXPECT_EQ(plan(stage, world, false).gathered_units, 0u);
    }
    EXPECT_EQ(plan(0, world, true).total(), plan(0, world, false).total());
  }
  // What they save (the slots aside, which this tiny model's units make large against it): fp32
  // storage holds the parameters and the GEMMs' bf16 copy of them: 2 and 4 bytes per parameter at 4 ranks.
  for (int stage : {1, 2}) {
    const auto fp32 = plan(stage, 4, false);
    EXPECT_LT(state(plan(stage, 4, true)), state(fp32) + double(fp32.bf16_params) - 1.5 * P) << stage;
  }
  // LoRA: the frozen base stays as loaded.
  model::LoraSpec lora;
  lora.rank = 2, lora.modules = {"self_attn.q_proj"};
  EXPECT_EQ(plan(2, 2, true, lora).total(), plan(2, 2, false, lora).total());
}

// The plan's kernel scratch is the table's own statement: the CPU table's is attention's tiles, the
// CUDA tables' the formula the memory plan used before it moved next to the CUDA kernels.
size_t old_cuda_scratch_bytes(const config::ModelDims& d, int B, int T, bool bf16, int head_rows) {
  const size_t N = size_t(B) * T, widest = std::max<size_t>({size_t(d.C), 2 * size_t(d.F), size_t(d.qkv_dim())});
  const size_t largest = std::max({N * widest, size_t(d.V) * d.C, size_t(head_rows) * d.V, 2 * size_t(d.F) * d.C});
  const size_t tiles = (size_t(T) + attention_bf16::kTile - 1) / attention_bf16::kTile;
  const size_t attention_copies = bf16 && attention_bf16::tensor_cores(d.head_size())
                                      ? N * (size_t(d.qkv_dim()) + d.attn_dim()) * 2 + size_t(B) * tiles * 8
                                      : 0;
  const size_t dout_copy = std::max(N * widest, size_t(head_rows) * (d.V + 7)) * 2;
  const size_t bf16_copies = bf16 ? 2 * largest * 2 + dout_copy + attention_copies : 0;
  const size_t partials = (N / 128 + 1) * widest * 2 * sizeof(float);
  return (size_t{32} << 20) + bf16_copies + partials + N * 2 * sizeof(double) + size_t(B) * d.NH * T * sizeof(float) +
         7 * N * sizeof(int32_t);
}

TEST(MemoryPlan, EachTableStatesItsKernelsScratch) {
  config::ModelDims tensor_cores = llama_dims();
  tensor_cores.NH = 4, tensor_cores.KVH = 2, tensor_cores.HS = 64, tensor_cores.C = 256, tensor_cores.V = 1000;
  auto gpt2 = tiny_dims();
  for (const auto& d : {gpt2, llama_dims(), tensor_cores})
    for (int B : {1, 3})
      for (int T : {12, 300}) {
        if (T > d.maxT) continue;
        const int head_rows = model::Model::default_head_chunk_rows(d.V, B * T);
        ScratchShape s;
        s.B = B, s.T = T, s.C = d.C, s.F = d.F, s.V = d.V, s.NH = d.NH, s.KVH = d.kv_heads(), s.HS = d.head_size();
        s.qkv_dim = d.qkv_dim(), s.attn_dim = d.attn_dim(), s.head_rows = head_rows, s.threads = 3;
        EXPECT_EQ(cpu_ops().scratch_bytes(s), cpu::attention_scratch_bytes(B, T, d.NH, d.kv_heads(), d.head_size(), 3));
        EXPECT_EQ(cuda_scratch_bytes(GemmInputs::kFp32)(s), old_cuda_scratch_bytes(d, B, T, false, head_rows));
        EXPECT_EQ(cuda_scratch_bytes(GemmInputs::kBf16)(s), old_cuda_scratch_bytes(d, B, T, true, head_rows));
        if (const Ops* cuda = cuda_ops(GemmInputs::kBf16)) {  // a build with a device: the tables' own entries
          EXPECT_EQ(cuda->scratch_bytes(s), cuda_scratch_bytes(GemmInputs::kBf16)(s));
          EXPECT_EQ(cuda_ops(GemmInputs::kFp32)->scratch_bytes(s), cuda_scratch_bytes(GemmInputs::kFp32)(s));
        }
        // And the plan counts exactly that.
        const auto p = train::plan_memory(d, cpu_ops(), T, {B, false, 0}, 0, 1, false, false, 3);
        EXPECT_EQ(p.kernel_scratch, cpu_ops().scratch_bytes(s));
      }
  EXPECT_GT(cuda_scratch_bytes(GemmInputs::kBf16)({}), 0u);
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
                  "nothing fits on this rank, even with remat: true, 1 row per micro-step and zero_stage: ");
  a.known = false;  // nothing known, nothing refused
  EXPECT_NO_THROW(train::check_memory(s.cfg, s.batch, s.d, cpu_ops(), a, 1, 2, false, 2));
}

// The least other zero_stage that fits is the one named; nothing fitting names the stage that needs least.
TEST(MemoryPlan, TheLeastZeroStageThatFitsIsNamed) {
  Case s = setup(4);
  s.d.L = 8, s.d.V = 64;  // blocks dominate: each stage needs less than the one before
  s.cfg.remat = true;
  const auto need = [&](int stage) {
    return train::plan_memory(s.d, cpu_ops(), 256, {8, true, stage}, 0, 4, false, false, 2).total();
  };
  ASSERT_LT(need(1), need(0));
  ASSERT_LT(need(2), need(1));
  ASSERT_LT(need(3), need(2));
  const auto error_with = [&](size_t bytes) {
    const train::Available a{bytes, true, "a test's"};
    return user_error_of([&] { train::check_memory(s.cfg, s.batch, s.d, cpu_ops(), a, 0, 4, false, 2); });
  };
  std::string msg = error_with(need(2));
  EXPECT_CONTAINS(msg, "zero_stage: 2 (" + train::gib(need(2)) + ")");
  EXPECT_EQ(msg.find("zero_stage: 3"), std::string::npos) << msg;
  msg = error_with(need(3));
  EXPECT_CONTAINS(msg, "zero_stage: 3 (" + train::gib(need(3)) + ")");
  // From stage 3 nothing sharded fits better: then fewer rows per micro-step, or all of them together.
  s.cfg.zero_stage = 3;
  msg = error_with(need(3) - 1);
  EXPECT_EQ(msg.find("would fit: zero_stage"), std::string::npos) << msg;
  EXPECT_CONTAINS(error_with(1), "nothing fits on this rank, even with remat: true, 1 row per micro-step and "
                                 "zero_stage: 3 (");
  // One rank: no zero_stage is offered, since none shards anything there.
  Case one = setup(1);
  one.cfg.zero_stage = 0;
  const size_t one_needs = train::plan_memory(one.d, cpu_ops(), 256, {8, false, 0}, 0, 1, false, false, 2).total();
  const train::Available a{one_needs - 1, true, "a test's"};
  msg = user_error_of([&] { train::check_memory(one.cfg, one.batch, one.d, cpu_ops(), a, 0, 1, false, 2); });
  EXPECT_EQ(msg.find("zero_stage"), std::string::npos) << msg;
}

}  // namespace
}  // namespace sftdp::test
