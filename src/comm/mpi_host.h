// src/comm/mpi_host.h — what every Communicator does over MPI on host memory: rank and world
// size, sums of doubles, broadcast of bytes, barrier and abort. The MPI and NCCL communicators
// derive from it and add only their gradient allreduce. Counts above INT_MAX go in chunks. Every
// collective is non-blocking, waited for under the deadline (comm/collective.h). Also two helpers
// both communicators' ZeRO-2/3 collectives share: the out-of-place check and the name of a wait.
#pragma once
#include <cstdint>

#include "sftdp/check.h"
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
  // Over MPI on host memory (comm/mpi_group.cpp); the NCCL communicator overrides it.
  std::unique_ptr<Group> context_group(int n) override;
  // MPI_Abort ends every rank, also those waiting inside a collective.
  [[noreturn]] void abort(int code) override;

 protected:
  int rank_ = 0, world_ = 1;
};

// ZeRO-2/3's collectives are out of place (sftdp/comm.h): send's send_n values of type T and recv's
// recv_n must not overlap (MPI forbids aliased buffers; NCCL's in-place forms are not part of the
// contract). Checked on every rank count, so that a caller's mistake also fails on one rank.
template <class T>
inline void assert_out_of_place(const char* what, const T* send, size_t send_n, const T* recv, size_t recv_n) {
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  const bool overlap = send_n != 0 && recv_n != 0 && s < r + recv_n * sizeof(T) && r < s + send_n * sizeof(T);
  SFTDP_ASSERT(!overlap, std::string(what) + ": send and recv overlap; these collectives are out of place");
}

// What a wait for started ZeRO-2/3 collectives is called in a timeout message (collective.h), from
// the kinds it covers (a bit set): the same on every rank, since every rank starts the same ones.
enum ShardKind : unsigned { kShardReduceScatter = 1, kShardAllGather = 2 };
inline const char* shard_wait_name(unsigned kinds) {
  if (kinds == kShardReduceScatter) return "the gradient reduce-scatter";
  if (kinds == kShardAllGather) return "the parameter all-gather";
  return "the gradient reduce-scatter / parameter all-gather";
}

}  // namespace sftdp::comm
