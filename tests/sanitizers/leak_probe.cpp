// tests/sanitizers/leak_probe.cpp — what the sanitized suite's leak setting must still catch: one
// allocation of our own code, never freed, in a process that starts and ends MPI as sft_train does
// (Open MPI's own leaks at MPI_Finalize are suppressed, tests/sanitizers/lsan.supp). Run by
// tests/sanitizers/check_leak_probe.sh, which expects exactly this one leak, named.
#include <mpi.h>

#include <cstdlib>
#include <cstring>

// Not inlined: the report's first frame above malloc is this function, as for any leak of ours.
__attribute__((noinline)) char* planted_leak_in_our_code(size_t bytes) {
  auto* p = static_cast<char*>(std::malloc(bytes));
  std::memset(p, 1, bytes);
  return p;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  char* volatile lost = planted_leak_in_our_code(4242);
  lost = nullptr;  // the only pointer to it, gone: unreachable at exit
  (void)lost;
  MPI_Finalize();
  return 0;
}
