// src/common/check.cpp — die_internal and the library error strings behind check.h's macros.
#include "sftdp/check.h"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace sftdp {

std::string rank_tag() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  int init = 0, fin = 0, rank = -1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return "[rank " + (rank >= 0 ? std::to_string(rank) : std::string("?")) + "@" + host + "]";
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

static herr_t collect_h5_error(unsigned n, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (n > 0) *s += "; ";
  *s += (e->func_name ? e->func_name : "?");
  *s += ": ";
  *s += (e->desc ? e->desc : "?");
  return 0;
}

std::string h5_error_string(long long code) {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_h5_error, &s);
  if (s.empty()) s = "HDF5 returned " + std::to_string(code);
  return s;
}

void die_internal(const char* lib, const char* call, std::string_view msg, const char* file,
                  int line) {
  std::fprintf(stderr, "%s %s error: %s failed at %s:%d: %.*s\n", rank_tag().c_str(), lib, call,
               file, line, static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace sftdp
