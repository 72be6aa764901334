// src/common/check.cpp — die_internal and rank_tag (sftdp/check.h). Knows no library: the job-wide
// abort (MPI_Abort) is a hook that comm::MpiSession installs.
#include "sftdp/check.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace sftdp {
namespace {
std::atomic<JobAbort> g_job_abort{nullptr};
std::atomic<int> g_rank{-1};
}  // namespace

void set_job_abort(JobAbort abort_job, int rank) {
  g_job_abort = abort_job;
  g_rank = rank;
}

std::string rank_tag() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const int rank = g_rank;
  return "[rank " + (rank >= 0 ? std::to_string(rank) : std::string("?")) + "@" + host + "]";
}

void die_internal(const char* lib, const char* call, std::string_view msg, const char* file,
                  int line) {
  std::fprintf(stderr, "%s %s error: %s failed at %s:%d: %.*s\n", rank_tag().c_str(), lib, call,
               file, line, static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  if (const JobAbort abort_job = g_job_abort) abort_job(1);
  std::_Exit(1);
}

}  // namespace sftdp
