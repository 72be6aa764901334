// cudasim/stream_order.h — streamcheck: device memory touched by two streams with nothing ordering the two
// accesses (a race on a GPU, whatever order the simulator happened to run them in). Happens-before is tracked
// with vector clocks, at the moment work is queued, from CUDA's own ordering rules: program order within a
// stream; cudaStreamWaitEvent (the waiting stream is ordered after the event's record); the legacy stream's
// implicit waits; and the host's synchronisations (cudaStreamSynchronize, cudaEventSynchronize, a cudaEventQuery
// or cudaStreamQuery that answers cudaSuccess, cudaDeviceSynchronize, a synchronous cudaMemcpy/cudaMemset,
// cudaFree), after which everything the host queues is ordered after what it waited for. Each op remembers the
// clock it was queued with; when it runs, every byte range it reads or writes is compared with the recent
// accesses of other streams to the same allocation: two that overlap, at least one a write, and neither ordered
// before the other, are reported ("streamcheck") and end the process's device work with a sticky error.
// What each op touches: copies, memsets, cuBLASLt operands and NCCL buffers their exact ranges; a kernel the
// bytes it changed (its arguments' allocations compared before and after) as writes, and the first byte each
// pointer argument points at as a read (the rest of what a kernel reads is unknown to the simulator).
// Graph replays run their nodes in capture order on one stream: ordered, so branches are not checked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sftdp::sim {
struct Allocation;
}

namespace sftdp::sim::order {

// A vector clock: (stream id, the last of its ops ordered before), sorted by stream id.
using Clock = std::vector<std::pair<uint64_t, uint64_t>>;

// What an op was queued with: its stream, its number there, its clock (itself included) and its name.
struct Stamp {
  uint64_t stream = 0;
  uint64_t seq = 0;
  int device = 0;
  Clock clock;
  std::string what;
};

bool enabled();  // SFTDP_SIM_STREAMCHECK (default 1)
uint64_t new_stream_id();

// ---- Queue side (host threads), each under one process-wide lock ----
// The stamp of op `seq` queued on a stream whose clock is `stream_clock`: that clock joined with the host's,
// plus the op itself; stream_clock becomes it.
std::shared_ptr<const Stamp> stamp(uint64_t stream, int device, uint64_t seq, const std::string& what,
                                   Clock& stream_clock);
// `into` is ordered after `from` (a stream waiting for an event or for another stream).
void join(Clock& into, const Clock& from);
// The host has seen the work of `c` complete: what it queues from now on is ordered after it.
void host_observes(const Clock& c);
// A copy of a clock, taken under the lock (stream and event clocks change under it).
Clock copy(const Clock& c);

// ---- Run side (the stream's worker, while the op runs) ----
// The op being run by this thread (null: none, e.g. a wait).
void set_current(std::shared_ptr<const Stamp> op);
// The current op reads or writes [p, p + bytes) of device memory (no-op for host memory or no current op).
void access(const void* p, size_t bytes, bool write, const char* operand);
// A kernel's effect on one allocation: every byte that differs between `before` and the allocation now is a
// write (coalesced into ranges).
void kernel_writes(const Allocation& a, const unsigned char* before);

}  // namespace sftdp::sim::order
