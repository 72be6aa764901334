// src/comm/mpi_host.cpp — see mpi_host.h.
#include "comm/mpi_host.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "sftdp/check_mpi.h"

namespace sftdp::comm {

MpiHostCommunicator::MpiHostCommunicator() {
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_));
}

void MpiHostCommunicator::allreduce_sum_host(double* buf, size_t n) {
  if (world_ == 1) return;
  for (size_t off = 0; off < n; off += INT_MAX) {
    const int count = static_cast<int>(std::min<size_t>(INT_MAX, n - off));
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf + off, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  }
}

void MpiHostCommunicator::broadcast_host(void* buf, size_t bytes, int root) {
  if (world_ == 1) return;
  auto* p = static_cast<char*>(buf);
  for (size_t off = 0; off < bytes; off += INT_MAX) {
    const int count = static_cast<int>(std::min<size_t>(INT_MAX, bytes - off));
    CHECK_MPI(MPI_Bcast(p + off, count, MPI_BYTE, root, MPI_COMM_WORLD));
  }
}

void MpiHostCommunicator::barrier() { CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); }

void MpiHostCommunicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace sftdp::comm
