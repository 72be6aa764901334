// src/comm/agree.cpp — agree_on_user_errors (include/sftdp/comm.h): one MPI_Allreduce (MIN) of
// the lowest failing rank, then that rank broadcasts its message.
#include <mpi.h>

#include <cstdint>
#include <string>

#include "sftdp/check_mpi.h"
#include "sftdp/comm.h"

namespace sftdp::comm {

void agree_on_user_errors(const std::function<void()>& fn) {
  int rank = 0, world = 1;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::string error;
  bool failed = false;
  try {
    fn();
  } catch (const UserError& e) {
    error = e.what();
    failed = true;
  }
  if (world == 1) {
    if (failed) throw UserError(error);
    return;
  }
  int first = failed ? rank : world;
  CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == world) return;
  uint64_t len = error.size();
  CHECK_MPI(MPI_Bcast(&len, 1, MPI_UINT64_T, first, MPI_COMM_WORLD));
  error.resize(len);
  CHECK_MPI(MPI_Bcast(error.data(), static_cast<int>(len), MPI_CHAR, first, MPI_COMM_WORLD));
  throw UserError(first == 0 ? error : error + " (seen by rank " + std::to_string(first) + ")");
}

}  // namespace sftdp::comm
