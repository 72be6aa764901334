// sft_train CONFIG.yml [key=value ...] — train (SPEC §2); sft_train --plan ... — the memory plan
// (train/plan.h). Exit 0 success, 2 bad usage/config/data (one `error:` line), 1 anything else.
// Launch plainly, with mpirun -np N, or srun.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/train.h"
#include "train/plan.h"
#include "train/stop_signal.h"

static void usage(FILE* f) {
  std::fprintf(f,
               "usage: sft_train CONFIG.yml [key=value ...]\n"
               "       sft_train --plan [--ranks N] [--ranks-per-node N] [--memory-gib X] [--context-parallelism N]\n"
               "                        CONFIG.yml [key=value ...]\n"
               "  Fine-tunes models of the GPT-2 and Llama families (GPT-2, SmolLM2, Qwen2.5, Qwen3,\n"
               "  Llama 3.x), full or LoRA, data-parallel over MPI ranks.\n"
               "  Later key=value pairs override the file (e.g. steps=100 learning_rate=1e-4).\n"
               "  Launch as: sft_train ..., mpirun -np N sft_train ..., or srun sft_train ...\n"
               "  --plan: print what each rank of the run would hold and whether it fits, for N ranks\n"
               "  (default 1), N per node (default all), X GiB per GPU or, for CPU ranks, per node\n"
               "  (default: this machine's); allocates nothing, needs neither MPI nor the hardware.\n"
               "  --context-parallelism N: the plan at context_parallelism N (the key, given last).\n"
               "  Keys: see configs/reference.yml; a full and a LoRA recipe per family in configs/recipes/.\n"
               "  Exit: 0 ok (--plan: fits), 2 bad input (--plan: does not fit), 1 other failure.\n"
               "  Under mpirun, mpirun -q keeps Open MPI's exit banner from following an error line.\n");
}

// A whole number >= minimum, or a positive number, for a --plan flag; else one error line.
static long plan_int(const char* flag, const char* text, long minimum) {
  char* end = nullptr;
  errno = 0;
  const long v = text ? std::strtol(text, &end, 10) : 0;
  if (!text || !*text || *end || errno || v < minimum || v > 1 << 30)
    throw sftdp::UserError(std::string(flag) + ": expected a whole number >= " + std::to_string(minimum) + ", got '" +
                           (text ? text : "") + "'");
  return v;
}
static double plan_gib(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = text ? std::strtod(text, &end) : 0;
  if (!text || !*text || *end || errno || !(v > 0) || v > 1e9)
    throw sftdp::UserError(std::string(flag) + ": expected a number of GiB > 0, got '" + (text ? text : "") + "'");
  return v;
}

// sft_train --plan ...: no MPI, no device, nothing allocated or written (train/plan.h).
static int plan_main(int argc, char** argv) {
  try {
    sftdp::train::PlanTarget target;
    std::string context;  // --context-parallelism N as an override
    int i = 2;
    for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; ++i) {
      const char* flag = argv[i];
      const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
      if (!std::strcmp(flag, "--ranks")) target.ranks = static_cast<int>(plan_int(flag, value, 1));
      else if (!std::strcmp(flag, "--ranks-per-node")) target.ranks_per_node = static_cast<int>(plan_int(flag, value, 1));
      else if (!std::strcmp(flag, "--memory-gib")) target.memory_gib = plan_gib(flag, value);
      else if (!std::strcmp(flag, "--context-parallelism"))
        context = "context_parallelism=" + std::to_string(plan_int(flag, value, 1));
      else
        throw sftdp::UserError(std::string(flag) + ": unknown flag (--plan takes --ranks, --ranks-per-node, "
                               "--memory-gib, --context-parallelism)");
      ++i;
    }
    // The config and its overrides, as for a run: argv[i - 1] stands in for the program name;
    // --context-parallelism N is the last override (context_parallelism=N).
    std::vector<char*> args(argv + (i - 1), argv + argc);
    if (!context.empty()) args.push_back(context.data());
    const auto cfg = sftdp::config::from_args(static_cast<int>(args.size()), args.data());
    std::fflush(stdout);
    const int rc = sftdp::train::print_plan(cfg, target, stdout);
    std::fflush(stdout);
    return rc;
  } catch (const sftdp::UserError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    sftdp::die_internal("sft_train", "--plan", e.what(), __FILE__, __LINE__);
  }
}

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (argc >= 2 && !std::strcmp(argv[1], "--plan")) return plan_main(argc, argv);
  sftdp::comm::MpiSession mpi(argc, argv);
  // Ctrl-C (INT), Slurm's pre-timeout USR1 or a TERM that arrives while data and model load is
  // honoured at the first step boundary instead of killing the process.
  sftdp::train::install_stop_handlers();
  // A write to a closed pipe or socket fails with EPIPE instead of killing the rank. When all ranks
  // end with exit 2 together, srun --kill-on-bad-exit ends the step on the first exit; a rank
  // still tearing down (Open MPI's TCP links to the ranks already gone, its output) died of
  // SIGPIPE there once, and the job's status read 141 instead of 2.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    const auto cfg = sftdp::config::from_args(argc, argv);
    return sftdp::train::run(cfg, mpi);
  } catch (const sftdp::UserError& e) {
    // Every rank saw the same bad input (config, data file header, or one rank's finding that
    // all ranks agreed on): each exits 2 cleanly and rank 0 says why, in one line (SPEC §2).
    if (mpi.rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // Not the user's input: a bug or an environment failure. Take the whole job down.
    sftdp::die_internal("sft_train", "run", e.what(), __FILE__, __LINE__);
  }
}
