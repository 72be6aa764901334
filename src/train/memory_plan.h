// src/train/memory_plan.h — what a rank will hold, checked before anything is allocated or written
// (issue 16): parameters, gradient sums, AdamW moments (this rank's ZeRO shard), activations, the
// kernels' working memory and buffers, against what its node offers it (CPU: /proc/meminfo's
// MemAvailable shared by the ranks on the node; GPU: cudaMemGetInfo's free bytes on its device).
// Too much is a UserError (exit 2) with the figures and what would fit — remat: true, fewer rows per
// micro-step (more gradient_accumulation_steps, or a smaller per_device_batch_size), another
// zero_stage — instead of the kernel's OOM killer ending the run with no message.
// The figures are the run's own allocations: the model and optim::AdamW (with ZeRO-2/3's shards and
// unit slots, optim::ZeroUnits) built by their own constructors on a table that only counts
// (model::counting_ops), and the kernels' working memory as their Ops table states it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "kernels/attention.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp {
struct Ops;
}

namespace sftdp::train {

struct MemoryPlan {
  size_t params = 0, grads = 0, moments = 0, activations = 0, other = 0;  // bytes on this rank
  // What some of them hold (parts of the figures above, not added to the total), for sft_train
  // --plan's table. params: the model's full parameters (zero_stage 0 to 2) + master_shard, the fp32
  // weights of this rank's ZeRO-2/3 shard (and at stage 3 under LoRA the frozen base's) +
  // gathered_units, the stage-3 slots units are all-gathered into before use (with their bf16
  // copies); with bf16 weights the model's parameters are bf16 (2 bytes each, stage 2) and
  // gathered_units also holds the slots stage 2 widens the units in use into. grads: the gradient buffer (0, 1), or at 2 and 3 the shard of the sums + grad_slots, the
  // per-unit slots backward writes and reduce-scatters. other: kernel_scratch (Ops::scratch_bytes) +
  // host_copies (CPU ranks: the start's, a checkpoint shard's and the drift check's) + bf16_params (the bf16-GEMM
  // table's copy of the full parameters, zero_stage 0 to 2) + the model's other buffers.
  size_t master_shard = 0, gathered_units = 0, grad_slots = 0, kernel_scratch = 0, host_copies = 0, bf16_params = 0;
  // This rank's part of a checkpoint (parameters, m, v: its shard file's data), which it copies to
  // host memory at each checkpoint (on CPU ranks inside host_copies; GPU ranks hold it in host RAM).
  size_t checkpoint_shard = 0;
  size_t total() const { return params + grads + moments + activations + other; }
  std::string describe() const;  // "6.14 GiB (parameters 0.50, gradients 0.50, ...)"
};

struct MemoryChoice {
  int micro_batch = 1;
  bool remat = false;
  int zero_stage = 0;
  int context_parallelism = 1;  // activations at T / cp per rank, plus the group's key/value buffers
};

// A Communicator that only answers rank() and world(): what a planned optimiser is built on (AdamW and
// ZeroUnits make no collective in their constructors, and their shards depend on nothing else). Any
// collective on it is an internal error: a plan never communicates.
std::unique_ptr<comm::Communicator> world_only_communicator(int rank, int world);

// This rank's plan for a model of dims d on ops's device (no allocation happens): the model and the
// optimiser of choice.zero_stage as the run builds them, the kernels' working memory as
// ops.scratch_bytes states it, and unless gpu the host copies of the parameters and moments that
// checkpoints and the drift check make (CPU ranks: host memory is all they have).
// bf16_weight_dtype: the config asks for weight_dtype bfloat16, which stores bf16 parameters where
// bf16_weights() says so (at the other stages the parameters stay fp32).
MemoryPlan plan_memory(const config::ModelDims& d, const Ops& ops, int T, const MemoryChoice& choice, int rank,
                       int world, bool gpu, bool bf16_activations, int cpu_threads, const model::LoraSpec& lora = {},
                       bool bf16_weight_dtype = false);

// Whether the run's model keeps bf16 activations (dtype: bfloat16 on the GPU, SPEC §3): with context parallelism
// only where its attention runs on the tensor-core kernels (head sizes 16..128 in steps of 16), which have the act16
// path's context-parallel twin (kernels/attention.h).
inline bool bf16_activations(const config::Config& cfg, bool gpu, const config::ModelDims& d) {
  return gpu && cfg.dtype == "bfloat16" &&
         (cfg.context_parallelism == 1 || attention_bf16::tensor_cores(d.head_size()));
}

// Whether a run stores its parameters as bf16 (model::Model::bf16_weights, issue 25): weight_dtype
// bfloat16 on the GPU at zero_stage 1, 2 or 3 without LoRA. At zero_stage 0 the fp32 parameters are
// the master weights and the GEMMs read a bf16 copy (bf16 storage would save nothing there: 4 + 2
// bytes per parameter either way); under LoRA the frozen base stays as loaded.
inline bool bf16_weights(bool bf16_weight_dtype, bool gpu, int zero_stage, const model::LoraSpec& lora) {
  return bf16_weight_dtype && gpu && zero_stage >= 1 && !lora.enabled();
}

struct Available {
  size_t bytes = 0;
  bool known = false;
  std::string what;  // "MemAvailable 23.44 GiB / 2 ranks on node07"
};
Available available_memory(bool gpu, const comm::MpiSession& mpi);
// Its two halves: the current CUDA device's free bytes (not known in a build without CUDA), and
// /proc/meminfo's MemAvailable shared by ranks_on_node ranks.
Available gpu_memory_available(const std::string& host);
Available cpu_memory_available(int ranks_on_node, const std::string& host);

// "21.93 GiB", or "23.6 MiB" below a GiB: the figures of describe() and the error line.
std::string gib(size_t bytes);

// Throws UserError when the plan of cfg on this rank exceeds what is available, naming both and
// every single change that would fit (remat: true; the most rows per micro-step that fit; on more
// than one rank the least other zero_stage that fits), or what all of them together would need.
// Returns the plan (for the start-up log).
MemoryPlan check_memory(const config::Config& cfg, const config::BatchPlan& batch, const config::ModelDims& d,
                        const Ops& ops, const Available& available, int rank, int world, bool gpu, int cpu_threads);

}  // namespace sftdp::train
