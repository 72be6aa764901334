// src/train/memory_plan.cpp — see memory_plan.h. The model's part comes from model::footprint (its
// own constructors on a counting table), the optimiser's from optim::AdamW built on such a model
// (its moments, and at zero_stage 2 and 3 ZeroUnits's shards and slots), the kernels' from their
// table's scratch_bytes; every alternative is the same computation with one choice changed.
#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "kernels/ops.h"
#include "optim/zero_units.h"
#include "sftdp/check.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "train/checkpoint_shards.h"
#include "train/run_state.h"
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

// world_only_communicator's: a collective on it would be a bug in the plan, never a result of it.
class PlanCommunicator final : public comm::Communicator {
 public:
  PlanCommunicator(int rank, int world) : rank_(rank), world_(world) {}
  const char* name() const override { return "memory plan"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void allreduce_sum(float*, size_t) override { none("allreduce_sum"); }
  void reduce_scatter_sum(float*, size_t) override { none("reduce_scatter_sum"); }
  void all_gather(float*, size_t) override { none("all_gather"); }
  Ticket start_reduce_scatter_sum(const float*, float*, size_t) override { none("start_reduce_scatter_sum"); }
  Ticket start_all_gather(const float*, float*, size_t) override { none("start_all_gather"); }
  Ticket start_all_gather_bf16(uint16_t*, size_t) override { none("start_all_gather_bf16"); }
  void wait(Ticket) override { none("wait"); }
  void wait_all() override { none("wait_all"); }
  void allreduce_sum_host(double*, size_t) override { none("allreduce_sum_host"); }
  void broadcast_host(void*, size_t, int) override { none("broadcast_host"); }
  void barrier() override { none("barrier"); }
  std::unique_ptr<comm::Group> context_group(int) override { none("context_group"); }
  [[noreturn]] void abort(int) override { none("abort"); }

 private:
  [[noreturn]] static void none(const char* call) {
    die_internal("sftdp", call, "the memory plan builds the optimiser on a communicator that makes no collective",
                 __FILE__, __LINE__);
  }
  int rank_, world_;
};


ScratchShape scratch_shape(const config::ModelDims& d, int B, int T, int cpu_threads, int context_T) {
  ScratchShape s;
  s.B = B, s.T = T, s.C = d.C, s.F = d.F, s.V = d.V;
  s.NH = d.NH, s.KVH = d.kv_heads(), s.HS = d.head_size(), s.qkv_dim = d.qkv_dim(), s.attn_dim = d.attn_dim();
  s.head_rows = model::Model::default_head_chunk_rows(d.V, B * T);
  s.threads = cpu_threads;
  s.context_T = context_T;
  return s;
}

}  // namespace

std::unique_ptr<comm::Communicator> world_only_communicator(int rank, int world) {
  return std::make_unique<PlanCommunicator>(rank, world);
}

std::string MemoryPlan::describe() const {
  return gib(total()) + " (parameters " + gib(params) + ", gradient sums " + gib(grads) + ", AdamW moments " +
         gib(moments) + ", activations " + gib(activations) + ", kernel scratch and buffers " + gib(other) + ")";
}

MemoryPlan plan_memory(const config::ModelDims& d, const Ops& ops, int T, const MemoryChoice& choice, int rank,
                       int world, bool gpu, bool bf16_activations, int cpu_threads, const model::LoraSpec& lora,
                       bool bf16_weight_dtype) {
  SFTDP_ASSERT(choice.zero_stage >= 0 && choice.zero_stage <= 3, "plan_memory: zero_stage 0 to 3");
  const int B = choice.micro_batch;
  const int T_full = T;
  T /= choice.context_parallelism;  // the positions this rank holds (model/context_split.h)
  const int model_stage = config::model_zero_stage(choice.zero_stage);  // as the trainer makes the model
  const bool bf16w = bf16_weights(bf16_weight_dtype, gpu, choice.zero_stage, lora);
  const auto f = model::footprint(d, ops, B, T, choice.remat, bf16_activations, lora, model_stage, bf16w);
  MemoryPlan p;
  p.params = f.params, p.grads = f.grads, p.activations = f.activations, p.other = f.other;
  const bool act16 =
      model::activation_storage_for(ops, bf16_activations, choice.remat, lora) == model::ActivationStorage::kBf16;
  p.activations += model::context_parallel_bytes(d, B, T_full, choice.context_parallelism, act16);

  // The optimiser as the trainer builds it, on a model of the counting table: AdamW's moments, and at
  // zero_stage 2 and 3 ZeroUnits's master and gradient shards with the unit slots.
  size_t full_params = 0;  // bytes of one host copy of every parameter (under LoRA the base and the adapters)
  size_t trainable = 0;    // of one host copy of what AdamW updates (the parameters, or the adapters)
  {
    const Ops counting = model::counting_ops(ops);
    const auto model = model::make_model(d, counting, B, T, choice.remat, bf16_activations, lora, model_stage, bf16w);
    trainable = model->trainable_layout().total * sizeof(float);
    full_params = model->layout().total * sizeof(float) + (model->lora() ? trainable : 0);
    // The GEMMs' bf16 copy of the full parameters, which the model keeps beside them (Model::bf16_mirrors).
    if (model->params() && gemm_inputs_bf16(counting)) p.bf16_params = model->layout().total * sizeof(uint16_t);
    const auto comm = world_only_communicator(rank, world);
    const size_t before = model::counted_bytes();
    optim::AdamW opt(*model, *comm, choice.zero_stage);
    const size_t optimiser = model::counted_bytes() - before;
    p.moments = opt.moment_bytes();
    size_t zero = 0;
    if (const optim::ZeroUnits* units = opt.zero_units()) {
      const optim::ZeroUnits::Bytes& b = units->bytes();
      p.master_shard = b.master + b.base_shard, p.gathered_units = b.param_slots, p.grad_slots = b.grad_slots;
      p.params += p.master_shard + p.gathered_units;
      p.grads += b.grad_shard + b.grad_slots;
      zero = b.total();
    }
    p.checkpoint_shard = shard_bytes(sharding_of(*model, choice.zero_stage), rank, world);
    SFTDP_ASSERT(optimiser >= p.moments + zero, "plan_memory: the optimiser allocated less than it holds");
    p.other += optimiser - p.moments - zero;  // AdamW's device scalar
  }

  p.kernel_scratch =
      ops.scratch_bytes(scratch_shape(d, B, T, cpu_threads, choice.context_parallelism > 1 ? T_full : 0));
  if (!gpu) {
    // Host copies, on CPU ranks the same memory as everything else (src/train/run_restore.cpp,
    // checkpoint_saver.h). At the start rank 0 reads the starting parameters (under LoRA the base too)
    // and the others receive them in chunks of at most 64 MiB (restore's stream_from_rank0); a resume
    // reads in such chunks on every rank. Then every rank keeps the host copy of its checkpoint shard
    // (parameters, m and v of what it writes: 1/world of each) and, at zero_stage 0 to 2 on more than
    // one rank, copies the trainable parameters for the drift check (param_check_period).
    const size_t chunk = std::min(full_params, kRestoreChunkFloats * sizeof(float));
    const size_t drift = choice.zero_stage < 3 && world > 1 ? trainable : 0;
    const size_t start = rank == 0 ? full_params + chunk : chunk;
    p.host_copies = std::max(start, p.checkpoint_shard + drift);
  }
  p.other += p.kernel_scratch + p.host_copies;
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
  const bool bf16_activations = train::bf16_activations(cfg, gpu, d);
  const model::LoraSpec lora = model::lora_spec(cfg, d);
  const int T = static_cast<int>(cfg.max_target_length);
  const MemoryChoice now{static_cast<int>(batch.micro_batch), cfg.remat, static_cast<int>(cfg.zero_stage),
                         batch.context_parallelism};
  const auto plan_of = [&](const MemoryChoice& c) {
    return plan_memory(d, ops, T, c, rank, world, gpu, bf16_activations, cpu_threads, lora,
                       cfg.weight_dtype == "bfloat16");
  };
  const MemoryPlan plan = plan_of(now);
  if (!available.known || plan.total() <= available.bytes) return plan;

  std::vector<std::string> fits;
  const auto fit = [&](const MemoryChoice& c, const std::string& what) {
    const size_t need = plan_of(c).total();
    if (need <= available.bytes) fits.push_back(what + " (" + gib(need) + ")");
    return need <= available.bytes;
  };
  if (!now.remat) fit({now.micro_batch, true, now.zero_stage, now.context_parallelism}, "remat: true");
  for (int m = now.micro_batch - 1; m >= 1; --m) {  // the most rows per micro-step that fit
    if (now.micro_batch % m != 0) continue;
    const int64_t ga = batch.ga_steps * (now.micro_batch / m);
    const std::string what =
        cfg.per_device_batch_size != -1
            ? "per_device_batch_size: " + std::to_string(m) +
                  " with gradient_accumulation_steps: " + std::to_string(ga) + " (the same global batch)"
            : "gradient_accumulation_steps: " + std::to_string(ga) + " (" + std::to_string(m) + " rows per micro-step)";
    if (fit({m, now.remat, now.zero_stage, now.context_parallelism}, what)) break;
  }
  // Sharding helps only across ranks: the least other stage that fits (on one rank every stage holds
  // everything, the ZeRO-2/3 shards in addition to what they replace).
  if (world > 1)
    for (int stage = 0; stage <= 3; ++stage)
      if (stage != now.zero_stage &&
          fit({now.micro_batch, now.remat, stage, now.context_parallelism}, "zero_stage: " + std::to_string(stage)))
        break;
  std::string advice;
  if (!fits.empty()) {
    advice = "would fit: ";
    for (size_t i = 0; i < fits.size(); ++i) advice += (i ? "; " : "") + fits[i];
  } else {
    // All of them together: remat, one row per micro-step and the stage that needs least.
    MemoryChoice all{1, true, now.zero_stage, now.context_parallelism};
    size_t need = plan_of(all).total();
    if (world > 1)
      for (int stage = 0; stage <= 3; ++stage)
        if (const size_t n = plan_of({1, true, stage, now.context_parallelism}).total(); n < need)
          need = n, all.zero_stage = stage;
    const std::string together =
        "remat: true, 1 row per micro-step" + (world > 1 ? " and zero_stage: " + std::to_string(all.zero_stage) : "");
    advice = need <= available.bytes
                 ? std::string("none of remat: true, fewer rows per micro-step") +
                       (world > 1 ? " or another zero_stage" : "") + " fits alone; all of them together (" + together +
                       ") need " + gib(need)
                 : "nothing fits on this rank, even with " + together + " (" + gib(need) +
                       "): more ranks, a shorter max_target_length or a smaller model";
  }
  throw UserError("memory: this rank needs " + plan.describe() + " but " + gib(available.bytes) + " is available (" +
                  available.what + "); " + advice);
}

}  // namespace sftdp::train
