// cudasim/runtime.h — the simulator's process-wide state, shared by its parts: settings from the
// environment, the simulated devices (count, PCI bus ids, memory budgets, sticky errors), the calling
// host thread's current device and last error, stream handles, and the reports of failed checks.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "cudasim/streams.h"

namespace sftdp::sim {

// From the environment, read once (a bad value: an error line and exit 2):
//   SFTDP_SIM_DEVICES        simulated GPUs on this host (default 1); CUDA_VISIBLE_DEVICES narrows them
//   SFTDP_SIM_DEVICE_MEMORY  bytes per device, K/M/G suffixes allowed (default 16G)
//   SFTDP_SIM_SCHEDULES      thread schedules per launch, results compared (default 2; 1 = no check)
//   SFTDP_SIM_STREAMS        lazy (default) | eager
//   SFTDP_SIM_RECORD         a path: record mode (record.h), one JSON line per device operation; %r = MPI rank
//   SFTDP_SIM_RECORD_ONLY    0 (default) | 1: record the device work without running it (needs SFTDP_SIM_RECORD)
struct Settings {
  int physical_devices = 1;
  std::vector<int> visible;  // physical index of each visible ordinal
  size_t device_memory = size_t{16} << 30;
  int schedules = 2;
  bool lazy_streams = true;
  std::string record_path;  // empty: no record
  bool record_only = false;
};
const Settings& settings();
void set_schedules(int n);  // tests only

struct Device {
  int ordinal = 0;   // as the program sees it (after CUDA_VISIBLE_DEVICES)
  int physical = 0;  // index among this host's SFTDP_SIM_DEVICES
  std::string bus_id;
  size_t budget = 0;
  std::atomic<size_t> used{0};
  std::atomic<int> sticky{cudaSuccess};  // a kernel fault: every later call returns it
  std::mutex mu;                         // guards the two below
  Stream* legacy = nullptr;              // stream 0, created on first use
  std::vector<Stream*> streams;          // every live stream of the device, legacy included
};
// Visible devices; empty when CUDA_VISIBLE_DEVICES hides all.
std::vector<Device*>& devices();
Device& device(int ordinal);
int& current_device();  // the calling host thread's (cudaSetDevice)

cudaError_t sticky_error(int ordinal);
void set_sticky_error(int ordinal, cudaError_t e);

// The calling host thread's last error (cudaGetLastError); set by every failing call.
cudaError_t& last_error();
inline cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error() = e;
  return e;
}

// The stream behind a handle: 0 and cudaStreamLegacy are the current device's legacy stream. Null for
// a handle that is not a live stream (and for cudaStreamPerThread, which the simulator lacks).
Stream* resolve(cudaStream_t s);
// Queues fn on s with CUDA's implicit ordering: work on the legacy stream waits for the device's
// blocking streams and they for it (non-blocking streams for neither).
uint64_t enqueue(Stream& s, std::string what, std::function<void()> fn, bool exec = true);
// cudaStreamWaitEvent's eager form: s waits for op `seq` of `on`, whose clock (streamcheck) is `clock`. Under
// SFTDP_SIM_PLANT=drop-wait-before:<op> (tests) it is held until s's next op, and dropped if that op's name
// starts with <op> (a report line says so).
void queue_event_wait(Stream& s, Stream* on, uint64_t seq, const order::Clock& clock);
void apply_pending_wait(Stream& s, const std::string& next_op);
void register_stream(Stream* s);
bool is_live(const Stream* s);  // not destroyed (legacy streams always are)
void unregister_stream(Stream* s);
void synchronize_device(int ordinal);  // every stream of the device: released and finished

// A failed check: "sftdp-cudasim: <check>: <text>" on stderr in one write, kept for sim.h's
// reports(); with a device, also its sticky error.
void report(const char* check, const std::string& text);
// SIGSEGV/SIGBUS and ASan's death callback name the running kernel (faults.cpp); installed with the
// devices, before any kernel can run.
void install_fault_handlers();
void fault(int ordinal, cudaError_t sticky, const char* check, const std::string& text);

}  // namespace sftdp::sim
