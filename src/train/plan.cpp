// src/train/plan.cpp — see plan.h. Every figure comes from plan_memory / check_memory, the functions
// the real run calls before it allocates; only what they are given differs: the world size and
// the memory on offer come from the target instead of MPI and the device, and the kernels' table
// is the one the run would pick, by name (the counting model never runs a kernel).
#include "train/plan.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "hf/hf_dir.h"
#include "kernels/ops.h"
#include "model/context_split.h"
#include "sftdp/check.h"
#include "sftdp/model.h"
#include "train/device.h"
#include "train/memory_plan.h"

namespace sftdp::train {
namespace {

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "this machine";
  return name;
}

std::string trim_zeros(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", x);
  return s;
}

// What the run would have on each rank: the target's figure, else this machine's.
Available target_memory(const PlanTarget& t, bool gpu, int per_node) {
  if (t.memory_gib > 0) {
    Available a;
    const double bytes = t.memory_gib * double(size_t{1} << 30);
    a.known = true;
    a.bytes = static_cast<size_t>(gpu ? bytes : bytes / per_node);
    a.what = "--memory-gib " + trim_zeros(t.memory_gib) +
             (gpu ? " per GPU" : " per node, shared by " + std::to_string(per_node) + " rank(s)");
    return a;
  }
  if (!gpu) return cpu_memory_available(per_node, this_host());
  if (!cuda_device_available())
    throw UserError("--memory-gib: a hardware: gpu plan on a machine without a usable CUDA device needs the "
                    "memory of one GPU (e.g. --memory-gib 80)");
  return gpu_memory_available(this_host());
}

}  // namespace

int print_plan(const config::Config& cfg, const PlanTarget& target, std::FILE* out) {
  SFTDP_ASSERT(target.ranks >= 1 && target.ranks_per_node >= 0 && target.memory_gib >= 0, "bad plan target");
  for (const auto& note : cfg.alias_notes) std::fprintf(out, "plan: config: %s\n", note.c_str());
  const int per_node = target.ranks_per_node > 0 ? std::min(target.ranks_per_node, target.ranks) : target.ranks;
  const auto batch = config::resolve_batch(cfg, target.ranks);
  const auto dims = config::model_dims(cfg);
  // hardware: auto is what this machine would pick; a plan for another cluster names it.
  const bool gpu = cfg.hardware == "gpu" || (cfg.hardware == "auto" && cuda_device_available());
  if (!gpu) check_cpu_dtypes(cfg);
  // The GPU run's table by its identity, its name (gemm_inputs_bf16), and its kernels' working memory;
  // the counting model of the plan never runs a kernel, so the CPU table's serve for the rest.
  Ops ops = cpu_ops();
  if (gpu) {
    const GemmInputs inputs =
        cfg.dtype == "bfloat16" || cfg.weight_dtype == "bfloat16" ? GemmInputs::kBf16 : GemmInputs::kFp32;
    ops.name = inputs == GemmInputs::kBf16 ? "cuda-bf16" : "cuda";
    ops.scratch_bytes = cuda_scratch_bytes(inputs);
  }
  const Available available = target_memory(target, gpu, per_node);
  const int threads = cpu_threads_per_rank(per_node);
  const model::LoraSpec lora = model::lora_spec(cfg, dims);
  const int T = static_cast<int>(cfg.max_target_length);
  const int micro = static_cast<int>(batch.micro_batch);
  const auto plan_at = [&](int stage, bool remat, int rank = 0) {
    return plan_memory(dims, ops, T, {micro, remat, stage, batch.context_parallelism}, rank, target.ranks, gpu,
                       bf16_activations(cfg, gpu, dims),
                       threads, lora, cfg.weight_dtype == "bfloat16");
  };

  const size_t params = model::param_layout(dims).total;
  const std::string hf_note = config::hf_model_note(cfg);  // a Hugging Face directory's config.json wins
  const std::string model = !hf_note.empty()          ? cfg.load_parameters_path + "/config.json"
                            : cfg.model_name.empty() ? std::string("explicit dimensions")
                                                     : cfg.model_name;
  std::fprintf(out, "plan: %s (%s block), %zu parameters", model.c_str(), config::block_name(dims).c_str(), params);
  if (lora.enabled()) std::fprintf(out, ", %zu trainable (LoRA rank %d)", model::lora_layout(dims, lora).total, lora.rank);
  std::fprintf(out, "; hardware %s (%s kernels)\n", gpu ? "gpu" : "cpu", ops.name);
  std::fprintf(out,
               "plan: model: %d layers, emb_dim %d, mlp_dim %d, %d heads (%d k/v) of %d, vocab_size %d, "
               "max_position_embeddings %d",
               dims.L, dims.C, dims.F, dims.NH, dims.kv_heads(), dims.head_size(), dims.V, dims.maxT);
  if (dims.block == config::Block::kLlama) {
    std::fprintf(out, ", rope_theta %g, rms_norm_eps %g", dims.rope_theta, dims.norm_eps);
    if (dims.rope_scaling.llama3)
      std::fprintf(out, ", llama3 rope scaling (factor %g, low %g, high %g, original %d)", dims.rope_scaling.factor,
                   dims.rope_scaling.low_freq_factor, dims.rope_scaling.high_freq_factor,
                   dims.rope_scaling.original_max_positions);
  }
  std::fprintf(out, ", head %s\n", dims.tied ? "tied" : "untied");
  if (!hf_note.empty()) {
    std::fprintf(out, "plan: %s\n", hf_note.c_str());
    for (const auto& line : hf::read_hf_notes(cfg.load_parameters_path)) std::fprintf(out, "plan: %s\n", line.c_str());
  }
  std::fprintf(out, "plan: %d rank(s), %d per node; global batch %lld = %d %s x GA %lld x %d rows, T=%d, dtype %s\n",
               target.ranks, per_node, static_cast<long long>(batch.global_batch), batch.data_parallel(),
               batch.context_parallelism > 1 ? "data-parallel group(s)" : "rank(s)",
               static_cast<long long>(batch.ga_steps), micro, T, cfg.dtype.c_str());
  if (batch.context_parallelism > 1) {
    const int cp = batch.context_parallelism;
    std::fprintf(out,
                 "plan: context_parallelism %d: %d data-parallel group(s) of %d adjacent ranks; each rank holds %d of "
                 "every row's %d positions (chunks i and %d-i of %d) and gathers the group's keys and values per layer: "
                 "activations below are per rank at T/%d, with the gathered key/value buffers (%s)\n",
                 cp, batch.data_parallel(), cp, T / cp, T, 2 * cp - 1, 2 * cp, cp,
                 gib(model::context_parallel_bytes(
                         dims, micro, T, cp,
                         model::activation_storage_for(ops, bf16_activations(cfg, gpu, dims), cfg.remat, lora) ==
                             model::ActivationStorage::kBf16))
                     .c_str());
  }
  std::fprintf(out, "plan: memory per rank: %s (%s)\n", available.known ? gib(available.bytes).c_str() : "unknown",
               available.what.c_str());
  if (gpu && cfg.weight_dtype == "bfloat16")
    std::fprintf(out, "plan: weight_dtype bfloat16: %s\n",
                 lora.enabled() ? "the GEMMs read bf16 copies; under LoRA the frozen base is stored as float32"
                                : "at zero_stage 1, 2 and 3 the parameters are stored as bf16 (2 bytes each) and "
                                  "the fp32 master weights live in the optimiser's shard; at 0 the float32 "
                                  "parameters are the masters and the GEMMs read a bf16 copy; gradient sums are "
                                  "float32 throughout");

  // Rank 0 holds the most: a checkpoint's host copies (CPU ranks). Its shards are every rank's size (at
  // zero_stage 1 a block plus the tail every rank owns; at 2 and 3 equal pieces, padded).
  const int stages[] = {0, 1, 2, 3};
  std::vector<MemoryPlan> at, other;
  for (int s : stages) at.push_back(plan_at(s, cfg.remat)), other.push_back(plan_at(s, !cfg.remat));
  const auto cells = [&](const char* name, const std::vector<size_t>& bytes) {
    std::fprintf(out, "| %-40s |", name);
    for (size_t b : bytes) std::fprintf(out, " %13s |", gib(b).c_str());
    std::fprintf(out, "\n");
  };
  const auto row = [&](const char* name, auto field) {
    std::vector<size_t> bytes;
    for (const MemoryPlan& p : at) bytes.push_back(field(p));
    cells(name, bytes);
  };
  std::fprintf(out, "\nrank 0 (it holds the most), remat %s:\n\n| %-40s |", cfg.remat ? "true" : "false", "component");
  for (int s : stages) std::fprintf(out, "  zero_stage %d |", s);
  std::fprintf(out, "\n|%s|", std::string(42, '-').c_str());
  for (size_t i = 0; i < at.size(); ++i) std::fprintf(out, "%s|", std::string(15, '-').c_str());
  std::fprintf(out, "\n");
  row("parameters", [](const MemoryPlan& p) { return p.params; });
  row("  of which fp32 master shard (ZeRO-1 bf16, 2, 3)", [](const MemoryPlan& p) { return p.master_shard; });
  row("  of which gathered or widened units", [](const MemoryPlan& p) { return p.gathered_units; });
  row("gradient sums", [](const MemoryPlan& p) { return p.grads; });
  row("  of which unit slots (ZeRO-1 bf16, 2, 3)", [](const MemoryPlan& p) { return p.grad_slots; });
  row("AdamW moments", [](const MemoryPlan& p) { return p.moments; });
  row("activations", [](const MemoryPlan& p) { return p.activations; });
  row("kernel scratch and buffers", [](const MemoryPlan& p) { return p.other; });
  row("  of which kernel scratch", [](const MemoryPlan& p) { return p.kernel_scratch; });
  if (gemm_inputs_bf16(ops))
    row("  of which bf16 copy of the parameters", [](const MemoryPlan& p) { return p.bf16_params; });
  if (!gpu) row("  of which host copies (start, checkpoint)", [](const MemoryPlan& p) { return p.host_copies; });
  row(gpu ? "checkpoint shard (host copy, host RAM)" : "checkpoint shard (in the host copies)",
      [](const MemoryPlan& p) { return p.checkpoint_shard; });
  row("total", [](const MemoryPlan& p) { return p.total(); });
  if (target.ranks > 1 && !gpu) {  // the others hold the starting parameters on the host, not a checkpoint's moments
    std::vector<size_t> bytes;
    for (int s : stages) bytes.push_back(plan_at(s, cfg.remat, 1).total());
    cells(("total on ranks 1 to " + std::to_string(target.ranks - 1)).c_str(), bytes);
  }
  const auto fits = [&](const MemoryPlan& p) { return !available.known ? "?" : p.total() <= available.bytes ? "yes" : "no"; };
  std::fprintf(out, "| %-40s |", "fits");
  for (const MemoryPlan& p : at) std::fprintf(out, " %13s |", fits(p));
  const std::string alt = std::string("total with remat ") + (cfg.remat ? "false" : "true");
  std::fprintf(out, "\n| %-40s |", alt.c_str());
  for (const MemoryPlan& p : other) std::fprintf(out, " %13s |", gib(p.total()).c_str());
  std::fprintf(out, "\n| %-40s |", (alt + ": fits").c_str());
  for (const MemoryPlan& p : other) std::fprintf(out, " %13s |", fits(p));
  std::fprintf(out, "\n\n");
  if (target.ranks == 1)
    std::fprintf(out, "plan: on 1 rank zero_stage 1 to 3 shard nothing (2 and 3 add their unit slots, and 2 an fp32 "
                      "master copy of the parameters)\n");
  if (at[1].grads > at[0].grads)  // bf16 weights at zero_stage 1: not a bug, Megatron's distributed optimizer
    std::fprintf(out, "plan: note: gradient sums are larger at zero_stage 1 than at 0 here: with bf16 weights, "
                      "stage 1 keeps the full fp32 gradient buffer that backward writes (as stage 0 does), plus the "
                      "unit slots it is reduce-scattered through once per step and this rank's fp32 shard of the "
                      "sums, which AdamW reads beside the fp32 master shard; its saving is in the parameters (bf16) "
                      "and the AdamW moments (sharded); zero_stage 2 drops the full buffer\n");

  // The checkpoint (SPEC §5): one shard file per rank, each rank's 1/world of the parameters (fp32
  // masters), m and v; with async_checkpointing every rank keeps that copy in host memory.
  {
    const MemoryPlan& p = at[static_cast<size_t>(cfg.zero_stage)];
    size_t largest = 0;
    for (int r = 0; r < target.ranks; r += std::max(1, target.ranks - 1))  // rank world-1 holds ZeroShard's tail
      largest = std::max(largest, plan_at(static_cast<int>(cfg.zero_stage), cfg.remat, r).checkpoint_shard);
    const size_t all =
        3 * (lora.enabled() ? model::lora_layout(dims, lora).total : model::param_layout(dims).total) * sizeof(float);
    std::fprintf(out, "plan: checkpoint (zero_stage %lld): %s per rank (up to %s), %s in all, in %d shard file(s)"
                      " and an index; async_checkpointing keeps that host copy: up to %s per node of %d rank(s)%s\n",
                 static_cast<long long>(cfg.zero_stage), gib(p.checkpoint_shard).c_str(), gib(largest).c_str(),
                 gib(all).c_str(), target.ranks, gib(largest * static_cast<size_t>(per_node)).c_str(), per_node,
                 gpu ? " (host RAM beside the GPU's)" : " (counted above)");
  }

  // The config's own choice, through the real run's check: its log line, or its error.
  const MemoryPlan mine = check_memory(cfg, batch, dims, ops, available, 0, target.ranks, gpu, threads);
  std::fprintf(out, "plan: memory: this rank needs %s\n", mine.describe().c_str());
  std::fprintf(out, "plan: fits (zero_stage %lld, remat %s)%s\n", static_cast<long long>(cfg.zero_stage),
               cfg.remat ? "true" : "false", available.known ? "" : ": what is available is unknown, not checked");
  return 0;
}

}  // namespace sftdp::train
