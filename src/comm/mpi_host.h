// src/comm/mpi_host.h — what every Communicator does over MPI on host memory: rank and world
// size, sums of doubles, broadcast of bytes, barrier and abort. The MPI and NCCL communicators
// derive from it and add only their gradient allreduce. Counts above INT_MAX go in chunks. Every
// collective is non-blocking, waited for under the deadline (comm/collective.h).
#pragma once
#include "sftdp/comm.h"

namespace sftdp::comm {

class MpiHostCommunicator : public Communicator {
 public:
  MpiHostCommunicator();
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void allreduce_sum_host(double* buf, size_t n) override;
  void broadcast_host(void* buf, size_t bytes, int root) override;
  void barrier() override;
  // MPI_Abort ends every rank, also those waiting inside a collective.
  [[noreturn]] void abort(int code) override;

 protected:
  int rank_ = 0, world_ = 1;
};

}  // namespace sftdp::comm
