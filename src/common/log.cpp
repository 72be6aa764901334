// src/common/log.cpp — rank-0 progress lines and any-rank warnings.
#include "sftdp/log.h"

#include <cstdarg>
#include <cstdio>

namespace sftdp::log {
namespace {
int g_rank = 0;
}

void set_rank(int rank) { g_rank = rank; }

void info(const char* fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void warn(const char* fmt, ...) {
  std::fprintf(stderr, "warning: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}
}  // namespace sftdp::log
