// src/comm/mpi_communicator.cpp — the CPU communicator: in-place MPI_Iallreduce (sum) of host
// float buffers, waited for under the collective deadline (comm/collective.h). MPI takes an int
// count, so buffers above INT_MAX floats go in chunks. ZeRO-1's reduce-scatter and all-gather
// (MPI_Ireduce_scatter_block, MPI_Iallgather) take one block per rank, at most INT_MAX floats.
// allreduce_overlap: the same MPI_Iallreduce per bucket, started during backward, waited at the end.
// ZeRO-2/3: out-of-place MPI_Ireduce_scatter_block / MPI_Iallgather, one request per ticket in a
// FIFO, waited for up to a ticket (wait) or all (wait_all) under the deadline; one rank: memcpy.
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
  // ZeRO-2/3: one request per ticket, kept in start order; each start also polls the ones still
  // pending (MPI_Testall), as start_allreduce_sum does. A request MPI has finished stays in the
  // FIFO (as MPI_REQUEST_NULL) until a wait covers its ticket: whether a wait makes a Collective
  // then depends on the tickets alone, not on MPI's progress, so every rank counts the same
  // collectives (the arrival counts of comm/collective.h). A block is one MPI count (at most
  // INT_MAX floats): chunks of a block would not be contiguous blocks per rank any more.
  Ticket start_reduce_scatter_sum(const float* send, float* recv, size_t block) override {
    assert_out_of_place("start_reduce_scatter_sum", send, world_ * block, recv, block);
    return start_shard(kShardReduceScatter, send, recv, block, [&](MPI_Request* request) {
      CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(block), MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD, request));
    });
  }
  Ticket start_all_gather(const float* send, float* recv, size_t block) override {
    assert_out_of_place("start_all_gather", send, block, recv, world_ * block);
    return start_shard(kShardAllGather, send, recv, block, [&](MPI_Request* request) {
      CHECK_MPI(MPI_Iallgather(send, static_cast<int>(block), MPI_FLOAT, recv, static_cast<int>(block),
                               MPI_FLOAT, MPI_COMM_WORLD, request));
    });
  }
  Ticket start_all_gather_bf16(uint16_t* buf, size_t block) override {
    uint16_t* mine = buf + static_cast<size_t>(rank_) * block;
    return start_shard(kShardAllGather, mine, mine, block, [&](MPI_Request* request) {
      CHECK_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, static_cast<int>(block), MPI_UINT16_T,
                               MPI_COMM_WORLD, request));
    });
  }
  // Completes the FIFO's prefix up to `ticket` under one deadline; tickets already waited for
  // (or never given a request: one rank, empty blocks) need nothing.
  void wait(Ticket ticket) override {
    SFTDP_ASSERT(ticket <= last_ticket_, "wait: a ticket that no start_* has returned yet");
    size_t n = 0;
    unsigned kinds = 0;
    for (; n < shard_started_.size() && shard_started_[n].ticket <= ticket; ++n)
      kinds |= shard_started_[n].kind;
    if (n == 0) return;
    detail::Collective c(shard_wait_name(kinds));
    c.wait_until([&] {
      int flag = 0;
      CHECK_MPI(MPI_Testall(static_cast<int>(n), shard_requests_.data(), &flag, MPI_STATUSES_IGNORE));
      return flag != 0;
    });
    shard_started_.erase(shard_started_.begin(), shard_started_.begin() + static_cast<ptrdiff_t>(n));
    shard_requests_.erase(shard_requests_.begin(), shard_requests_.begin() + static_cast<ptrdiff_t>(n));
  }
  void wait_all() override { wait(last_ticket_); }

 private:
  // Gives the next ticket to one out-of-place collective: on one rank a copy, done at once (the
  // sum over one rank, or the gather of one block, is send itself); else `post` starts it on a
  // new request at the back of the FIFO.
  template <class T, class Post>
  Ticket start_shard(ShardKind kind, const T* send, T* recv, size_t block, const Post& post) {
    const Ticket ticket = ++last_ticket_;
    if (block == 0) return ticket;
    if (world_ == 1) {
      if (recv != send) std::memcpy(recv, send, block * sizeof(T));  // in place (bf16): nothing to move
      return ticket;
    }
    SFTDP_ASSERT(block <= INT_MAX, "zero_stage 2/3: a shard above INT_MAX floats (MPI's count limit)");
    shard_started_.push_back({ticket, kind});
    shard_requests_.push_back(MPI_REQUEST_NULL);
    post(&shard_requests_.back());
    int flag = 0;
    CHECK_MPI(MPI_Testall(static_cast<int>(shard_requests_.size()), shard_requests_.data(), &flag,
                          MPI_STATUSES_IGNORE));
    return ticket;
  }

  std::vector<MPI_Request> pending_;  // started overlap sums (MPI_REQUEST_NULL once complete)
  // ZeRO-2/3: the started collectives no wait has covered yet, oldest first; shard_requests_[i]
  // (MPI_REQUEST_NULL once complete) belongs to shard_started_[i]. Parallel vectors, since
  // MPI_Testall takes the requests as one array.
  struct Started {
    Ticket ticket;
    ShardKind kind;
  };
  std::vector<Started> shard_started_;
  std::vector<MPI_Request> shard_requests_;
  Ticket last_ticket_ = 0;  // the newest ticket given out (tickets start at 1)
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace sftdp::comm
