// src/train/memory_plan.h — what a rank will hold, checked before anything is allocated or written
// (issue 16): parameters, gradient sums, AdamW moments (this rank's ZeRO shard), activations, the
// kernels' working memory and buffers, against what its node offers it (CPU: /proc/meminfo's
// MemAvailable shared by the ranks on the node; GPU: cudaMemGetInfo's free bytes on its device).
// Too much is a UserError (exit 2) with the figures and what would fit — remat: true, fewer rows per
// micro-step (more gradient_accumulation_steps, or a smaller per_device_batch_size), zero_stage: 1 —
// instead of the kernel's OOM killer ending the run with no message.
#pragma once
#include <cstddef>
#include <string>

#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp {
struct Ops;
}

namespace sftdp::train {

struct MemoryPlan {
  size_t params = 0, grads = 0, moments = 0, activations = 0, other = 0;  // bytes on this rank
  size_t total() const { return params + grads + moments + activations + other; }
  std::string describe() const;  // "6.14 GiB (parameters 0.50, gradients 0.50, ...)"
};

struct MemoryChoice {
  int micro_batch = 1;
  bool remat = false;
  int zero_stage = 0;
};

// This rank's plan for a model of dims d on ops's device (no allocation happens).
// gpu: the kernels' working memory of the CUDA path (cuBLASLt workspace, scratch); else the CPU
// twins' (attention tiles per thread) and the host copies a checkpoint makes.
MemoryPlan plan_memory(const config::ModelDims& d, const Ops& ops, int T, const MemoryChoice& choice, int rank,
                       int world, bool gpu, bool bf16_activations, int cpu_threads, const model::LoraSpec& lora = {});

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
// every single change that would fit. Returns the plan (for the start-up log).
MemoryPlan check_memory(const config::Config& cfg, const config::BatchPlan& batch, const config::ModelDims& d,
                        const Ops& ops, const Available& available, int rank, int world, bool gpu, int cpu_threads);

}  // namespace sftdp::train
