// src/comm/mpi_group.cpp — context parallelism's group over MPI (sftdp/comm.h's Group) on host
// memory: an MPI_Comm_split of MPI_COMM_WORLD into groups of n adjacent ranks, and its two
// collectives, MPI_Iallgather (bytes) and MPI_Ireduce_scatter_block (fp32 sum), each waited for under
// the collective deadline (comm/collective.h: every rank makes the same group calls in the same
// order, so the arrival counts stay those of one sequence). Open MPI picks the reduction's algorithm
// from the group size and count alone, so its sums are bitwise the same run to run.
#include <mpi.h>

#include <climits>
#include <cstring>

#include "comm/collective.h"
#include "comm/mpi_host.h"
#include "sftdp/check.h"
#include "sftdp/check_mpi.h"

namespace sftdp::comm {
namespace {

class MpiGroup final : public Group {
 public:
  MpiGroup(int n, int world_rank) : size_(n), index_(world_rank % n) {
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, world_rank / n, world_rank, &comm_));
  }
  ~MpiGroup() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int size() const override { return size_; }
  int index() const override { return index_; }
  void all_gather(const void* send, void* recv, size_t bytes) override {
    assert_out_of_place("Group::all_gather", static_cast<const char*>(send), bytes, static_cast<const char*>(recv),
                        bytes * size_);
    if (size_ == 1) return (void)std::memcpy(recv, send, bytes);
    SFTDP_ASSERT(bytes <= INT_MAX, "context_parallelism: an all-gather block above INT_MAX bytes (MPI's count limit)");
    detail::Collective c("the context group's key/value all-gather");
    CHECK_MPI(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_,
                             c.request()));
    c.wait();
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    assert_out_of_place("Group::reduce_scatter_sum", send, n * size_, recv, n);
    if (size_ == 1) return (void)std::memcpy(recv, send, n * sizeof(float));
    SFTDP_ASSERT(n <= INT_MAX, "context_parallelism: a reduce-scatter block above INT_MAX floats (MPI's count limit)");
    detail::Collective c("the context group's key/value gradient reduce-scatter");
    CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, c.request()));
    c.wait();
  }

 private:
  int size_, index_;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<Group> MpiHostCommunicator::context_group(int n) {
  SFTDP_ASSERT(n >= 1 && world_ % n == 0, "context_group: n must divide the world size");
  return std::make_unique<MpiGroup>(n, rank_);
}

}  // namespace sftdp::comm
