// bench/gpu_step_record.cpp — one optimizer step of the GPU path, exactly as the trainer makes it
// (src/train/trainer.cpp: zero_grads, forward_backward, the gradient allreduce over NCCL, AdamW's apply,
// synchronize), for the cost model (bench/gpu_cost.py) in two modes that describe the same step:
// - record (CUDA simulator build): between the record marks "step begin" and "step end" of the simulator's
//   record mode (cudasim/record.h), every device operation the step queues, which gpu_cost.py costs;
//     SFTDP_SIM_RECORD=step.jsonl [SFTDP_SIM_RECORD_ONLY=1] [SFTDP_SIM_DEVICE_MEMORY=80G]
//       gpu_step_record model_name=gpt2-124m global_batch_size=8 max_target_length=1024 dtype=bfloat16
// - profile (any CUDA build, the simulator's included): with SFTDP_GPU_PROFILE=<path>, the step inside a
//   profile window (kernels/cuda/profile.cuh): every operation timed on the device, which gpu_cost.py
//   --profile joins line by line with the record of the same step and its prediction;
//     SFTDP_GPU_PROFILE=profile.jsonl gpu_step_record --warmup 3 model_name=gpt2-124m ...
// --warmup N: N steps first, neither recorded nor profiled (on a GPU: cuBLASLt's algorithms chosen, the
// scratch buffers grown, as in every step of a run but the first); their times go into the profile's header.
// Keys are the trainer's (configs/reference.yml): the model preset and its overrides, global_batch_size (one
// micro-step), max_target_length (T), dtype, weight_dtype, remat, zero_stage, context_parallelism, lora_*, the
// optimizer's. On several ranks (mpirun -np N, SFTDP_SIM_DEVICES=N; SFTDP_SIM_RECORD=step.%r.jsonl: a record per
// rank) the model, its context-parallel group and the optimiser are made as the trainer makes them
// (src/train/trainer.cpp), and each rank records its own step. The batch is
// bench::random_batch (random tokens, the first quarter of each row with loss weight 0); the parameters
// are init_params's. The "step begin" mark and the profile's header carry the model's dimensions, B, T, the
// weighted positions, bench::train_flops (the project's FLOP convention) and the key=value overrides (what
// gpu_cost.py records again to join a profile made elsewhere).
// Record-only (nothing runs on the device): AdamW::apply reads the loss and weight sums back and skips a
// step whose weight sum is 0 — which memory no kernel wrote holds — so with recording paused (the line
// is not in the record) the driver writes the sums a real step has (weight sum = the batch's weighted
// positions, loss sum = that · ln V) before apply; the gradient norm it then reads is 0 (zero pages), so
// with gradient_clipping_threshold=0 the record-only step's lines equal a real step's, AdamW's scalar
// arguments included (clipping changes that one scalar, never which kernels run). Record-only also skips
// uploading the parameters (before the step; their values change no line). Exit 0, 1 on a failed check.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/cuda/profile.cuh"
#include "kernels/ops.h"
#include "model/context_split.h"
#include "sftdp/check.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "train/memory_plan.h"

#ifdef SFTDP_CUDA_SIM
#include "cudasim/record.h"
#else
namespace sftdp::sim {  // a GPU build records nothing: the simulator's record hooks do nothing
inline bool record_only() { return false; }
inline void record_mark(const std::string&, const std::string& = "") {}
inline void record_pause(bool) {}
}  // namespace sftdp::sim
#endif

using namespace sftdp;

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string dims_fields(const config::Config& cfg, const config::ModelDims& d, int B, int T, int weighted,
                        const std::vector<std::string>& overrides, int rank, int world) {
  auto b = [](bool x) { return std::string(x ? "true" : "false"); };
  std::string keys;
  for (const auto& o : overrides) {
    if (!keys.empty()) keys += ',';
    keys += json_string(o);
  }
  return "\"model_name\":" + json_string(cfg.model_name) + ",\"block\":" + json_string(config::block_name(d)) +
         ",\"L\":" + std::to_string(d.L) + ",\"C\":" + std::to_string(d.C) + ",\"F\":" + std::to_string(d.F) +
         ",\"V\":" + std::to_string(d.V) + ",\"NH\":" + std::to_string(d.NH) +
         ",\"KVH\":" + std::to_string(d.kv_heads()) + ",\"HS\":" + std::to_string(d.head_size()) +
         ",\"qkv_dim\":" + std::to_string(d.qkv_dim()) + ",\"attn_dim\":" + std::to_string(d.attn_dim()) +
         ",\"tied\":" + b(d.tied) + ",\"qkv_bias\":" + b(d.qkv_bias) + ",\"qk_norm\":" + b(d.qk_norm) +
         ",\"B\":" + std::to_string(B) + ",\"T\":" + std::to_string(T) +
         ",\"weighted_positions\":" + std::to_string(weighted) + ",\"dtype\":" + json_string(cfg.dtype) +
         ",\"remat\":" + b(cfg.remat) + ",\"train_flops\":" + json_number(bench::train_flops(d, B, T)) +
         ",\"rank\":" + std::to_string(rank) + ",\"world\":" + std::to_string(world) +
         ",\"zero_stage\":" + std::to_string(cfg.zero_stage) +
         ",\"context_parallelism\":" + std::to_string(cfg.context_parallelism) + ",\"overrides\":[" + keys + "]";
}

struct Options {
  int warmup = 0;
  std::vector<std::string> overrides;  // key=value
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
      o.warmup = std::atoi(argv[++i]);
      if (o.warmup < 0) throw UserError("--warmup: must be >= 0");
    } else if (argv[i][0] == '-') {
      throw UserError(std::string("unknown flag ") + argv[i] + " (usage: gpu_step_record [--warmup N] key=value...)");
    } else {
      o.overrides.emplace_back(argv[i]);
    }
  }
  return o;
}

int run(int argc, char** argv, comm::MpiSession& mpi) {
  const Options opt_args = parse_options(argc, argv);
  // The trainer's config keys and checks; train_files is required there but never read here.
  const config::Config cfg = config::from_yaml_text("train_files: random-batch\n", opt_args.overrides, "gpu_step_record");
  const int world = mpi.world(), rank = mpi.rank();
  const auto plan = config::resolve_batch(cfg, world);
  if (plan.ga_steps != 1) throw UserError("gradient_accumulation_steps: one micro-step per step here");
  const config::ModelDims d = config::model_dims(cfg);
  const int B = static_cast<int>(plan.micro_batch), T = static_cast<int>(cfg.max_target_length);
  if (!cuda_device_available()) throw UserError("no CUDA device (run it on a GPU or in the simulator build)");
  cuda_select_device(mpi.local_rank());
  const bool bf16 = cfg.dtype == "bfloat16" || cfg.weight_dtype == "bfloat16";
  const Ops& ops = *cuda_ops(bf16 ? GemmInputs::kBf16 : GemmInputs::kFp32);
  const auto comm = comm::make_nccl_communicator();
  // The model as the trainer makes it (src/train/trainer.cpp): this rank's positions, LoRA, the ZeRO stage's
  // storage, bf16 weights, and the context-parallel group.
  const int zero_stage = static_cast<int>(cfg.zero_stage);
  const model::LoraSpec lora = model::lora_spec(cfg, d);
  const auto model_ptr = model::make_model(
      d, ops, B, static_cast<int>(plan.local_positions(T)), cfg.remat, train::bf16_activations(cfg, true, d), lora,
      config::model_zero_stage(zero_stage), train::bf16_weights(cfg.weight_dtype == "bfloat16", true, zero_stage, lora));
  model::Model& model = *model_ptr;
  std::unique_ptr<comm::Group> context_group;
  if (plan.context_parallelism > 1) {
    context_group = comm->context_group(plan.context_parallelism);
    model.set_context_parallel(model::context_split(T, world, rank, plan.context_parallelism), context_group.get());
  }
  optim::AdamW opt(model, *comm, zero_stage);
  const bool only = sim::record_only();
  if (!only) {
    std::vector<float> params;
    model::init_params(params, model.layout(), d, static_cast<uint64_t>(cfg.seed));
    model.set_params_from_host(params);
  }
  const data::Batch batch = bench::random_batch(B, T, d.V);
  int weighted = 0;
  for (const float w : batch.loss_weights) weighted += w != 0.f;
  ops.synchronize();

  int t = 0;
  optim::StepStats stats;
  auto step = [&] {
    model.set_step(t);
    model.zero_grads();
    model.forward_backward(batch);
    opt.reduce_gradients();
    if (only) {  // see the file header: what a real step's sums would be (this rank's share), outside the record
      const double share = static_cast<double>(weighted) / world;
      const float sums[2] = {static_cast<float>(share * std::log(static_cast<double>(d.V))),
                             static_cast<float>(share)};
      const bool was_paused = t < opt_args.warmup;
      sim::record_pause(true);
      ops.to_device(model.sums(), sums, sizeof sums);
      sim::record_pause(was_paused);
    }
    stats = opt.apply(cfg, optim::learning_rate(cfg, t, opt_args.warmup + 1), t + 1);
    ops.synchronize();
    ++t;
  };
  std::string warmup_ms;
  sim::record_pause(opt_args.warmup > 0);
  for (int w = 0; w < opt_args.warmup; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", ms);
    if (!warmup_ms.empty()) warmup_ms += ',';
    warmup_ms += text;
  }
  sim::record_pause(false);

  const std::string fields = dims_fields(cfg, d, B, T, weighted, opt_args.overrides, rank, world);
  const bool profiling = cuda::profile::enabled();
  if (profiling) cuda::profile::begin(fields + ",\"warmup_ms\":[" + warmup_ms + "],\"gemm_inputs\":" +
                                      json_string(ops.name));
  sim::record_mark("step begin", fields);
  step();
  sim::record_mark("step end");
  if (profiling) cuda::profile::end();

  std::printf("gpu_step_record: %s B=%d T=%d %s: %s%s\n", cfg.model_name.c_str(), B, T, ops.name,
              only ? "recorded only (nothing ran)" : ("loss " + std::to_string(stats.loss)).c_str(),
              profiling ? ", profiled" : "");
  if (stats.skipped || stats.nonfinite) {
    std::fprintf(stderr, "gpu_step_record: the step was %s\n", stats.skipped ? "skipped" : "not finite");
    return 1;
  }
  // A real step of a freshly initialised model starts near ln V (a few warm-up steps move it a little).
  if (!only && !bench::check("loss vs ln(V)", std::fabs(stats.loss - std::log(double(d.V))), 1.0 + opt_args.warmup))
    return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession mpi(argc, argv);
  try {
    return run(argc, argv, mpi);
  } catch (const UserError& e) {
    std::fprintf(stderr, "gpu_step_record: error: %s\n", e.what());
    return 2;
  }
}
