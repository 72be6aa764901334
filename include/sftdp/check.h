// sftdp/check.h — the two kinds of failure and one checking macro per library.
// User errors (bad config, data, checkpoint, command line) throw sftdp::UserError: exit 2, one
// `error:` line. Internal errors (a library call fails, an invariant breaks) call die_internal:
// the message names library, call, file:line, rank and host, then MPI_Abort(MPI_COMM_WORLD, 1).
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace sftdp {

// A mistake of the user's: the message names the key, file or row and says what to do.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// Prints "[rank R@host] <lib> error: <call> failed at file:line: <msg>" to stderr and aborts
// every rank with exit status 1 (plain exit(1) when MPI is not initialised).
[[noreturn]] void die_internal(const char* lib, const char* call, std::string_view msg,
                               const char* file, int line);

// Short strings for the checking macros.
std::string mpi_error_string(int code);
std::string h5_error_string(long long code);  // the HDF5 error stack, as text

// "[rank R@host]" for messages; "[rank ?@host]" before MPI_Init.
std::string rank_tag();

}  // namespace sftdp

#define SFTDP_CHECK_LIB(lib, expr, ok, msg_of)                                               \
  do {                                                                                       \
    if (auto s_ = (expr); s_ != (ok))                                                        \
      ::sftdp::die_internal(lib, #expr, msg_of(s_), __FILE__, __LINE__);                     \
  } while (0)

#define CHECK_MPI(e) SFTDP_CHECK_LIB("MPI", e, MPI_SUCCESS, ::sftdp::mpi_error_string)
// HDF5 returns a negative value on failure (herr_t or hid_t); anything >= 0 is fine.
#define CHECK_H5(e)                                                                          \
  ([&]() {                                                                                   \
    auto s_ = (e);                                                                           \
    if (s_ < 0) ::sftdp::die_internal("HDF5", #e, ::sftdp::h5_error_string(s_), __FILE__, __LINE__); \
    return s_;                                                                               \
  }())
// An invariant of our own code.
#define SFTDP_ASSERT(cond, msg)                                                              \
  do {                                                                                       \
    if (!(cond)) ::sftdp::die_internal("sftdp", #cond, (msg), __FILE__, __LINE__);          \
  } while (0)

#if defined(__CUDACC__) || defined(SFTDP_CHECK_CUDA_API)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#define CHECK_CUDA(e) SFTDP_CHECK_LIB("CUDA", e, cudaSuccess, cudaGetErrorString)
#define CHECK_CUBLAS(e) SFTDP_CHECK_LIB("cuBLAS", e, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define CHECK_NCCL(e) SFTDP_CHECK_LIB("NCCL", e, ncclSuccess, ncclGetErrorString)
#endif
