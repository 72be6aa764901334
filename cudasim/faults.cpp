// cudasim/faults.cpp — a fault inside a simulated kernel names the kernel. A SIGSEGV/SIGBUS in a
// guard page, the quarantine or any address while a kernel thread runs prints a memcheck report
// (kernel, launch site, block, thread, the address against the nearest allocation) and then lets the
// previous handler (ASan's, or the default: the process dies) handle the signal. Under ASan, whose own
// report comes first for byte-exact overflows, the death callback adds the same kernel line.
#include <signal.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "cudasim/block_runner.h"
#include "cudasim/memory.h"
#include "cudasim/runtime.h"
#include "cudasim/sanitizer.h"

namespace sftdp::sim {
namespace {

struct sigaction g_previous_segv, g_previous_bus;

void on_fault(int sig, siginfo_t* info, void* context) {
  const std::string thread = running_thread_description();
  const void* address = info ? info->si_addr : nullptr;
  if (!thread.empty() || memory().in_guard_or_quarantine(address)) {
    report("memcheck",
           (thread.empty() ? std::string("host code") : thread) + ": invalid access at " + memory().describe(address));
  }
  struct sigaction& previous = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) {
      previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);  // returning re-runs the access, which now kills the process
}

#ifdef SFTDP_SIM_ASAN
void on_asan_death() {
  const std::string thread = running_thread_description();
  if (!thread.empty()) report("memcheck", "the AddressSanitizer report above is from " + thread);
}
#endif

}  // namespace

void install_fault_handlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv);
  sigaction(SIGBUS, &action, &g_previous_bus);
#ifdef SFTDP_SIM_ASAN
  __sanitizer_set_death_callback(on_asan_death);
#endif
}

}  // namespace sftdp::sim
