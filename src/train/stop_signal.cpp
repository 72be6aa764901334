// src/train/stop_signal.cpp — async-signal-safe: the handler stores the first signal's number,
// writes one fixed line on a first SIGINT (someone at a terminal is waiting for an answer), and
// on a SIGINT while a stop is pending restores SIGINT's default action and raises it again, so
// the process ends as killed by SIGINT (what a shell loop or a wrapper expects of Ctrl-C).
#include "train/stop_signal.h"

#include <unistd.h>

#include <csignal>

namespace sftdp::train {
namespace {
volatile std::sig_atomic_t g_signal = 0;

constexpr char kInterruptNotice[] =
    "sft_train: interrupt: stopping at the next step boundary to write a checkpoint "
    "(Ctrl-C again stops at once, without one)\n";

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    if (sig != SIGINT) return;  // a repeated TERM or USR1 (Slurm sends both) changes nothing
    // SIGINT is blocked while this handler runs; the raised one is delivered on return.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_signal = sig;
  if (sig == SIGINT) {
    const ssize_t ignored = write(STDERR_FILENO, kInterruptNotice, sizeof kInterruptNotice - 1);
    (void)ignored;
  }
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};
  sigemptyset(&sa.sa_mask);  // one handler at a time: the first signal's number is kept whole
  for (const int sig : kStopSignals) sigaddset(&sa.sa_mask, sig);
  for (const int sig : kStopSignals) sigaction(sig, &sa, nullptr);
}
bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
}  // namespace sftdp::train
