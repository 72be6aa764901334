// src/comm/collective.h — internal to src/comm: every collective the trainer makes goes through
// Collective, which gives it a deadline (set_collective_timeout in sftdp/comm.h) without a second
// thread (MPI is FUNNELED): the caller posts a non-blocking MPI_I* call (or an NCCL kernel) and
// wait() polls it. On entry each rank also posts one 8-byte message, its collective count, to
// the two watchers (ranks 0 and 1), so the watcher that times out can name the ranks that never
// arrived, and their hosts. On expiry the job ends (MPI_Abort, exit 1).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sftdp::comm::detail {

// The arrival side channel: a duplicate of MPI_COMM_WORLD and every rank's host name. Both calls
// are collective over MPI_COMM_WORLD; MpiSession opens it after MPI_Init and closes it before
// MPI_Finalize. Without it collectives still have a deadline, but the message cannot name ranks.
void open_arrival_channel();
void close_arrival_channel();
// Every rank's host (MPI_Get_processor_name), by rank, as the channel gathered them; empty while
// the channel is closed.
const std::vector<std::string>& rank_hosts();

class Collective {
 public:
  // Announces this rank's arrival at the collective called `what` ("the gradient allreduce";
  // the caller's context, e.g. "of step 7", is appended in messages). Starts the clock.
  explicit Collective(const char* what);
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  // For the MPI_I* call that starts the operation, on MPI_COMM_WORLD.
  MPI_Request* request() { return &request_; }
  // Polls request() until it completes. Past the deadline: prints who is missing, then ends the job.
  void wait();
  // Same for an operation that is not an MPI request: polls done() until true; on expiry calls
  // on_expiry() (ncclCommAbort) before the job ends.
  void wait_until(const std::function<bool()>& done, const std::function<void()>& on_expiry = {});

 private:
  [[noreturn]] void expire(double waited_s, const std::function<void()>& on_expiry);
  const char* what_;
  int64_t seq_;  // this rank's count of collectives, this one included
  double start_s_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The deadline for one collective, in seconds after arrival, for this rank: ranks 0 and 1 (the
// watchers) time out after timeout and timeout + grace; the others after timeout + 2 grace, so
// the rank that can name the missing ranks normally speaks first. 0: no deadline.
double deadline_after_s(double timeout_s, int rank, int world);

}  // namespace sftdp::comm::detail
