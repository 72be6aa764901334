// src/comm/nccl_communicator.cu — the GPU communicator (include/sftdp/comm.h): one NCCL
// communicator over MPI_COMM_WORLD, its ncclUniqueId made by rank 0 and broadcast over MPI, its
// own stream. Each collective (allreduce_sum: one in-place fp32 ncclAllReduce; ZeRO-1's
// ncclReduceScatter and ncclAllGather, in place) first makes that stream wait for everything
// queued on the kernels' stream (an event, not a device-wide sync), and returns when it is
// complete: an event polled (with ncclCommGetAsyncError) under the collective deadline
// (comm/collective.h); on expiry ncclCommAbort, then the job ends naming the ranks that never
// arrived. allreduce_overlap queues one ncclAllReduce per gradient bucket on stream_ as backward
// produces it (start_allreduce_sum) and waits once (wait_allreduces). ZeRO-2/3's out-of-place
// ncclReduceScatter / ncclAllGather go on the same stream_ the same way, each followed by an event
// of its ticket (from a small pool): wait(ticket) makes the kernels' stream wait for that event
// (the host does not block), wait_all() polls one event after them all under the deadline. Host
// helpers come from MpiHostCommunicator (src/comm/mpi_host.h).
// The CUDA device must be selected (cuda_select_device) before make_nccl_communicator().
// The C API is all we use; the deprecated C++ bindings only add warnings under nvcc.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <deque>
#include <vector>

#include "comm/collective.h"
#include "comm/mpi_host.h"
#include "kernels/cuda/profile.cuh"
#include "kernels/ops.h"
#include "sftdp/check_cuda.h"
#include "sftdp/check_mpi.h"
#include "sftdp/check_nccl.h"
#include "sftdp/comm.h"

// One NCCL call queued on stream_ (checked), timed inside a profile window (kernels/cuda/profile.cuh),
// tagged as the CUDA simulator's record tags a collective: the call's name and element count.
#define CHECK_NCCL_TIMED(name, count, call)                                                              \
  do {                                                                                                   \
    const cuda::profile::Scope timed_collective_(                                                        \
        stream_, "nccl", name, __FILE__, __LINE__,                                                       \
        cuda::profile::active() ? "\"count\":" + std::to_string(count) : std::string());               \
    CHECK_NCCL(call);                                                                                    \
  } while (0)

namespace sftdp::comm {
namespace {

// Polled by a collective's deadline wait: true once `done` (recorded after the collective) has passed;
// a CUDA error, or an error NCCL reports asynchronously on `comm` (a peer's network failure), is an
// internal error.
bool collective_done_at(cudaEvent_t done, ncclComm_t comm) {
  const cudaError_t e = cudaEventQuery(done);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) CHECK_CUDA(e);
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess && async != ncclInProgress) CHECK_NCCL(async);
  return false;
}

class NcclCommunicator final : public MpiHostCommunicator {
 public:
  NcclCommunicator() {
    ncclUniqueId id{};
    if (rank_ == 0) CHECK_NCCL(ncclGetUniqueId(&id));
    detail::Collective c("the NCCL set-up");
    CHECK_MPI(MPI_Ibcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, MPI_COMM_WORLD, c.request()));
    c.wait();
    // Every rank has the id, so all are alive and about to join: a blocking init is safe here.
    CHECK_NCCL(ncclCommInitRank(&comm_, world_, id, rank_));
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&kernels_done_, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    // Teardown: nothing useful can be done about a failure here, so results are not checked.
    (void)cudaStreamSynchronize(stream_);
    (void)ncclCommDestroy(comm_);
    (void)cudaEventDestroy(kernels_done_);
    (void)cudaEventDestroy(reduced_);
    for (const Started& s : in_flight_) (void)cudaEventDestroy(s.done);
    for (cudaEvent_t e : spare_events_) (void)cudaEventDestroy(e);
    (void)cudaStreamDestroy(stream_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const char* name() const override { return "nccl"; }
  // Context parallelism: groups of n adjacent ranks, split from this communicator (ncclCommSplit).
  std::unique_ptr<Group> context_group(int n) override;

  // buf: device memory, n floats, summed in place across ranks.
  void allreduce_sum(float* buf, size_t n) override {
    if (n == 0) return;
    // GPU-CHECK: only ever run on one GPU so far (one rank: NCCL copies). A run with 2+ GPUs must
    // show the ranks' summed gradients bitwise equal (NCCL's ring/tree finish each chunk on one rank
    // and broadcast it) and the MPI-vs-NCCL loss curves within tolerance. Two ranks cannot share
    // one GPU (NCCL refuses duplicate devices), so this needs a multi-GPU machine.
    run("the gradient allreduce",
        [&] { CHECK_NCCL_TIMED("ncclAllReduce", n, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream_)); });
  }
  // Overlap: stream_ waits for the kernels queued so far (the range's last writes), then sums it
  // in place; the kernels' stream goes on with the rest of backward meanwhile. wait_allreduces
  // polls one event after the last sum under the deadline, like run().
  // GPU-CHECK: untested on 2+ GPUs (one rank: NCCL copies).
  void start_allreduce_sum(float* buf, size_t n) override {
    if (n == 0) return;
    CHECK_CUDA(cudaEventRecord(kernels_done_, kernels_stream()));
    CHECK_CUDA(cudaStreamWaitEvent(stream_, kernels_done_, 0));
    CHECK_NCCL_TIMED("ncclAllReduce", n, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream_));
    started_ = true;
  }
  void wait_allreduces() override {
    if (!started_) return;
    started_ = false;
    arrive();
    detail::Collective c("the gradient allreduce");
    CHECK_CUDA(cudaEventRecord(reduced_, stream_));
    c.wait_until([this] { return collective_done(); }, [this] { (void)ncclCommAbort(comm_); });
  }
  // ZeRO-1, in place: NCCL's in-place forms take this rank's block at buf + rank·block.
  // GPU-CHECK: untested on a GPU; needs 2+ GPUs to be more than a copy.
  void reduce_scatter_sum(float* buf, size_t block) override {
    if (block == 0) return;
    run("the gradient reduce-scatter", [&] {
      CHECK_NCCL_TIMED("ncclReduceScatter", block,
                       ncclReduceScatter(buf, buf + rank_ * block, block, ncclFloat, ncclSum, comm_, stream_));
    });
  }
  void all_gather(float* buf, size_t block) override {
    if (block == 0) return;
    run("the parameter all-gather",
        [&] {
          CHECK_NCCL_TIMED("ncclAllGather", block,
                           ncclAllGather(buf + rank_ * block, buf, block, ncclFloat, comm_, stream_));
        });
  }
  // ZeRO-2/3, out of place: queued on stream_ after the kernels queued so far, like
  // start_allreduce_sum, then an event of the ticket's own (a later collective's event would make
  // wait() wait longer than asked). stream_ runs in order, so a ticket's event also covers every
  // earlier ticket. One rank: NCCL copies send to recv, in order with the rest.
  // GPU-CHECK: run on one H200 at one rank only (NCCL accepts the out-of-place calls; tickets,
  // wait(t) ordering the kernels' stream and 40 rounds of event reuse right, up to 2^24-float
  // blocks); needs 2+ GPUs to be more than a copy.
  Ticket start_reduce_scatter_sum(const float* send, float* recv, size_t block) override {
    assert_out_of_place("start_reduce_scatter_sum", send, world_ * block, recv, block);
    return start_shard(kShardReduceScatter, block, [&] {
      CHECK_NCCL_TIMED("ncclReduceScatter", block,
                       ncclReduceScatter(send, recv, block, ncclFloat, ncclSum, comm_, stream_));
    });
  }
  Ticket start_all_gather(const float* send, float* recv, size_t block) override {
    assert_out_of_place("start_all_gather", send, block, recv, world_ * block);
    return start_shard(kShardAllGather, block,
                       [&] {
                         CHECK_NCCL_TIMED("ncclAllGather", block,
                                          ncclAllGather(send, recv, block, ncclFloat, comm_, stream_));
                       });
  }
  // In place: NCCL's in-place form sends from buf + rank·block.
  Ticket start_all_gather_bf16(uint16_t* buf, size_t block) override {
    return start_shard(kShardAllGather, block, [&] {
      CHECK_NCCL_TIMED("ncclAllGather", block,
                       ncclAllGather(buf + static_cast<size_t>(rank_) * block, buf, block, ncclBfloat16, comm_,
                                     stream_));
    });
  }
  // The kernels' stream waits for the newest started collective at or before `ticket`; the host
  // goes on. cudaStreamWaitEvent takes the event's record as it is at the call, so every event of
  // the covered tickets may be recorded again by a later start (back to the pool).
  void wait(Ticket ticket) override {
    SFTDP_ASSERT(ticket <= last_ticket_, "wait: a ticket that no start_* has returned yet");
    cudaEvent_t newest = nullptr;
    while (!in_flight_.empty() && in_flight_.front().ticket <= ticket) {
      if (newest) spare_events_.push_back(newest);
      newest = in_flight_.front().done;
      in_flight_.pop_front();
    }
    if (!newest) return;  // already waited for, or only empty blocks (nothing queued)
    CHECK_CUDA(cudaStreamWaitEvent(kernels_stream(), newest, 0));
    spare_events_.push_back(newest);
  }
  // Polls one event after everything on stream_, as wait_allreduces does, whenever a collective
  // was started since the last wait_all, even if wait() already covered it: the kernels' stream
  // waiting is not the host knowing it is done, and the Collective must be made on every rank
  // alike (it depends only on what was started).
  void wait_all() override {
    if (shard_kinds_ == 0) return;
    detail::Collective c(shard_wait_name(shard_kinds_));  // no arrive(): see there
    shard_kinds_ = 0;
    CHECK_CUDA(cudaEventRecord(reduced_, stream_));
    c.wait_until([this] { return collective_done(); }, [this] { (void)ncclCommAbort(comm_); });
    for (const Started& s : in_flight_) spare_events_.push_back(s.done);
    in_flight_.clear();
  }

 private:
  // The stream the Ops tables queue kernels and copies on (both CUDA tables share that one stream):
  // the buffers' producers and consumers.
  static cudaStream_t kernels_stream() {
    return static_cast<cudaStream_t>(cuda_ops(GemmInputs::kFp32)->stream());
  }

  // Queues `launch` (one NCCL collective on stream_) after everything already queued on the
  // kernels' stream (an event, not a device-wide sync) and returns when it is complete.
  template <class Launch>
  void run(const char* what, const Launch& launch) {
    arrive();
    CHECK_CUDA(cudaStreamWaitEvent(stream_, kernels_done_, 0));
    detail::Collective c(what);
    launch();
    CHECK_CUDA(cudaEventRecord(reduced_, stream_));
    // Returning means the result is usable by whatever the caller queues next, on any stream.
    // GPU-CHECK: untested on a GPU (this machine has none): the poll below replaced a plain
    // cudaStreamSynchronize; a stopped rank must end a 2-GPU job within collective_timeout_s.
    c.wait_until([this] { return collective_done(); }, [this] { (void)ncclCommAbort(comm_); });
  }

  // This rank arrives at a collective when its device has run everything queued before it: the host
  // queues a whole step without waiting (issue 34), so it reaches the collective's call while its own
  // forward and backward may still be running, and a deadline counted from there would count this
  // rank's own work as the others' silence. Until then the peers see it as not arrived yet; a kernel of
  // its own that never ends makes it one that never arrives, which they report. The host waits here
  // anyway (the collective's wait follows), so the device idles only for the collective's launch.
  // Not while a ZeRO-2/3 collective is in flight (started since the last wait_all): the kernels may
  // wait for it (wait(ticket)), so their end may hang on a stopped peer, which only the deadline may
  // wait for; there the clock starts at the call, as it did before the step stopped waiting.
  void arrive() {
    CHECK_CUDA(cudaEventRecord(kernels_done_, kernels_stream()));
    if (shard_kinds_ == 0) CHECK_CUDA(cudaEventSynchronize(kernels_done_));
  }

  // Polled by the deadline wait: true once reduced_ has passed (collective_done_at).
  bool collective_done() { return collective_done_at(reduced_, comm_); }

  // Gives the next ticket to one ZeRO-2/3 collective: `launch` queues it on stream_ after the
  // kernels queued so far, then the ticket's event is recorded. An empty block queues nothing:
  // waiting for its ticket waits for the earlier ones, all the contract asks.
  template <class Launch>
  Ticket start_shard(ShardKind kind, size_t block, const Launch& launch) {
    const Ticket ticket = ++last_ticket_;
    if (block == 0) return ticket;
    CHECK_CUDA(cudaEventRecord(kernels_done_, kernels_stream()));
    CHECK_CUDA(cudaStreamWaitEvent(stream_, kernels_done_, 0));
    launch();
    cudaEvent_t done = nullptr;
    if (spare_events_.empty()) {
      CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    } else {
      done = spare_events_.back();
      spare_events_.pop_back();
    }
    CHECK_CUDA(cudaEventRecord(done, stream_));
    in_flight_.push_back({ticket, done});
    shard_kinds_ |= kind;
    return ticket;
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t kernels_done_ = nullptr;
  cudaEvent_t reduced_ = nullptr;  // recorded on stream_ after each collective
  bool started_ = false;           // overlap sums queued since the last wait_allreduces
  // ZeRO-2/3: each queued collective's ticket and the event recorded after it, oldest first, until
  // a wait covers it; then the event goes to spare_events_ (the pool grows to the most in flight).
  struct Started {
    Ticket ticket;
    cudaEvent_t done;
  };
  std::deque<Started> in_flight_;
  std::vector<cudaEvent_t> spare_events_;
  Ticket last_ticket_ = 0;  // the newest ticket given out (tickets start at 1)
  unsigned shard_kinds_ = 0;  // ShardKind bits queued since the last wait_all (0: nothing to wait for)
};

// Context parallelism's group (sftdp/comm.h's Group) on device memory: an ncclCommSplit of the job's
// communicator (color = group, key = world rank), its own stream and events. Each collective waits for the
// kernels queued so far (an event), runs on the group's stream and returns when complete, polled under the
// collective deadline (ncclCommAbort on expiry), like NcclCommunicator::run. NCCL's ring reduce-scatter sums
// in an order fixed by the group size: the same bits run to run.
// GPU-CHECK: run only in the CUDA simulator so far (NCCL 2, 4 ranks); a real 2+ GPU run must show the
// simulator's results.
class NcclGroup final : public Group {
 public:
  NcclGroup(ncclComm_t parent, int n, int world_rank) : size_(n), index_(world_rank % n) {
    CHECK_NCCL(ncclCommSplit(parent, world_rank / n, world_rank, &comm_, nullptr));
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&kernels_done_, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclGroup() override {
    (void)cudaStreamSynchronize(stream_);
    (void)ncclCommDestroy(comm_);
    (void)cudaEventDestroy(kernels_done_);
    (void)cudaEventDestroy(done_);
    (void)cudaStreamDestroy(stream_);
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int size() const override { return size_; }
  int index() const override { return index_; }
  void all_gather(const void* send, void* recv, size_t bytes) override {
    assert_out_of_place("Group::all_gather", static_cast<const char*>(send), bytes, static_cast<const char*>(recv),
                        bytes * size_);
    run("the context group's key/value all-gather", [&] {
      CHECK_NCCL_TIMED("ncclAllGather", bytes, ncclAllGather(send, recv, bytes, ncclInt8, comm_, stream_));
    });
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    assert_out_of_place("Group::reduce_scatter_sum", send, n * size_, recv, n);
    run("the context group's key/value gradient reduce-scatter", [&] {
      CHECK_NCCL_TIMED("ncclReduceScatter", n, ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, comm_, stream_));
    });
  }

 private:
  template <class Launch>
  void run(const char* what, const Launch& launch) {
    CHECK_CUDA(cudaEventRecord(kernels_done_, static_cast<cudaStream_t>(cuda_ops(GemmInputs::kFp32)->stream())));
    CHECK_CUDA(cudaStreamWaitEvent(stream_, kernels_done_, 0));
    detail::Collective c(what);
    launch();
    CHECK_CUDA(cudaEventRecord(done_, stream_));
    c.wait_until([this] { return collective_done_at(done_, comm_); }, [this] { (void)ncclCommAbort(comm_); });
  }
  int size_, index_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t kernels_done_ = nullptr, done_ = nullptr;
};

std::unique_ptr<Group> NcclCommunicator::context_group(int n) {
  SFTDP_ASSERT(n >= 1 && world_ % n == 0, "context_group: n must divide the world size");
  return std::make_unique<NcclGroup>(comm_, n, rank_);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() { return std::make_unique<NcclCommunicator>(); }

}  // namespace sftdp::comm
