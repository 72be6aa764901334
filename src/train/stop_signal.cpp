// src/train/stop_signal.cpp — async-signal-safe: the handler stores the first signal's number and
// counts SIGINTs; it writes one line (write(2), digits formatted by hand) on every SIGINT, since
// someone at a terminal is waiting for an answer: the first says a checkpoint comes at the next step
// boundary, the second that it still does, the third that it does not, before SIGINT's default
// action is restored and the signal raised again, so the process ends as killed by SIGINT (what a
// shell loop or a wrapper expects of Ctrl-C).
#include "train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace sftdp::train {
namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_interrupts = 0;  // SIGINTs so far
std::atomic<int64_t> g_last_checkpoint{-1};
static_assert(std::atomic<int64_t>::is_always_lock_free, "read in a signal handler");

constexpr char kFirst[] =
    "sft_train: interrupt: stopping at the next step boundary to write a checkpoint "
    "(Ctrl-C twice more stops at once, without one)\n";
constexpr char kSecondHead[] =
    "sft_train: interrupt again: the checkpoint is still written at the next step boundary (";
constexpr char kSecondTail[] = "); a third Ctrl-C stops at once, without it\n";
constexpr char kThirdHead[] = "sft_train: third interrupt: stopping now, without a checkpoint; ";
constexpr char kThirdTail[] = "\n";

// Appends text to buf at *n (bounded by cap).
void put(char* buf, size_t* n, size_t cap, const char* text) {
  for (; *text && *n < cap; ++text) buf[(*n)++] = *text;
}

// "the last checkpoint is step 40" / "no checkpoint written yet: a resubmission starts over".
void put_last_checkpoint(char* buf, size_t* n, size_t cap, bool third) {
  const int64_t step = g_last_checkpoint.load(std::memory_order_relaxed);
  if (step < 0) {
    put(buf, n, cap, third ? "no checkpoint written yet: a resubmission starts over" : "no checkpoint yet");
    return;
  }
  put(buf, n, cap, third ? "a resubmission continues from the last checkpoint, step " : "last checkpoint: step ");
  char digits[24];
  int k = 0;
  int64_t v = step;
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (k > 0 && *n < cap) buf[(*n)++] = digits[--k];
}

void say(const char* buf, size_t n) {
  const ssize_t ignored = write(STDERR_FILENO, buf, n);
  (void)ignored;
}

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT) g_interrupts = g_interrupts + 1;
  if (g_signal == 0) g_signal = sig;
  if (sig != SIGINT) return;  // a repeated TERM or USR1 (Slurm sends both) changes nothing
  char line[256];
  size_t n = 0;
  if (g_interrupts == 1) {
    say(kFirst, sizeof kFirst - 1);
  } else if (g_interrupts == 2) {
    put(line, &n, sizeof line, kSecondHead);
    put_last_checkpoint(line, &n, sizeof line, false);
    put(line, &n, sizeof line, kSecondTail);
    say(line, n);
  } else {
    put(line, &n, sizeof line, kThirdHead);
    put_last_checkpoint(line, &n, sizeof line, true);
    put(line, &n, sizeof line, kThirdTail);
    say(line, n);
    // SIGINT is blocked while this handler runs; the raised one is delivered on return.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
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
void set_last_checkpoint_step(int64_t step) { g_last_checkpoint.store(step, std::memory_order_relaxed); }
}  // namespace sftdp::train
