// src/comm/mpi_communicator.cpp — the CPU communicator: in-place MPI_Iallreduce (sum) of host
// float buffers, waited for under the collective deadline (comm/collective.h). MPI takes an int
// count, so buffers above INT_MAX floats go in chunks. ZeRO-1's reduce-scatter and all-gather
// (MPI_Ireduce_scatter_block, MPI_Iallgather) take one block per rank, at most INT_MAX floats.
// allreduce_overlap: the same MPI_Iallreduce per bucket, started during backward, waited at the end.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "comm/collective.h"
#include "comm/mpi_host.h"
#include "sftdp/check.h"
#include "sftdp/check_mpi.h"

namespace sftdp::comm {
namespace {

class MpiCommunicator final : public MpiHostCommunicator {
 public:
  const char* name() const override { return "mpi"; }
  void allreduce_sum(float* buf, size_t n) override {
    if (world_ == 1) return;  // the identity, but callers still go through here
    for (size_t off = 0; off < n; off += INT_MAX) {
      const int cnt = static_cast<int>(std::min<size_t>(INT_MAX, n - off));
      detail::Collective c("the gradient allreduce");
      CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                               c.request()));
      c.wait();
    }
  }
  // Overlap: one MPI_Iallreduce per range (per INT_MAX chunk), each polled by MPI_Testall on
  // every later start (Open MPI's non-blocking collectives advance only inside MPI calls) and
  // waited for together under one deadline, announced when this rank starts waiting.
  void start_allreduce_sum(float* buf, size_t n) override {
    if (world_ == 1) return;
    for (size_t off = 0; off < n; off += INT_MAX) {
      const int cnt = static_cast<int>(std::min<size_t>(INT_MAX, n - off));
      pending_.push_back(MPI_REQUEST_NULL);
      CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                               &pending_.back()));
    }
    int flag = 0;
    CHECK_MPI(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &flag, MPI_STATUSES_IGNORE));
  }
  void wait_allreduces() override {
    if (pending_.empty()) return;
    detail::Collective c("the gradient allreduce");
    c.wait_until([this] {
      int flag = 0;
      CHECK_MPI(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &flag, MPI_STATUSES_IGNORE));
      return flag != 0;
    });
    pending_.clear();
  }
  void reduce_scatter_sum(float* buf, size_t block) override {
    if (world_ == 1 || block == 0) return;
    SFTDP_ASSERT(block <= INT_MAX, "zero_stage 1: a shard above INT_MAX floats (MPI's count limit)");
    detail::Collective c("the gradient reduce-scatter");
    // In place, MPI puts this rank's summed block at the start of buf; move it to its own place.
    CHECK_MPI(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, static_cast<int>(block), MPI_FLOAT,
                                        MPI_SUM, MPI_COMM_WORLD, c.request()));
    c.wait();
    if (rank_ != 0) std::memmove(buf + rank_ * block, buf, block * sizeof(float));
  }
  void all_gather(float* buf, size_t block) override {
    if (world_ == 1 || block == 0) return;
    SFTDP_ASSERT(block <= INT_MAX, "zero_stage 1: a shard above INT_MAX floats (MPI's count limit)");
    detail::Collective c("the parameter all-gather");
    CHECK_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, static_cast<int>(block),
                             MPI_FLOAT, MPI_COMM_WORLD, c.request()));
    c.wait();
  }

 private:
  std::vector<MPI_Request> pending_;  // started overlap sums (MPI_REQUEST_NULL once complete)
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace sftdp::comm
