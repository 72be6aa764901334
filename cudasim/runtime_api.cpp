// cudasim/runtime_api.cpp — the CUDA runtime entry points sft-dp uses, under their real names and
// NVIDIA's own declarations (cuda_runtime_api.h), on the simulator's devices, memory and streams.
// Semantics as CUDA documents them: asynchronous copies and memsets are queued like kernels and may
// run after the call returns (host memory included: reading a device-to-host copy before
// synchronising reads stale data); cudaMemcpy and cudaMemset are ordered on the legacy stream and
// cudaMemcpy returns when done; cudaFree waits for the device first; a kernel fault is sticky (every
// later call of the device returns it); other failures set the calling thread's last error. Record mode
// (record.h): every queued copy and memset is a line; record-only runs host<->device copies only. While
// streams capture (capture.h), copies and memsets on them become graph nodes, events fork and join
// captures, and synchronising calls and "potentially unsafe" ones fail as the CUDA Programming Guide says.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "cudasim/capture.h"
#include "cudasim/memory.h"
#include "cudasim/record.h"
#include "cudasim/runtime.h"

namespace sftdp::sim {
namespace {

std::mutex& events_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<Event*, std::shared_ptr<Event>>& events() {
  static auto* m = new std::map<Event*, std::shared_ptr<Event>>;
  return *m;
}
std::shared_ptr<Event> find_event(cudaEvent_t handle) {
  std::lock_guard<std::mutex> lock(events_mu());
  const auto it = events().find(reinterpret_cast<Event*>(handle));
  return it == events().end() ? nullptr : it->second;
}

// The event's latest record (stream, op number), read once: a concurrent re-record is not mixed in.
std::pair<Stream*, uint64_t> last_record(Event& ev) {
  std::lock_guard<std::mutex> lock(ev.mu);
  return {ev.stream, ev.seq};
}
order::Clock record_clock(Event& ev) {
  std::lock_guard<std::mutex> lock(ev.mu);
  return order::copy(ev.clock);
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

bool valid_ordinal(int d) { return d >= 0 && static_cast<size_t>(d) < devices().size(); }

// The current device's sticky error, or cudaErrorNoDevice without one.
cudaError_t device_state() {
  if (devices().empty()) return cudaErrorNoDevice;
  return sticky_error(current_device());
}

// A device range of a copy or memset must lie inside one live allocation.
bool device_range_ok(const char* call, const char* which, const void* p, size_t bytes) {
  const auto a = memory().find(p, bytes);
  if (a && a->live) return true;
  report("memcheck", std::string(call) + ": the " + which + " range of " + std::to_string(bytes) + " bytes at " +
                         memory().describe(p) + " is not inside one live cudaMalloc allocation");
  return false;
}
bool is_device(const void* p) {
  const auto a = memory().find(p, 0);
  return a && a->live;
}

cudaError_t queue_copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                       Stream& stream) {
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault)  // unified addressing: the pointers say where they live
    kind = is_device(src) ? (is_device(dst) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                          : (is_device(dst) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToHost && !src_dev && !dst_dev) return fail(cudaErrorInvalidMemcpyDirection);
  if (src_dev && !device_range_ok(call, "source", src, bytes)) return fail(cudaErrorInvalidValue);
  if (dst_dev && !device_range_ok(call, "destination", dst, bytes)) return fail(cudaErrorInvalidValue);
  if ((!src_dev && is_device(src)) || (!dst_dev && is_device(dst))) {
    report("memcheck", std::string(call) + ": a pointer given as host memory is device memory (wrong cudaMemcpyKind)");
    return fail(cudaErrorInvalidValue);
  }
  static const char* const kKinds[] = {"HtoH", "HtoD", "DtoH", "DtoD"};
  Work w;
  const std::string fields = "\"call\":" + json_string(call) + ",\"kind\":\"" + kKinds[kind] +
                             "\",\"bytes\":" + std::to_string(bytes) + ",\"dst\":" + json_pointer(dst) +
                             ",\"src\":" + json_pointer(src);
  w.record = [fields](const Stream& s, const std::string& extra) { record_op("memcpy", &s, fields + extra); };
  if (record_only() && kind == cudaMemcpyDeviceToDevice) {  // device work: recorded, not run
    w.what = std::string(call) + " (record only)", w.run = [] {};
  } else {
    w.what = call, w.run = [dst, src, bytes] {
      order::access(src, bytes, false, "source");  // host memory: not tracked
      order::access(dst, bytes, true, "destination");
      std::memcpy(dst, src, bytes);
    };
  }
  return fail(queue_work(stream, std::move(w)));
}

cudaError_t queue_memset(const char* call, void* p, int value, size_t bytes, Stream& stream) {
  if (bytes == 0) return cudaSuccess;
  if (!device_range_ok(call, "destination", p, bytes)) return fail(cudaErrorInvalidValue);
  Work w;
  const std::string fields = "\"call\":" + json_string(call) + ",\"bytes\":" + std::to_string(bytes) +
                             ",\"value\":" + std::to_string(value) + ",\"dst\":" + json_pointer(p);
  w.record = [fields](const Stream& s, const std::string& extra) { record_op("memset", &s, fields + extra); };
  if (record_only()) {
    w.what = std::string(call) + " (record only)", w.run = [] {};
  } else {
    w.what = call, w.run = [p, value, bytes] {
      order::access(p, bytes, true, "");
      std::memset(p, value, bytes);
    };
  }
  return fail(queue_work(stream, std::move(w)));
}

}  // namespace
}  // namespace sftdp::sim

using namespace sftdp::sim;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = static_cast<int>(devices().size());
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  if (!valid_ordinal(d)) return fail(cudaErrorInvalidDevice);
  current_device() = d;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  if (!d) return fail(cudaErrorInvalidValue);
  if (devices().empty()) return fail(cudaErrorNoDevice);
  *d = current_device();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
  if (!id || len <= 0) return fail(cudaErrorInvalidValue);
  if (!valid_ordinal(d)) return fail(cudaErrorInvalidDevice);
  std::snprintf(id, static_cast<size_t>(len), "%s", device(d).bus_id.c_str());
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (!valid_ordinal(d)) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "sft-dp CUDA simulator (sm_90 limits)");
  const Device& dev = device(d);
  prop->totalGlobalMem = dev.budget;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->major = 9, prop->minor = 0;
  prop->multiProcessorCount = 1;  // blocks run one at a time
  prop->pciBusID = 0x18 + 0x10 * dev.physical;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

// The attributes launchers size their grids by, with cudaGetDeviceProperties' values; any other is
// cudaErrorInvalidValue (unmodelled, never a made-up number).
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (!valid_ordinal(d)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = 1;  // blocks run one at a time (as cudaGetDeviceProperties says)
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = 227 << 10;
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
  const Device& dev = device(current_device());
  *total_bytes = dev.budget;
  *free_bytes = dev.budget - dev.used.load();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (!p) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = check_unsafe_call(); e != cudaSuccess) return fail(e);
  if (bytes == 0) return cudaSuccess;
  Device& dev = device(current_device());
  size_t used = dev.used.load();
  do {
    if (bytes > dev.budget - used) return fail(cudaErrorMemoryAllocation);
  } while (!dev.used.compare_exchange_weak(used, used + bytes));
  *p = memory().allocate(bytes, dev.ordinal);
  if (!*p) {
    dev.used -= bytes;
    return fail(cudaErrorMemoryAllocation);
  }
  return cudaSuccess;
}

// Page-locked host memory: here plain host memory (the simulator's copies never fault or page), 4096-byte aligned;
// "potentially unsafe" during a capture, as cudaMalloc.
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (!p) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = check_unsafe_call(); e != cudaSuccess) return fail(e);
  *p = std::aligned_alloc(4096, (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* p) {
  if (const cudaError_t e = check_unsafe_call(); e != cudaSuccess) return fail(e);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  if (const cudaError_t e = check_unsafe_call(); e != cudaSuccess) return fail(e);  // cudaFree(0) too
  if (!p) return cudaSuccess;
  const auto a = memory().find(p, 0);
  if (!a || !a->live || a->begin != reinterpret_cast<uintptr_t>(p)) {
    report("memcheck", "cudaFree of " + memory().describe(p) + ", not the start of a live allocation (a double free?)");
    return fail(cudaErrorInvalidValue);
  }
  synchronize_device(a->device);  // as CUDA does: queued work may still use it
  size_t bytes = 0;
  int owner = 0;
  memory().release(p, &bytes, &owner);
  device(owner).used -= bytes;
  return fail(sticky_error(owner));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t handle) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  return queue_copy("cudaMemcpyAsync", dst, src, bytes, kind, *s);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  Stream& s = *resolve(nullptr);
  if (const cudaError_t e = check_legacy_use(s); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = check_unsafe_call(); e != cudaSuccess) return fail(e);  // it waits for the device
  if (const cudaError_t e = queue_copy("cudaMemcpy", dst, src, bytes, kind, s); e != cudaSuccess) return e;
  s.wait(s.tail());
  order::host_observes(s.clock());
  return fail(sticky_error(s.device()));
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t handle) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  return queue_memset("cudaMemsetAsync", p, value, bytes, *s);
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  return queue_memset("cudaMemset", p, value, bytes, *resolve(nullptr));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* handle, unsigned flags) {
  if (!handle) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  if (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
  auto* s = new Stream(current_device(),
                       (flags & cudaStreamNonBlocking) ? Stream::Kind::kNonBlocking : Stream::Kind::kBlocking);
  register_stream(s);
  *handle = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* handle) { return cudaStreamCreateWithFlags(handle, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  Stream* s = handle && handle != cudaStreamLegacy ? resolve(handle) : nullptr;
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  forget_stream_captures(*s);
  unregister_stream(s);
  s->shut_down();  // what was queued still runs, as CUDA promises
  forget_stream(s);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_stream_sync(*s); e != cudaSuccess) return fail(e);
  s->wait(s->tail());
  order::host_observes(s->clock());
  return fail(sticky_error(s->device()));
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(s->device()); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = check_stream_sync(*s); e != cudaSuccess) return fail(e);
  const uint64_t t = s->tail();
  const order::Clock clock = s->clock();
  s->release(t);
  if (!s->finished(t)) return cudaErrorNotReady;
  order::host_observes(clock);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned flags) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  Stream* s = resolve(handle);
  const auto ev = find_event(event);
  if (!s || !ev) return fail(cudaErrorInvalidResourceHandle);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  bool captured = false;  // a fork or join of a capture: no eager wait
  if (const cudaError_t e = capture_event_wait(*s, *ev, &captured); e != cudaSuccess || captured) return fail(e);
  Stream* on = nullptr;
  uint64_t seq = 0;
  order::Clock clock;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    on = ev->stream, seq = ev->seq;  // the record current at this call, not a later one
    clock = order::copy(ev->clock);
  }
  if (on) queue_event_wait(*s, on, seq, clock);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* handle, unsigned flags) {
  if (!handle) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  auto ev = std::make_shared<Event>();
  ev->flags = flags;
  std::lock_guard<std::mutex> lock(events_mu());
  events().emplace(ev.get(), ev);
  *handle = reinterpret_cast<cudaEvent_t>(ev.get());
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* handle) { return cudaEventCreateWithFlags(handle, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  std::lock_guard<std::mutex> lock(events_mu());
  return events().erase(reinterpret_cast<Event*>(handle)) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  if (const cudaError_t e = device_state(); e != cudaSuccess) return fail(e);
  Stream* s = resolve(handle);
  const auto ev = find_event(event);
  if (!s || !ev) return fail(cudaErrorInvalidResourceHandle);
  bool captured = false;  // recorded into a capture: nothing queued
  if (const cudaError_t e = capture_event_record(*ev, *s, &captured); e != cudaSuccess || captured) return fail(e);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    generation = ++ev->generation;
    ev->time_ms = -1;
  }
  const bool timing = !(ev->flags & cudaEventDisableTiming);
  const uint64_t seq = enqueue(
      *s, "cudaEventRecord",
      [ev, generation, timing] {
        std::lock_guard<std::mutex> lock(ev->mu);
        if (timing && ev->generation == generation) ev->time_ms = now_ms();
      },
      /*exec=*/false);
  const order::Clock clock = s->clock();  // the record op's (nothing else queued on s since: one host thread)
  std::lock_guard<std::mutex> lock(ev->mu);
  if (ev->generation == generation) ev->stream = s, ev->seq = seq, ev->clock = clock;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const auto ev = find_event(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_event_use(*ev); e != cudaSuccess) return fail(e);
  const auto [s, seq] = last_record(*ev);
  if (!s) return cudaSuccess;  // never recorded: complete
  if (const cudaError_t e = sticky_error(s->device()); e != cudaSuccess) return fail(e);
  const order::Clock clock = record_clock(*ev);
  s->release(seq);  // a query asks for the work: it runs now, and a later query sees it done
  if (!s->finished(seq)) return cudaErrorNotReady;
  order::host_observes(clock);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const auto ev = find_event(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_event_use(*ev); e != cudaSuccess) return fail(e);
  const auto [s, seq] = last_record(*ev);
  if (!s) return cudaSuccess;
  const order::Clock clock = record_clock(*ev);
  s->wait(seq);
  order::host_observes(clock);
  return fail(sticky_error(s->device()));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto a = find_event(start), b = find_event(end);
  if (!ms || !a || !b) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  for (Event* ev : {a.get(), b.get()})
    if (const cudaError_t e = check_event_use(*ev); e != cudaSuccess) return fail(e);
  std::scoped_lock lock(a->mu, b->mu);
  if (!a->stream || !b->stream) return fail(cudaErrorInvalidResourceHandle);
  if (a->time_ms < 0 || b->time_ms < 0) return cudaErrorNotReady;
  *ms = static_cast<float>(b->time_ms - a->time_ms);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  if (const cudaError_t e = check_device_sync(current_device()); e != cudaSuccess) return fail(e);
  synchronize_device(current_device());
  return fail(sticky_error(current_device()));
}

cudaError_t cudaGetLastError() {
  const cudaError_t sticky = devices().empty() ? cudaSuccess : sticky_error(current_device());
  const cudaError_t e = last_error();
  last_error() = cudaSuccess;
  return e != cudaSuccess ? e : sticky;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = devices().empty() ? cudaSuccess : sticky_error(current_device());
  return last_error() != cudaSuccess ? last_error() : sticky;
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge:
      return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined:
      return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent:
      return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread:
      return "cudaErrorStreamCaptureWrongThread";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    default:
      return "unrecognized error code";
  }
}

}  // extern "C"
