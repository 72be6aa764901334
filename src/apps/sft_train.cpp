// sft_train CONFIG.yml [key=value ...] — train (SPEC §2). Exit 0 success, 2 bad usage/config/
// data (one `error:` line), 1 anything else. Launch plainly, with mpirun -np N, or srun.
#include <csignal>
#include <cstdio>
#include <cstring>

#include "sftdp/check.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/train.h"
#include "train/stop_signal.h"

static void usage(FILE* f) {
  std::fprintf(f,
               "usage: sft_train CONFIG.yml [key=value ...]\n"
               "  Fine-tunes a GPT-2-family model data-parallel over MPI ranks.\n"
               "  Later key=value pairs override the file (e.g. steps=100 learning_rate=1e-4).\n"
               "  Launch as: sft_train ..., mpirun -np N sft_train ..., or srun sft_train ...\n"
               "  Keys: see configs/reference.yml. Exit: 0 ok, 2 bad input, 1 other failure.\n");
}

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  sftdp::comm::MpiSession mpi(argc, argv);
  // Slurm's pre-timeout USR1 or a TERM that arrives while data and model load is honoured at the
  // first step boundary instead of killing the process.
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
