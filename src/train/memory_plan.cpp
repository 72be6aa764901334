// src/train/memory_plan.cpp — see memory_plan.h. The model's part comes from model::footprint (its
// own constructors on a counting table), the optimizer's from its ZeRO shard, the kernels' from
// their documented working memory; every alternative is the same computation with one choice
// changed.
#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#ifdef SFTDP_WITH_CUDA
#include "sftdp/check_cuda.h"
#endif

namespace sftdp::train {

// "21.93 GiB", or "23.6 MiB" below a GiB.
std::string gib(size_t bytes) {
  char s[32];
  if (bytes >= (size_t{1} << 30))
    std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  else
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1u << 20));
  return s;
}

namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // kernels/cuda/gemm.cu's cuBLASLt workspace

// The CUDA path's own working memory beside the model's buffers (kernels/cuda/common.cuh's scratch
// slots), an estimate from above: the cuBLASLt workspace, bf16 copies of the largest GEMM operands,
// column partials, the cross-entropy rows, attention's D and the encoder's buckets; with bf16 GEMM
// inputs also the tensor-core attention's bf16 copies of q, k, v and dO and its tiles' segment ranges.
size_t cuda_scratch_bytes(const config::ModelDims& d, int B, int T, bool bf16, int head_rows) {
  const size_t N = size_t(B) * T, widest = std::max<size_t>({size_t(d.C), 2 * size_t(d.F), size_t(d.qkv_dim())});
  const size_t largest = std::max({N * widest, size_t(d.V) * d.C, size_t(head_rows) * d.V, 2 * size_t(d.F) * d.C});
  const size_t tiles = (size_t(T) + attention_bf16::kTile - 1) / attention_bf16::kTile;
  const size_t attention_copies = bf16 && attention_bf16::tensor_cores(d.head_size())
                                      ? N * (size_t(d.qkv_dim()) + d.attn_dim()) * 2 + size_t(B) * tiles * 8
                                      : 0;
  const size_t dout_copy = std::max(N * widest, size_t(head_rows) * (d.V + 7)) * 2;  // matmul_bwd's dout, rounded once
  const size_t bf16_copies = bf16 ? 2 * largest * 2 + dout_copy + attention_copies : 0;
  const size_t partials = (N / 128 + 1) * widest * 2 * sizeof(float);
  return kGemmWorkspaceBytes + bf16_copies + partials + N * 2 * sizeof(double) + size_t(B) * d.NH * T * sizeof(float) +
         7 * N * sizeof(int32_t);
}

}  // namespace

std::string MemoryPlan::describe() const {
  return gib(total()) + " (parameters " + gib(params) + ", gradient sums " + gib(grads) + ", AdamW moments " +
         gib(moments) + ", activations " + gib(activations) + ", kernel scratch and buffers " + gib(other) + ")";
}

MemoryPlan plan_memory(const config::ModelDims& d, const Ops& ops, int T, const MemoryChoice& choice, int rank,
                       int world, bool gpu, bool bf16_activations, int cpu_threads, const model::LoraSpec& lora) {
  const auto f = model::footprint(d, ops, choice.micro_batch, T, choice.remat, bf16_activations, lora);
  MemoryPlan p;
  p.params = f.params, p.grads = f.grads, p.activations = f.activations;
  const auto layout = lora.enabled() ? model::lora_layout(d, lora) : model::param_layout(d);  // what AdamW updates
  const optim::ZeroShard shard = choice.zero_stage >= 1 ? optim::zero_shard(layout.total, layout.n_decay, rank, world)
                                                        : optim::zero_shard(layout.total, layout.n_decay, 0, 1);
  p.moments = 2 * shard.owned() * sizeof(float);
  const int head_rows = model::Model::default_head_chunk_rows(d.V, choice.micro_batch * T);
  if (gpu) {
    p.other = f.other + cuda_scratch_bytes(d, choice.micro_batch, T, gemm_inputs_bf16(ops), head_rows);
  } else {
    // The attention tiles of every thread, and the host copies of a checkpoint (rank 0 gathers the
    // parameters and both moments; the others copy their parameters for the drift check).
    p.other = f.other +
              cpu::attention_scratch_bytes(choice.micro_batch, T, d.NH, d.kv_heads(), d.head_size(), cpu_threads) +
              (rank == 0 ? 3 : 1) * f.params;
  }
  return p;
}

Available gpu_memory_available(const std::string& host) {
  Available a;
#ifdef SFTDP_WITH_CUDA
  size_t free_bytes = 0, total = 0;
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  a.bytes = free_bytes, a.known = true;
  a.what = "free on CUDA device " + std::to_string(device) + " of " + host + ", " + gib(total) + " in all";
#else
  (void)host;
#endif
  return a;
}

Available cpu_memory_available(int ranks_on_node, const std::string& host) {
  Available a;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") {
      const int ranks = std::max(1, ranks_on_node);
      a.bytes = kib * 1024 / static_cast<size_t>(ranks), a.known = true;
      a.what = "MemAvailable " + gib(kib * 1024) + " shared by " + std::to_string(ranks) + " rank(s) on " + host;
      return a;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  return a;
}

Available available_memory(bool gpu, const comm::MpiSession& mpi) {
  return gpu ? gpu_memory_available(mpi.host()) : cpu_memory_available(mpi.local_size(), mpi.host());
}

MemoryPlan check_memory(const config::Config& cfg, const config::BatchPlan& batch, const config::ModelDims& d,
                        const Ops& ops, const Available& available, int rank, int world, bool gpu, int cpu_threads) {
  const bool bf16_activations = gpu && cfg.dtype == "bfloat16";
  const model::LoraSpec lora = model::lora_spec(cfg, d);
  const int T = static_cast<int>(cfg.max_target_length);
  const MemoryChoice now{static_cast<int>(batch.micro_batch), cfg.remat, static_cast<int>(cfg.zero_stage)};
  const auto plan_of = [&](const MemoryChoice& c) {
    return plan_memory(d, ops, T, c, rank, world, gpu, bf16_activations, cpu_threads, lora);
  };
  const MemoryPlan plan = plan_of(now);
  if (!available.known || plan.total() <= available.bytes) return plan;

  std::vector<std::string> fits;
  const auto fit = [&](const MemoryChoice& c, const std::string& what) {
    const size_t need = plan_of(c).total();
    if (need <= available.bytes) fits.push_back(what + " (" + gib(need) + ")");
    return need <= available.bytes;
  };
  if (!now.remat) fit({now.micro_batch, true, now.zero_stage}, "remat: true");
  for (int m = now.micro_batch - 1; m >= 1; --m) {  // the most rows per micro-step that fit
    if (now.micro_batch % m != 0) continue;
    const int64_t ga = batch.ga_steps * (now.micro_batch / m);
    const std::string what =
        cfg.per_device_batch_size != -1
            ? "per_device_batch_size: " + std::to_string(m) +
                  " with gradient_accumulation_steps: " + std::to_string(ga) + " (the same global batch)"
            : "gradient_accumulation_steps: " + std::to_string(ga) + " (" + std::to_string(m) + " rows per micro-step)";
    if (fit({m, now.remat, now.zero_stage}, what)) break;
  }
  if (now.zero_stage == 0 && world > 1) fit({now.micro_batch, now.remat, 1}, "zero_stage: 1");
  std::string advice;
  if (!fits.empty()) {
    advice = "would fit: ";
    for (size_t i = 0; i < fits.size(); ++i) advice += (i ? "; " : "") + fits[i];
  } else {
    const MemoryChoice all{1, true, world > 1 ? 1 : now.zero_stage};
    const size_t need = plan_of(all).total();
    advice = need <= available.bytes
                 ? "none of remat: true, fewer rows per micro-step or zero_stage: 1 fits alone; all of them together "
                   "(1 row per micro-step) need " +
                       gib(need)
                 : "nothing fits on this rank, even with remat: true, 1 row per micro-step" +
                       std::string(world > 1 ? " and zero_stage: 1" : "") + " (" + gib(need) +
                       "): more ranks, a shorter max_target_length or a smaller model";
  }
  throw UserError("memory: this rank needs " + plan.describe() + " but " + gib(available.bytes) + " is available (" +
                  available.what + "); " + advice);
}

}  // namespace sftdp::train
