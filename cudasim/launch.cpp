// cudasim/launch.cpp — a kernel launch as the CUDA runtime takes it (launch.h): the configuration
// checked against Hopper's limits (cudaErrorInvalidConfiguration / cudaErrorInvalidValue, through
// cudaGetLastError, nothing queued), every pointer argument checked to be null or device memory (a
// host pointer is an error at the launch, naming the kernel and the argument), then the launch
// queued on its stream with the allocations its arguments point into (or, on a capturing stream, made a
// graph node: arguments captured by value, as on a device; capture.h). Record mode (record.h) writes its
// line at the queueing (a replay's at the cudaGraphLaunch); record-only queues it without its body. When it
// runs, the allocations must still be live (a graph replayed after a cudaFree is an illegal address).
#include <algorithm>
#include <cstring>

#include "cudasim/block_runner.h"
#include "cudasim/capture.h"
#include "cudasim/record.h"
#include "cudasim/runtime.h"
#include "cudasim/tensor_core.h"

namespace sftdp::sim {
namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 2147483647u, kMaxGridYZ = 65535;

std::string where(const KernelLaunch& l) {
  const char* slash = std::strrchr(l.file, '/');
  return "kernel " + std::string(l.kernel) + " (launched at " + (slash ? slash + 1 : l.file) + ":" +
         std::to_string(l.line) + ")";
}
std::string dims(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

cudaError_t check_configuration(const KernelLaunch& l) {
  const dim3 b = l.block, g = l.grid;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  std::string why;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
    why = "a zero grid or block dimension";
  else if (threads > kMaxThreadsPerBlock)
    why = std::to_string(threads) + " threads per block (at most 1024)";
  else if (b.x > kMaxBlockX || b.y > kMaxBlockY || b.z > kMaxBlockZ)
    why = "block " + dims(b) + " (at most (1024,1024,64))";
  else if (g.x > kMaxGridX || g.y > kMaxGridYZ || g.z > kMaxGridYZ)
    why = "grid " + dims(g) + " (at most (2147483647,65535,65535))";
  if (!why.empty()) {
    report("launch", where(l) + ": invalid configuration: " + why);
    return cudaErrorInvalidConfiguration;
  }
  if (const size_t most = max_dynamic_shared(l.kernel_address); l.dynamic_smem > most) {
    report("launch", where(l) + ": " + std::to_string(l.dynamic_smem) + " bytes of dynamic shared memory (at most " +
                         std::to_string(most) +
                         (most == 49152 ? " without cudaFuncSetAttribute's MaxDynamicSharedMemorySize opt-in)" : ")"));
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// The first of `regions` that is no longer the live allocation it was at the launch, or null.
const Allocation* freed_region(const std::vector<Allocation>& regions) {
  for (const Allocation& r : regions) {
    const auto now = memory().find(reinterpret_cast<const void*>(r.begin), 0);
    if (!now || now->id != r.id || !now->live) return &r;
  }
  return nullptr;
}

}  // namespace

void submit(KernelLaunch&& l, cudaStream_t handle) {
  if (devices().empty()) {
    fail(cudaErrorNoDevice);
    return;
  }
  Stream* stream = resolve(handle);
  if (!stream) {
    report("launch", where(l) + ": the stream is not a live stream of this process");
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  if (const cudaError_t sticky = sticky_error(stream->device()); sticky != cudaSuccess) {
    fail(sticky);
    return;
  }
  if (const cudaError_t e = check_configuration(l); e != cudaSuccess) {
    fail(e);
    return;
  }
  std::vector<Allocation> regions;
  const auto add = [&regions](const Allocation& a) {
    if (std::none_of(regions.begin(), regions.end(), [&](const Allocation& r) { return r.id == a.id; }))
      regions.push_back(a);
  };
  for (size_t i = 0; i < l.args.size(); ++i) {
    const ArgView& arg = l.args[i];
    if (arg.is_pointer) {
      const void* p = nullptr;
      std::memcpy(&p, arg.bytes, sizeof p);
      if (!p) continue;  // null is a value (an absent optional input); dereferencing it faults
      const auto a = memory().find(p, 0);
      if (!a || !a->live) {
        report("launch", where(l) + ": argument " + std::to_string(i + 1) + " is " + memory().describe(p));
        fail(cudaErrorInvalidValue);
        return;
      }
      add(*a);
      continue;
    }
    // Other arguments (functors, structs): any aligned word that points into device memory.
    for (size_t at = 0; at + sizeof(void*) <= arg.size; at += sizeof(void*)) {
      const void* p = nullptr;
      std::memcpy(&p, static_cast<const char*>(arg.bytes) + at, sizeof p);
      if (!p) continue;
      if (const auto a = memory().find(p, 0); a && a->live) add(*a);
    }
  }
  const int device = stream->device();
  auto shared = std::make_shared<KernelLaunch>(std::move(l));
  Work w;
  w.record = [shared](const Stream& s, const std::string& extra) { record_kernel(*shared, s, extra); };
  if (record_only()) {  // in stream order like any kernel, but nothing runs (memory stays as it was)
    w.what = std::string("kernel ") + shared->kernel + " (record only)", w.run = [] {};
  } else {
    w.what = std::string("kernel ") + shared->kernel;
    w.run = [shared, regions = std::move(regions), device] {
      if (const Allocation* gone = freed_region(regions)) {
        fault(device, cudaErrorIllegalAddress, "memcheck",
              where(*shared) + ": an argument points into allocation #" + std::to_string(gone->id) + " (" +
                  std::to_string(gone->size) + " bytes), freed since the launch was queued or captured");
        return;
      }
      run_kernel(*shared, regions, device);
    };
  }
  if (const cudaError_t e = queue_work(*stream, std::move(w)); e != cudaSuccess) fail(e);
}

}  // namespace sftdp::sim
