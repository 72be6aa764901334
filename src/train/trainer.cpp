// src/train/trainer.cpp — the one trainer loop (SPEC §1), the same for CPU and GPU and every
// world size: for each optimizer step (train_step), GA micro-steps accumulate gradient SUMS and the
// loss and weight sums; one reduction sums them across ranks; then the update divides by the global
// weight sum, clips and applies AdamW identically on every rank. Under ZeRO-1 (zero_stage 1) a
// reduce-scatter replaces the allreduce, each rank updates its shard and the parameters are
// all-gathered (optim::AdamW); ZeRO-2/3 reduce-scatter during every micro-step's backward and, at
// stage 3, gather parameters unit by unit (optim::ZeroUnits). allreduce_overlap (zero_stage 0) splits
// the allreduce into per-bucket ones started during the last micro-step's backward. Rank 0 writes
// metrics; every rank writes its own shard of each checkpoint. Everything that can be wrong with the
// input is checked before anything is written (check_inputs).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "data/tokenizer_identity.h"
#include "hf/hf_dir.h"
#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"
#include "sftdp/log.h"
#include "sftdp/optim.h"
#include "sftdp/train.h"
#include "optim/zero_units.h"
#include "model/context_split.h"
#include "train/checkpoint_saver.h"
#include "train/device.h"
#include "train/evaluate.h"
#include "train/flops.h"
#include "train/memory_plan.h"
#include "train/metrics.h"
#include "train/param_check.h"
#include "train/run_state.h"
#include "train/speed_window.h"
#include "train/stop_signal.h"

namespace sftdp::train {

RunPaths paths_of(const config::Config& cfg) {
  RunPaths p;
  p.run_dir = cfg.base_output_directory + "/" + cfg.run_name;
  p.checkpoint_dir = p.run_dir + "/checkpoints";
  p.metrics_path = p.run_dir + "/metrics.jsonl";
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string format_eta(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

// Everything a run checks before it writes anything (SPEC §2: bad input is exit 2, nothing written):
// the batch factorisation, the model, the device, the data files, the steps, the memory plan and the
// output directory, agreed by every rank.
struct Inputs {
  config::BatchPlan plan;
  config::ModelDims dims;
  Device dev;
  int T = 0;
  std::optional<data::Dataset> train, eval;
  std::optional<data::Sampler> sampler;
  int64_t steps_per_epoch = 0, total_steps = 0;
  Available available;
  MemoryPlan memory;
  RunPaths paths;
};

void check_inputs(const config::Config& cfg, comm::MpiSession& mpi, Inputs& in) {
  // Before the model's dimensions: a missing path would otherwise fall back to the config's preset
  // and be reported as a data/model vocabulary mismatch.
  std::error_code ec;
  if (!cfg.load_parameters_path.empty() && !std::filesystem::exists(cfg.load_parameters_path, ec))
    throw UserError("load_parameters_path: " + cfg.load_parameters_path + ": not found");
  in.plan = config::resolve_batch(cfg, mpi.world());
  in.dims = config::model_dims(cfg);
  in.dev = pick_device(cfg, mpi);
  comm::Communicator& comm = *in.dev.comm;
  in.T = static_cast<int>(cfg.max_target_length);
  // Every rank opens the data files; one that cannot (a path missing on its node) stops them all.
  comm::agree_on_user_errors([&] {
    in.train.emplace(cfg.train_files, in.T, in.dims.V, in.dims.maxT);
    if (!cfg.eval_files.empty()) in.eval.emplace(cfg.eval_files, in.T, in.dims.V, in.dims.maxT);
    std::vector<std::string> files = cfg.train_files;
    files.insert(files.end(), cfg.eval_files.begin(), cfg.eval_files.end());
    const bool hf_dir = hf::is_hf_dir(cfg.load_parameters_path);
    for (const auto& line : data::check_tokenizer_identity(files, hf_dir ? cfg.load_parameters_path : "", in.dims.V))
      log::info("%s", line.c_str());
  });
  in.sampler.emplace(in.train->rows(), in.plan.global_batch, cfg.enable_data_shuffling,
                     static_cast<uint64_t>(cfg.data_shuffle_seed));
  in.steps_per_epoch = in.sampler->steps_per_epoch();
  if (in.steps_per_epoch == 0)
    throw UserError("global_batch_size: " + std::to_string(in.plan.global_batch) +
                    " rows per step, but train_files hold only " + std::to_string(in.train->rows()));
  in.total_steps = cfg.steps > 0 ? cfg.steps : std::max<int64_t>(cfg.num_epochs, 1) * in.steps_per_epoch;
  // What this rank will hold against what its node offers, before anything is allocated or written
  // (memory_plan.h): too much is an error line naming the figures and what would fit, on every rank.
  in.available = available_memory(in.dev.gpu, mpi);
  comm::agree_on_user_errors([&] {
    in.memory = check_memory(cfg, in.plan, in.dims, *in.dev.ops, in.available, comm.rank(), comm.world(), in.dev.gpu,
                             omp_get_max_threads());
  });
  in.paths = paths_of(cfg);
  check_output_directory(cfg, in.paths, comm);
}

// zero_stage 2/3: what ZeRO holds on this rank and what it moves per optimizer step (issue 25).
void log_zero_units(const optim::AdamW& opt, int64_t ga) {
  const optim::ZeroUnits* z = opt.zero_units();
  if (!z) return;
  const double rs = z->reduce_scatter_floats() * sizeof(float) / 1048576.0;
  if (z->stage() == 1) {  // bf16 weights: the masters' shard, the full gradient buffer reduced once
    log::info("zero_stage 1 with bf16 weights: fp32 master and gradient-sum shards plus unit slots %.3f MiB on this "
              "rank; the full gradient buffer is reduce-scattered once per step (%.3f MiB), the bf16 parameters "
              "all-gathered once after the update",
              z->bytes().total() / 1048576.0, rs);
    return;
  }
  log::info("zero_stage %d: gradient-sum and master shards plus unit slots %.3f MiB on this rank; each micro-step "
            "reduce-scatters %.3f MiB of gradient sums (x GA %lld = %.3f MiB per step, zero_stage 0 allreduces %.3f "
            "MiB once); %s",
            z->stage(), z->bytes().total() / 1048576.0, rs, (long long)ga, rs * double(ga), rs,
            z->stage() == 3 ? "parameters all-gathered unit by unit before use in every forward and backward"
                            : "parameters all-gathered once per step after the update");
}

// The start-up lines: the run's shape, which attention runs, the data, the optimiser's share, LoRA,
// the memory plan and the activations with and without remat.
void log_startup(const config::Config& cfg, const Inputs& in, const model::Model& model, const optim::AdamW& opt) {
  const auto& plan = in.plan;
  log::info("sft-dp: %s %s, %d rank(s) x GA %lld x %lld rows = global batch %lld, T=%d, %zu params",
            config::block_name(in.dims).c_str(), in.dev.ops->name, plan.data_parallel(), (long long)plan.ga_steps,
            (long long)plan.micro_batch, (long long)plan.global_batch, in.T, model.layout().total);
  if (plan.context_parallelism > 1)
    log::info("context parallelism: %d rank(s) = %d data-parallel group(s) x context_parallelism %d; each rank holds "
              "%d of every row's %d positions (chunks i and 2n-1-i of 2n), the group's keys and values all-gathered "
              "per layer (%.3f MiB of buffers); the batch above counts groups",
              plan.world_size, plan.data_parallel(), plan.context_parallelism, static_cast<int>(plan.local_positions(in.T)), in.T,
              model::context_parallel_bytes(in.dims, static_cast<int>(plan.micro_batch), in.T, plan.context_parallelism,
                                            model.activation_storage() == model::ActivationStorage::kBf16) /
                  1048576.0);
  if (const std::string note = config::hf_model_note(cfg); !note.empty()) {
    log::info("%s", note.c_str());
    for (const auto& line : hf::read_hf_notes(cfg.load_parameters_path)) log::info("%s", line.c_str());
  }
  if (in.dev.gpu && plan.context_parallelism > 1) {  // kernels/attention.h: attention_tc_cp_*, attention_cp_*
    const bool tc = gemm_inputs_bf16(*in.dev.ops) && attention_bf16::tensor_cores(in.dims.head_size());
    const bool act16 = model.activation_storage() == model::ActivationStorage::kBf16;
    log::info("attention: context parallel over %d ranks, %s%s", plan.context_parallelism,
              tc                               ? "tensor cores (mma.sync bf16, flash attention), "
              : gemm_inputs_bf16(*in.dev.ops) ? "CUDA cores, q, k, v and dO rounded to bf16 (dtype bfloat16), "
                                               : "CUDA cores, fp32 (dtype float32), ",
              act16 ? "bf16 activations (k/v gathered as bf16)" : "fp32 activations");
  } else if (in.dev.gpu) {  // which attention kernel runs (kernels/attention.h)
    const int HS = in.dims.head_size();
    if (!gemm_inputs_bf16(*in.dev.ops))
      log::info("attention: CUDA cores, fp32 (dtype float32)");
    else if (attention_bf16::tensor_cores(HS))
      log::info("attention: tensor cores (mma.sync bf16, flash attention), head size %d", HS);
    else
      log::info("attention: CUDA cores on bf16-rounded inputs: head size %d has no tensor-core kernel "
                "(16..128 in steps of 16 do)", HS);
  }
  log::info("data: %lld rows, %lld steps per epoch, %lld rows left over per epoch (not used)",
            (long long)in.train->rows(), (long long)in.steps_per_epoch, (long long)in.sampler->rows_left_over());
  log::info("optimizer: zero_stage %lld, AdamW moments %.3f MiB on this rank (%zu of %zu floats each of m, v)",
            (long long)cfg.zero_stage, opt.moment_bytes() / 1048576.0, opt.owned_floats(),
            model.trainable_layout().total);
  log_zero_units(opt, plan.ga_steps);
  if (model.bf16_weights())
    log::info("weight_dtype bfloat16: parameters stored as bf16 (%s), fp32 master weights only in this rank's shard; "
              "the parameter all-gathers move bf16 (half the bytes)",
              model.zero_stage() == 3 ? "gathered unit by unit" : "the full bf16 buffer, 2 bytes per parameter");
  else if (in.dev.gpu && cfg.weight_dtype == "bfloat16")
    log::info("weight_dtype bfloat16: parameters stored as float32 (%s); the GEMMs read a bf16 copy",
              model.lora() ? "LoRA's frozen base as loaded"
                           : "at zero_stage 0 they are the master weights; zero_stage 1, 2 or 3 stores bf16");
  if (model.lora()) {
    const auto& lora = model.lora_spec();
    std::string modules;
    for (const auto& m : lora.modules) modules += (modules.empty() ? "" : " ") + m;
    const double grad_mib = model.grad_buffer_floats() * sizeof(float) / 1048576.0;
    log::info(
        "lora: rank %d, alpha %g (scale %g), dropout %g on %s: %zu trainable of %zu parameters (%.4f%%); "
        "gradient buffer %.3f MiB, allreduce %.3f MiB per step; base frozen",
        lora.rank, lora.alpha, double(lora.scale()), lora.dropout, modules.c_str(), model.trainable_layout().total,
        model.layout().total, 100.0 * model.trainable_layout().total / model.layout().total, grad_mib, grad_mib);
  }
  if (in.available.known)
    log::info("memory: this rank needs %s of %.1f MiB available (%s)", in.memory.describe().c_str(),
              static_cast<double>(in.available.bytes) / (1 << 20), in.available.what.c_str());
  else
    log::info("memory: this rank needs %s (what is available is unknown: not checked)", in.memory.describe().c_str());
  // The activation memory either way, so that the log shows what remat saves (or would).
  const size_t act = model.activation_bytes(), saved = model.remat_saved_bytes();
  const auto storage = model.activation_storage();
  log::info("activations: %.3f MiB on this rank, remat %s%s (%.3f MiB with remat %s)", act / 1048576.0,
            cfg.remat ? "true" : "false",
            storage == model::ActivationStorage::kBf16            ? ", activations stored as bf16 (act16 path)"
            : storage == model::ActivationStorage::kBf16GemmInputs ? ", GEMM inputs kept as bf16"
                                                                   : "",
            (cfg.remat ? act + saved : act - saved) / 1048576.0, cfg.remat ? "false" : "true");
}

// SPEC §1, one optimizer step: every micro-step of this rank adds its gradient sums, loss sum and
// weight sum (nothing divided); one reduction across ranks (an allreduce; ZeRO-1 a reduce-scatter;
// allreduce_overlap per-bucket allreduces started during the last micro-step's backward; ZeRO-2/3
// reduce-scatters already made during every micro-step's backward, the loss and weight sums summed in
// apply's gradient-norm allreduce); then AdamW::apply divides by the
// global weight sum, clips and updates. Only this rank reads (and checks) its rows: a bad one ends
// the job from here, exit 2.
optim::StepStats train_step(const config::Config& cfg, const Inputs& in, const std::vector<int64_t>& rows,
                            model::Model& model, optim::AdamW& opt, comm::Communicator& comm, double lr, int t,
                            data::Batch& batch) {
  const model::Model::GradReady start_bucket = [&](size_t begin, size_t end) {
    comm.start_allreduce_sum(model.grads() + begin, end - begin);
  };
  model.zero_grads();
  or_abort_job(comm, [&] {
    for (int micro = 0; micro < in.plan.ga_steps; ++micro) {
      // Context parallelism: the ranks of a group read the same rows (the model keeps its share of them).
      const int cp = in.plan.context_parallelism;
      in.train->read_rows(data::micro_rows(rows, comm.rank() / cp, comm.world() / cp, static_cast<int>(in.plan.ga_steps),
                                           micro),
                          batch);
      const bool overlap = cfg.allreduce_overlap && micro == in.plan.ga_steps - 1;
      model.forward_backward(batch, overlap ? start_bucket : model::Model::GradReady{});
    }
  });
  if (cfg.allreduce_overlap) comm.wait_allreduces();
  else opt.reduce_gradients();
  return opt.apply(cfg, lr, t);
}

// What one step of the whole job does, for its speed: tokens, model FLOPs (train/flops.h) and the
// job's peak FLOP/s (0 when unknown: CPU ranks, or a GPU the cost model does not know).
struct StepWork {
  double tokens = 0, flops = 0, peak_flops = 0;
};

StepWork step_work(const Inputs& in, int world) {
  StepWork w;
  w.tokens = double(in.plan.global_batch) * in.T;
  w.flops = train_flops(in.dims, in.plan.global_batch, in.T);
  if (in.dev.gpu) w.peak_flops = world * peak_bf16_tflops(current_device_name()) * 1e12;
  return w;
}

// Rank 0's metrics line (this step's own time and speed) and the progress line of a finished step,
// whose speed is the window's: a mean over the last steps (train/speed_window.h).
void record_step(MetricsWriter* writer, const optim::StepStats& stats, const checkpoint::TrainState& state,
                 int64_t epoch_of_step, int64_t total_steps, double lr, double dt, const StepWork& work,
                 double avg_step_s, const SpeedWindow& speed, int64_t log_period) {
  const auto mfu_at = [&](double step_s) { return work.peak_flops > 0 ? work.flops / step_s / work.peak_flops : -1; };
  if (writer) {
    StepMetrics m;
    m.step = state.step;
    m.loss = stats.loss, m.lr = lr, m.grad_norm = stats.grad_norm, m.weight_sum = stats.weight_sum;
    m.tokens_per_s = work.tokens / dt, m.step_time_s = dt, m.epoch = epoch_of_step;
    m.tflops = work.flops / dt / 1e12, m.mfu = mfu_at(dt);
    m.skipped = stats.skipped;
    writer->step(m);
  }
  const double mean_s = speed.mean_step_s(), mfu = mfu_at(mean_s);
  char mfu_text[32] = "";
  if (mfu >= 0) std::snprintf(mfu_text, sizeof mfu_text, " | MFU %.1f%%", 100 * mfu);
  if (stats.skipped)
    log::info("step %lld/%lld | skipped: no token with loss weight > 0 in the global batch", (long long)state.step,
              (long long)total_steps);
  else if (state.step % log_period == 0 || state.step == total_steps)
    log::info("step %lld/%lld | loss %.6f | lr %.3e | grad_norm %.4f | %.0f tok/s | %.4g TFLOP/s%s | %.1f ms | eta %s",
              (long long)state.step, (long long)total_steps, stats.loss, lr, stats.grad_norm, work.tokens / mean_s,
              work.flops / mean_s / 1e12, mfu_text, mean_s * 1e3,
              format_eta(avg_step_s * (total_steps - state.step)).c_str());
}

// A metrics.jsonl that logged steps beyond the checkpoint the run starts from: a run ended without
// a checkpoint after them (SIGKILL, out of memory, a second Ctrl-C at mpirun, §2). Its lines are
// dropped and those steps trained again; rank 0 says so rather than lose them silently.
void warn_of_steps_trained_again(const RunPaths& paths, int64_t start_step) {
  const int64_t logged = last_logged_step(paths.metrics_path);
  if (logged <= start_step) return;
  const std::string from =
      start_step > 0 ? "the checkpoint resumed from is step " + std::to_string(start_step) : "no checkpoint was written";
  log::warn("%s logged steps up to %lld but %s: steps %lld-%lld are trained again (the run that logged them ended "
            "without a checkpoint after them: killed, out of memory, or Ctrl-C twice at mpirun)",
            paths.metrics_path.c_str(), (long long)logged, from.c_str(), (long long)start_step + 1, (long long)logged);
}

}  // namespace

int run(const config::Config& cfg, comm::MpiSession& mpi) {
  // Every collective from here on ends the job if a rank stays away this long (comm.h).
  comm::set_collective_timeout(cfg.collective_timeout_s);
  comm::set_collective_context("during set-up");
  for (const auto& note : cfg.alias_notes) log::info("config: %s", note.c_str());  // before any check can fail
  Inputs in;
  check_inputs(cfg, mpi, in);
  comm::Communicator& comm = *in.dev.comm;
  const auto& plan = in.plan;

  // dtype: bfloat16 keeps the GEMM-only activations as bf16 too (SPEC §3; exact: see sftdp/model.h).
  // LoRA (issue 17): adapters on a frozen base; the optimiser, the reductions and the checkpoints
  // then hold only the adapters (model.trainable_layout()). ZeRO-2/3: the model holds no full
  // gradient buffer (3: no full parameters either); the optimiser's ZeroUnits holds the shards.
  // weight_dtype bfloat16 at 2 and 3: bf16 parameters, fp32 masters in the shard (train::bf16_weights).
  const int zero_stage = plan.zero_stage;
  const model::LoraSpec lora = model::lora_spec(cfg, in.dims);
  const auto model_ptr = model::make_model(
      in.dims, *in.dev.ops, static_cast<int>(plan.micro_batch), static_cast<int>(plan.local_positions(in.T)), cfg.remat,
      bf16_activations(cfg, in.dev.gpu, in.dims),
      lora, config::model_zero_stage(zero_stage), bf16_weights(cfg.weight_dtype == "bfloat16", in.dev.gpu, zero_stage, lora));
  model::Model& model = *model_ptr;
  // Context parallelism (SPEC §1): groups of adjacent ranks, each rank two chunks of every row.
  std::unique_ptr<comm::Group> context_group;
  if (plan.context_parallelism > 1) {
    context_group = comm.context_group(plan.context_parallelism);
    model.set_context_parallel(model::context_split(in.T, comm.world(), comm.rank(), plan.context_parallelism),
                               context_group.get());
  }
  model.set_cuda_graphs(cfg.cuda_graphs);
  optim::AdamW opt(model, comm, zero_stage);
  bool async_checkpoints = false;  // before restore: a refused start touches nothing
  comm::agree_on_user_errors([&] {
    async_checkpoints = choose_async_checkpointing(cfg, model, comm, in.dev.gpu, mpi.local_size(), mpi.host());
  });
  checkpoint::TrainState state = restore(cfg, in.paths, model, opt, comm, plan.global_batch, in.steps_per_epoch);
  set_last_checkpoint_step(state.step > 0 ? state.step : -1);  // for the interrupt lines (stop_signal.h)
  if (comm.rank() == 0) warn_of_steps_trained_again(in.paths, state.step);
  log_startup(cfg, in, model, opt);
  if (state.step >= in.total_steps) {
    log::info("run already complete: %lld of %lld steps", (long long)state.step, (long long)in.total_steps);
    return 0;
  }

  // Rank 0's metrics file is opened at the first line, after step 1 has read and checked its rows.
  // A fresh run (step 0) starts the file over; a resumed one keeps the lines up to its checkpoint
  // (the step it starts from, fixed here: state.step has moved on by the time the file opens).
  std::optional<MetricsWriter> metrics_file;
  const int64_t keep_lines_up_to = state.step == 0 ? -1 : state.step;
  auto metrics = [&]() -> MetricsWriter* {
    if (comm.rank() != 0) return nullptr;
    if (!metrics_file) metrics_file.emplace(in.paths.metrics_path, keep_lines_up_to);
    return &*metrics_file;
  };
  auto run_eval = [&](int64_t step) {
    if (!in.eval) return;
    EvalResult r;
    or_abort_job(comm, [&] { r = evaluate(model, *in.eval, comm, plan.micro_batch, plan.global_batch, cfg.eval_steps); });
    log::info("step %lld | eval_loss %.6f over %.0f tokens", (long long)step, r.loss, r.weight_sum);
    if (auto* m = metrics()) m->eval(step, r.loss, r.weight_sum);
  };

  if (state.step == 0) run_eval(0);  // the baseline the run is judged against
  data::Batch batch;
  CheckpointSaver saver(cfg, in.paths, comm, async_checkpoints);
  saver.allocate(model, opt);
  const StepWork work = step_work(in, comm.world());
  double time_sum = 0;
  int64_t timed_steps = 0;
  SpeedWindow speed(cfg.log_period);
  while (state.step < in.total_steps) {
    const auto t0 = Clock::now();
    comm::set_collective_context("of step " + std::to_string(state.step + 1));
    const auto rows = in.sampler->step_rows(state.epoch, state.step_in_epoch);
    model.set_step(state.step);  // LoRA dropout masks: seeded by (seed, step, row, position)
    const double lr = optim::learning_rate(cfg, state.step, in.total_steps);
    // AdamW's t counts updates actually made: a skipped step makes none.
    const auto stats = train_step(cfg, in, rows, model, opt, comm, lr, static_cast<int>(state.optimizer_updates + 1),
                                  batch);
    if (stats.nonfinite)
      die_internal("sftdp", "training step", "loss or gradient norm is not finite at step " +
                   std::to_string(state.step + 1) + " (lr " + std::to_string(lr) +
                   "); no update made, no checkpoint written", __FILE__, __LINE__);
    if (!stats.skipped) state.optimizer_updates += 1;
    in.dev.ops->synchronize();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();

    const int64_t epoch_of_step = state.epoch;
    state.step += 1;
    if (++state.step_in_epoch == in.steps_per_epoch) state.epoch += 1, state.step_in_epoch = 0;
    if (state.step > 1 || in.total_steps == 1) time_sum += dt, ++timed_steps;  // step 1 warms up
    speed.add(dt);
    record_step(metrics(), stats, state, epoch_of_step, in.total_steps, lr, dt, work,
                timed_steps ? time_sum / timed_steps : dt, speed, cfg.log_period);

    const bool last = state.step == in.total_steps;
    // zero_stage 3 and bf16 weights keep no replicated fp32 parameters to compare: each rank holds its shard.
    if (cfg.param_check_period > 0 && comm.world() > 1 && !model.params_sharded() &&
        (state.step % cfg.param_check_period == 0 || last)) {
      if (const int n = ranks_differing_from_rank0(model.trainable_to_host(), comm); n > 0)
        die_internal("sftdp", "parameter check", std::to_string(n) + " rank(s) hold parameters that "
                     "differ from rank 0's after step " + std::to_string(state.step), __FILE__, __LINE__);
    }
    if (cfg.eval_interval > 0 && state.step % cfg.eval_interval == 0 && !last) run_eval(state.step);

    // Stop signal (Slurm's pre-timeout USR1, TERM): all ranks agree, then checkpoint and exit. The
    // same allreduce says whether every rank's background checkpoint write has ended: it is then
    // committed (or its failure agreed, exit 1) here, at the first step boundary after it.
    double flags[2] = {stop_requested() ? 1.0 : 0.0, saver.written() ? 1.0 : 0.0};
    comm.allreduce_sum_host(flags, 2);
    const bool stop = flags[0] > 0;
    if (saver.in_flight() && flags[1] == comm.world()) saver.finish();
    const bool periodic = cfg.checkpoint_period > 0 && state.step % cfg.checkpoint_period == 0;
    // The final checkpoint and a stop's are written before the run goes on (their own and any in flight).
    if (periodic || last || stop) saver.save(model, opt, state, last || stop);
    if (last) {  // the final evaluation's line, then the export's
      comm::set_collective_context("at the end of the run");
      run_eval(state.step);
      if (cfg.hf_export) or_abort_job(comm, [&] { export_hf_dir(cfg, in.paths, model, comm); });
    }
    if (stop && !last) {
      comm.barrier();
      log::info("stop signal received: checkpoint at step %lld written; resubmit to continue",
                (long long)state.step);
      return 0;
    }
  }
  comm.barrier();  // rank 0's checkpoint is on disk before any rank reports success
  log::info("done: %lld steps; outputs in %s", (long long)state.step, in.paths.run_dir.c_str());
  return 0;
}

}  // namespace sftdp::train
