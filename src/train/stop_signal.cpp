// src/train/stop_signal.cpp — async-signal-safe: the handler stores the signal number only.
#include "train/stop_signal.h"

#include <csignal>

namespace sftdp::train {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}
bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
}  // namespace sftdp::train
