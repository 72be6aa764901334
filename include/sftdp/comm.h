// sftdp/comm.h — ranks and collectives. MpiSession owns MPI_Init/Finalize (singleton start,
// mpirun and srun --mpi=pmix all work). A Communicator sums gradient buffers across ranks: the
// MPI one works on host buffers, the NCCL one (GPU builds) on device buffers. On one rank the
// allreduce is the identity, but the trainer calls it all the same (one code path).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sftdp::comm {

class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);  // MPI_Init_thread(FUNNELED) unless already initialised
  ~MpiSession();                        // MPI_Finalize
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int world() const { return world_; }
  int local_rank() const { return local_rank_; }  // from MPI_Comm_split_type(SHARED)
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }

 private:
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1;
  bool owns_ = false;
  std::string host_;
};

// Context parallelism (issue 37, SPEC §1): the ranks of one context group, which hold the same rows,
// each a share of every row's positions. Its collectives work on the parent communicator's memory
// (host for MPI, device for NCCL), block until the result is usable, and run under the collective
// deadline like the parent's; every member makes the same calls in the same order.
class Group {
 public:
  virtual ~Group() = default;
  virtual int size() const = 0;
  virtual int index() const = 0;  // this rank's place in the group
  // recv (size·bytes) = every member's send (bytes), member i's at recv + i·bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // recv (n floats) = the sum over the members of their send[index·n, (index + 1)·n), index being
  // this rank's; send holds size·n floats. Out of place. Bitwise the same run to run.
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t n) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // In-place sum across ranks of n floats in this communicator's memory (host for MPI,
  // device for NCCL). Blocks until the result is usable by the caller's next op.
  virtual void allreduce_sum(float* buf, size_t n) = 0;
  // allreduce_overlap (SPEC §1): start_allreduce_sum starts the same in-place sum of n floats
  // without waiting for it, as soon as they are final (NCCL: after the kernels queued so far);
  // every rank starts the same ranges in the same order. Each range is summed as allreduce_sum
  // would sum it alone, so results are bitwise the same run to run. Starting also lets the sums
  // already in flight progress (Open MPI has no progress thread). The ranges must not be touched
  // until wait_allreduces() returns; then every started sum is usable like allreduce_sum's. The
  // default, for communicators without non-blocking sums, sums at once.
  virtual void start_allreduce_sum(float* buf, size_t n) { allreduce_sum(buf, n); }
  virtual void wait_allreduces() {}
  // ZeRO-1 (optim::ZeroShard), both in place on world·block floats of this communicator's memory,
  // block r being [r·block, (r+1)·block); both block until the result is usable, like the above.
  // reduce_scatter_sum: afterwards this rank's block holds the sum across ranks of that block;
  // the other blocks hold unspecified values. all_gather: each rank's own block is copied to every
  // rank (the other blocks are overwritten). One rank: both are the identity.
  virtual void reduce_scatter_sum(float* buf, size_t block) = 0;
  virtual void all_gather(float* buf, size_t block) = 0;
  // ZeRO-2/3 (issue 25): non-blocking, OUT-OF-PLACE collectives on equal blocks, in this
  // communicator's memory, that overlap the kernels still running. Every rank starts the same
  // collectives in the same order. A start_* returns at once with a ticket (1, 2, 3, ... in start
  // order) and runs after everything the kernels have queued so far (NCCL: its stream waits for an
  // event recorded on the kernels' stream; MPI: the CPU kernels are synchronous, so at once).
  // send must not be written, nor recv read or written, until the collective is waited for.
  //   start_reduce_scatter_sum: send holds world·block floats; recv (block floats) receives the sum
  //     across ranks of send's block number rank(), i.e. send[rank·block, (rank+1)·block).
  //   start_all_gather: recv (world·block floats) receives every rank's send (block floats), rank r's
  //     at recv + r·block.
  // wait(ticket): that collective and every earlier one are complete for whatever the caller queues
  // next (NCCL: the kernels' stream waits for them, the host does not block; MPI: the host waits,
  // under the collective deadline). wait_all(): the host waits under the collective deadline until
  // every started collective is complete (NCCL: polled, with ncclCommAbort on expiry), so nothing is
  // left in flight; callers end every pass with it. One rank: recv = send (a copy, in order).
  using Ticket = uint64_t;
  virtual Ticket start_reduce_scatter_sum(const float* send, float* recv, size_t block) = 0;
  virtual Ticket start_all_gather(const float* send, float* recv, size_t block) = 0;
  // The all-gather of 16-bit values (bf16 bits: weight_dtype bfloat16's parameters, issue 25), IN
  // PLACE on world·block values: on entry buf[rank·block, (rank+1)·block) holds this rank's block,
  // afterwards buf holds every rank's (so the sender needs no buffer of its own); half the bytes of
  // the fp32 form. Otherwise as start_all_gather (tickets, waits, ordering). One rank: nothing moves.
  virtual Ticket start_all_gather_bf16(uint16_t* buf, size_t block) = 0;
  virtual void wait(Ticket ticket) = 0;
  virtual void wait_all() = 0;
  // Context parallelism: groups of n adjacent ranks (ranks g·n … g·n + n − 1 form group g); a
  // collective over every rank (MPI_Comm_split / ncclCommSplit). n must divide world().
  virtual std::unique_ptr<Group> context_group(int n) = 0;
  // Host-side helpers, always over MPI: sums of doubles, broadcast of bytes, barrier.
  virtual void allreduce_sum_host(double* buf, size_t n) = 0;
  virtual void broadcast_host(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job with this exit code (MPI_Abort).
  [[noreturn]] virtual void abort(int code) = 0;
};

std::unique_ptr<Communicator> make_mpi_communicator();
// GPU builds only (SFTDP_WITH_CUDA): NCCL over device buffers, the ncclUniqueId broadcast over
// MPI. The CUDA device must already be selected (cuda_select_device in kernels/ops.h).
std::unique_ptr<Communicator> make_nccl_communicator();

// Runs fn on every rank of MPI_COMM_WORLD. If it throws UserError on any rank (a file only one
// node cannot see, a node without a GPU), every rank throws the lowest such rank's message, so
// all ranks exit 2 together instead of some waiting forever in the next collective.
void agree_on_user_errors(const std::function<void()>& fn);

// True when `mine` is true on every rank (a logical AND over MPI_COMM_WORLD, under the deadline).
// `what` names it in a timeout message ("the GPU check").
bool every_rank(bool mine, const char* what);
// Every rank's `mine`, in rank order, on every rank (allgather of the sizes, then of the bytes).
std::vector<std::string> allgather_strings(const std::string& mine, const char* what);

// The collective deadline (config key collective_timeout_s, default 600 s; 0 = none). Every
// collective above (the Communicators' methods, agree_on_user_errors, every_rank) is a
// non-blocking call polled until done or this many seconds have passed; then the job ends
// (MPI_Abort, exit 1) and rank 0 (or rank 1, if rank 0 is the one stuck) names the ranks that
// never reached the collective, and their hosts. Same value on every rank.
void set_collective_timeout(double seconds);
double collective_timeout();
// Appended to a collective's name in that message: "of step 7", "during set-up"; "" for none.
void set_collective_context(const std::string& where);

// The number of ranks and this rank, readable before a Communicator exists (config checks).
int world_size();
int world_rank();

}  // namespace sftdp::comm
