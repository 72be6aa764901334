// kernels/cuda/profile.cuh — every device operation timed on the device (issue 34, item 1): with
// SFTDP_GPU_PROFILE=<path> set, a program opens a window (begin .. end) around the work it wants
// measured, and every operation queued meanwhile — kernel launches (SFTDP_LAUNCH), cuBLASLt matmuls,
// memsets, copies, NCCL collectives — is bracketed by a pair of cudaEvents on its stream and tagged
// as the CUDA simulator's record tags it (cudasim/record.h: op, name as written at the launch,
// file:line), with the host's clock when it was queued and how long the queueing call took. end()
// synchronises, reads the events and appends one JSON line per operation to <path> ("%r": the
// launcher's rank), between a header line (the device, the window's own fields) and a footer line
// (device and host span). bench/gpu_cost.py joins those lines with the simulator's record of the same
// work and its prediction of each line. Outside a window (or without the variable) a Scope costs one
// branch. One host thread queues, as the Ops table assumes. Events are pooled across windows.
//
// Clocks: begin() waits for the device to drain, records a reference event and reads the host clock
// once that event has completed, so device times (µs after the reference) and host times (µs after
// that read) start together, give or take one synchronisation's latency. On one stream an operation
// can start only once the host has queued it and the previous one has ended: a gap before it while
// the host queued it late is time the device was idle waiting for the host (host-bound).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace sftdp::cuda::profile {

// SFTDP_GPU_PROFILE is set (read once): windows may be opened.
bool enabled();
// A window is open: operations queued now are timed.
bool active();
// Opens a window. `fields`: JSON members for the header line ("\"k\":1,\"j\":\"x\"" without braces).
// Synchronises the device. Requires enabled() and no open window.
void begin(const std::string& fields);
// Closes the window: synchronises the device and appends its lines to the profile file.
void end();

// Brackets one operation queued on `stream` during its lifetime. `op`: the record's op ("kernel",
// "gemm", "memcpy", "memset", "nccl"); `name`: the record's name (kernel name as written at the
// launch, collective call, copy kind); `detail`: JSON members of the operation's shape (may be "").
class Scope {
 public:
  Scope(cudaStream_t stream, const char* op, const char* name, const char* file, int line, std::string detail = "");
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int index_ = -1;  // the operation's slot in the open window; -1: not timed
};

const char* copy_kind_name(cudaMemcpyKind kind);  // "HtoD", "DtoH", "DtoD", "HtoH", as the record names them

}  // namespace sftdp::cuda::profile

namespace sftdp::cuda {
// cudaMemcpyAsync / cudaMemsetAsync on `stream` (checked), timed inside a profile window: every copy
// and memset of the CUDA path goes through these, so that the profile sees what the record sees.
// file and line: the caller's (__builtin_FILE/__builtin_LINE, which gcc and clang 14 both have; clang 14 has no
// std::source_location).
void memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE());
void memset_async(void* p, int value, size_t bytes, cudaStream_t stream, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE());
}  // namespace sftdp::cuda
