// sftdp/check.h — the two kinds of failure and the generic checking macro. No library headers:
// kernels include this alone. Per-library macros live beside it, one header each:
// check_mpi.h (CHECK_MPI), check_h5.h (CHECK_H5), check_cuda.h (CHECK_CUDA, CHECK_CUBLAS),
// check_nccl.h (CHECK_NCCL). User errors (bad config, data, checkpoint, command line) throw
// sftdp::UserError: exit 2, one `error:` line. Internal errors (a library call fails, an invariant
// breaks) call die_internal: the message names library, call, file:line, rank and host, then the
// whole job ends with exit status 1.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sftdp {

// A mistake of the user's: the message names the key, file or row and says what to do. Several at
// once (a config with more than one bad key) are one UserError: what() joins them with "\nerror: ",
// so the one `fprintf(stderr, "error: %s\n", e.what())` of every main prints an `error:` line each.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg), messages_{msg} {}
  explicit UserError(const std::vector<std::string>& msgs) : std::runtime_error(joined(msgs)), messages_(msgs) {}
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  static std::string joined(const std::vector<std::string>& msgs) {
    std::string out;
    for (const auto& m : msgs) out += (out.empty() ? "" : "\nerror: ") + m;
    return out;
  }
  std::vector<std::string> messages_;
};

// Prints "[rank R@host] <lib> error: <call> failed at file:line: <msg>" to stderr and ends every
// rank with exit status 1 through the job-abort hook (MPI_Abort once comm::MpiSession is up),
// else plain _Exit(1).
[[noreturn]] void die_internal(const char* lib, const char* call, std::string_view msg,
                               const char* file, int line);

// How die_internal ends the whole job, and this process's rank for messages. Installed by
// comm::MpiSession after MPI_Init, cleared (nullptr) before MPI_Finalize.
using JobAbort = void (*)(int exit_code);
void set_job_abort(JobAbort abort_job, int rank);

// "[rank R@host]" for messages; "[rank ?@host]" before the rank is known.
std::string rank_tag();

}  // namespace sftdp

#define SFTDP_CHECK_LIB(lib, expr, ok, msg_of)                                               \
  do {                                                                                       \
    if (auto s_ = (expr); s_ != (ok))                                                        \
      ::sftdp::die_internal(lib, #expr, msg_of(s_), __FILE__, __LINE__);                     \
  } while (0)

// An invariant of our own code.
#define SFTDP_ASSERT(cond, msg)                                                              \
  do {                                                                                       \
    if (!(cond)) ::sftdp::die_internal("sftdp", #cond, (msg), __FILE__, __LINE__);          \
  } while (0)
