// sftdp/log.h — progress output. Only rank 0 prints progress (set_log_rank), to stdout;
// warnings go to stderr from any rank. printf-style so call sites stay one line.
#pragma once

namespace sftdp::log {
void set_rank(int rank);                       // ranks other than 0 print no info lines
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));   // rank 0, stdout
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));   // any rank, stderr
}  // namespace sftdp::log
