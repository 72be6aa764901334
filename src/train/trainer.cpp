// src/train/trainer.cpp — the one trainer loop (SPEC §1), the same for CPU and GPU and every
// world size: for each optimizer step, GA micro-steps accumulate gradient SUMS and the loss and
// weight sums; one allreduce sums them across ranks; then the update divides by the global
// weight sum, clips and applies AdamW identically on every rank. Rank 0 writes metrics and
// checkpoints. Everything that can be wrong with the input is checked before anything is written.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"
#include "sftdp/log.h"
#include "sftdp/optim.h"
#include "sftdp/train.h"
#include "train/device.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/param_check.h"
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

// Runs fn on rank 0 only and hands its outcome to every rank: a UserError there (a corrupt
// checkpoint, say) is rethrown on every rank, so all exit 2 cleanly and rank 0 prints it once.
template <class Fn>
void on_rank0(comm::Communicator& comm, Fn&& fn) {
  std::string error;
  if (comm.rank() == 0) {
    try {
      fn();
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  uint64_t len = error.size();
  comm.broadcast_host(&len, sizeof len, 0);
  error.resize(len);
  comm.broadcast_host(error.data(), len, 0);
  if (len > 0) throw UserError(error);
}

void broadcast_floats(comm::Communicator& comm, std::vector<float>& v, size_t n) {
  v.resize(n);
  comm.broadcast_host(v.data(), n * sizeof(float), 0);
}

// Where the run starts: fresh (seeded or load_parameters_path) or from the newest checkpoint.
// Rank 0 alone reads files and every rank receives its parameters, moments and data cursor, so
// ranks start bitwise identical even where other nodes cannot see rank 0's output directory.
checkpoint::TrainState restore(const config::Config& cfg, const RunPaths& paths,
                               model::Gpt2& model, optim::AdamW& opt, comm::Communicator& comm) {
  checkpoint::TrainState state;
  std::vector<float> params, m, v;
  int64_t resumed = 0;
  on_rank0(comm, [&] {
    const auto newest = cfg.resume ? checkpoint::newest(paths.checkpoint_dir) : std::nullopt;
    if (newest) {
      checkpoint::load(*newest, model.layout(), params, m, v, state);
      resumed = 1;
      log::info("resuming from %s (step %lld, epoch %lld, step %lld of that epoch)", newest->c_str(),
                (long long)state.step, (long long)state.epoch, (long long)state.step_in_epoch);
    } else if (!cfg.load_parameters_path.empty()) {
      checkpoint::load_params(cfg.load_parameters_path, model.layout(), params);
      log::info("initial parameters from %s", cfg.load_parameters_path.c_str());
    } else {
      model::init_params(params, model.layout(), model.dims(), static_cast<uint64_t>(cfg.seed));
    }
  });
  const size_t n = model.layout().total;
  broadcast_floats(comm, params, n);
  comm.broadcast_host(&resumed, sizeof resumed, 0);
  if (resumed) {
    broadcast_floats(comm, m, n);
    broadcast_floats(comm, v, n);
    int64_t cursor[3] = {state.step, state.epoch, state.step_in_epoch};
    comm.broadcast_host(cursor, sizeof cursor, 0);
    state.step = cursor[0], state.epoch = cursor[1], state.step_in_epoch = cursor[2];
    opt.set_moments_from_host(m, v);
  }
  model.set_params_from_host(params);
  return state;
}

void save_checkpoint(const config::Config& cfg, const RunPaths& paths, const model::Gpt2& model,
                     const optim::AdamW& opt, checkpoint::TrainState state) {
  std::vector<float> m, v;
  opt.moments_to_host(m, v);
  state.config_yaml = cfg.to_yaml();
  const auto path = checkpoint::save(paths.checkpoint_dir, model.layout(), model.params_to_host(), m,
                                     v, state);
  checkpoint::prune(paths.checkpoint_dir, cfg.keep_checkpoints);
  log::info("checkpoint %s", path.c_str());
}

}  // namespace

int run(const config::Config& cfg, comm::MpiSession& mpi) {
  // ---- everything that can be wrong with the input, before anything is written ----
  const auto plan = config::resolve_batch(cfg, mpi.world());
  const auto dims = config::model_dims(cfg);
  Device dev = pick_device(cfg, mpi);
  comm::Communicator& comm = *dev.comm;
  const int T = static_cast<int>(cfg.max_target_length);
  // Every rank opens the data files; one that cannot (a path missing on its node) stops them all.
  std::optional<data::Dataset> train_file, eval_data;
  comm::agree_on_user_errors([&] {
    train_file.emplace(cfg.train_files, T, dims.V, dims.maxT);
    if (!cfg.eval_files.empty()) eval_data.emplace(cfg.eval_files, T, dims.V, dims.maxT);
  });
  const data::Dataset& train_data = *train_file;
  data::Sampler sampler(train_data.rows(), plan.global_batch, cfg.enable_data_shuffling,
                        static_cast<uint64_t>(cfg.data_shuffle_seed));
  const int64_t steps_per_epoch = sampler.steps_per_epoch();
  if (steps_per_epoch == 0)
    throw UserError("global_batch_size: " + std::to_string(plan.global_batch) +
                    " rows per step, but train_files hold only " + std::to_string(train_data.rows()));
  const int64_t total_steps =
      cfg.steps > 0 ? cfg.steps : std::max<int64_t>(cfg.num_epochs, 1) * steps_per_epoch;
  const RunPaths paths = paths_of(cfg);

  model::Gpt2 model(dims, *dev.ops, static_cast<int>(plan.micro_batch), T);
  optim::AdamW opt(model);
  checkpoint::TrainState state = restore(cfg, paths, model, opt, comm);

  log::info("sft-dp: %s, %d rank(s) x GA %lld x %lld rows = global batch %lld, T=%d, %zu params",
            dev.ops->name, plan.world_size, (long long)plan.ga_steps, (long long)plan.micro_batch,
            (long long)plan.global_batch, T, model.layout().total);
  log::info("data: %lld rows, %lld steps per epoch, %lld rows left over per epoch (not used)",
            (long long)train_data.rows(), (long long)steps_per_epoch,
            (long long)sampler.rows_left_over());
  if (state.step >= total_steps) {
    log::info("run already complete: %lld of %lld steps", (long long)state.step, (long long)total_steps);
    return 0;
  }

  // Rank 0's metrics file is opened at the first line, after step 1 has read and checked its rows.
  std::optional<MetricsWriter> metrics_file;
  const int64_t first_step = state.step;
  auto metrics = [&]() -> MetricsWriter* {
    if (comm.rank() != 0) return nullptr;
    if (!metrics_file) metrics_file.emplace(paths.metrics_path, first_step);
    return &*metrics_file;
  };

  auto run_eval = [&](int64_t step) {
    if (!eval_data) return;
    const auto r = evaluate(model, *eval_data, comm, plan.micro_batch, cfg.eval_steps);
    log::info("step %lld | eval_loss %.6f over %.0f tokens", (long long)step, r.loss, r.weight_sum);
    if (auto* m = metrics()) m->eval(step, r.loss, r.weight_sum);
  };

  if (state.step == 0) run_eval(0);  // the baseline the run is judged against
  data::Batch batch;
  const double tokens_per_step = double(plan.global_batch) * T;
  double time_sum = 0;
  int64_t timed_steps = 0;
  while (state.step < total_steps) {
    const auto t0 = Clock::now();
    const auto rows = sampler.step_rows(state.epoch, state.step_in_epoch);
    model.zero_grads();
    try {
      for (int micro = 0; micro < plan.ga_steps; ++micro) {
        train_data.read_rows(data::micro_rows(rows, comm.rank(), comm.world(),
                                              static_cast<int>(plan.ga_steps), micro), batch);
        model.forward_backward(batch);
      }
    } catch (const UserError& e) {
      // Only this rank read the bad row: it speaks for the job and ends every rank with exit 2
      // (on one rank, main prints it and exits 2 cleanly).
      if (comm.world() == 1) throw;
      std::fprintf(stderr, "sft_train: error: %s\n", e.what());
      std::fflush(stderr);
      comm.abort(2);
    }
    // One allreduce: gradient sums, loss sum and weight sum together.
    comm.allreduce_sum(model.grads(), model.grad_buffer_floats());
    const double lr = optim::learning_rate(cfg, state.step, total_steps);
    const auto stats = opt.apply(cfg, lr, static_cast<int>(state.step + 1));
    dev.ops->synchronize();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();

    const int64_t epoch_of_step = state.epoch;
    state.step += 1;
    if (++state.step_in_epoch == steps_per_epoch) state.epoch += 1, state.step_in_epoch = 0;
    if (state.step > 1 || total_steps == 1) time_sum += dt, ++timed_steps;  // step 1 warms up

    if (auto* writer = metrics()) {
      StepMetrics m;
      m.step = state.step;
      m.loss = stats.loss, m.lr = lr, m.grad_norm = stats.grad_norm, m.weight_sum = stats.weight_sum;
      m.tokens_per_s = tokens_per_step / dt, m.step_time_s = dt, m.epoch = epoch_of_step;
      m.skipped = stats.skipped;
      writer->step(m);
    }
    if (stats.skipped)
      log::info("step %lld/%lld | skipped: no token with loss weight > 0 in the global batch",
                (long long)state.step, (long long)total_steps);
    else if (state.step % cfg.log_period == 0 || state.step == total_steps) {
      const double avg = timed_steps ? time_sum / timed_steps : dt;
      log::info("step %lld/%lld | loss %.6f | lr %.3e | grad_norm %.4f | %.0f tok/s | %.1f ms | eta %s",
                (long long)state.step, (long long)total_steps, stats.loss, lr, stats.grad_norm,
                tokens_per_step / dt, dt * 1e3, format_eta(avg * (total_steps - state.step)).c_str());
    }
    const bool last = state.step == total_steps;
    if (cfg.param_check_period > 0 && comm.world() > 1 &&
        (state.step % cfg.param_check_period == 0 || last)) {
      if (const int n = ranks_differing_from_rank0(model.params_to_host(), comm); n > 0)
        die_internal("sftdp", "parameter check", std::to_string(n) + " rank(s) hold parameters that "
                     "differ from rank 0's after step " + std::to_string(state.step), __FILE__, __LINE__);
    }
    if (cfg.eval_interval > 0 && state.step % cfg.eval_interval == 0 && !last) run_eval(state.step);

    // Stop signal (Slurm's pre-timeout USR1, TERM): all ranks agree, then checkpoint and exit.
    double stop = stop_requested() ? 1.0 : 0.0;
    comm.allreduce_sum_host(&stop, 1);
    const bool periodic = cfg.checkpoint_period > 0 && state.step % cfg.checkpoint_period == 0;
    if (comm.rank() == 0 && (periodic || last || stop > 0)) save_checkpoint(cfg, paths, model, opt, state);
    if (stop > 0 && !last) {
      comm.barrier();
      log::info("stop signal received: checkpoint at step %lld written; resubmit to continue",
                (long long)state.step);
      return 0;
    }
  }
  run_eval(state.step);
  comm.barrier();  // rank 0's checkpoint is on disk before any rank reports success
  log::info("done: %lld steps; outputs in %s", (long long)state.step, paths.run_dir.c_str());
  return 0;
}

}  // namespace sftdp::train
