// src/comm/mpi_host.cpp — see mpi_host.h.
#include "comm/mpi_host.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "comm/collective.h"
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
    detail::Collective c("a host allreduce");
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf + off, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                             c.request()));
    c.wait();
  }
}

void MpiHostCommunicator::broadcast_host(void* buf, size_t bytes, int root) {
  if (world_ == 1) return;
  auto* p = static_cast<char*>(buf);
  for (size_t off = 0; off < bytes; off += INT_MAX) {
    const int count = static_cast<int>(std::min<size_t>(INT_MAX, bytes - off));
    detail::Collective c(root == 0 ? "a broadcast from rank 0" : "a broadcast");
    CHECK_MPI(MPI_Ibcast(p + off, count, MPI_BYTE, root, MPI_COMM_WORLD, c.request()));
    c.wait();
  }
}

void MpiHostCommunicator::barrier() {
  detail::Collective c("the barrier");
  CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, c.request()));
  c.wait();
}

void MpiHostCommunicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace sftdp::comm
