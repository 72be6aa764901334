// kernels/cuda/staging.cu — host-to-device copies that do not wait (Ops::to_device_async): the source is first
// copied on the host into a pinned staging ring, then cudaMemcpyAsync'd from there on the stream, so the caller may
// reuse its memory at once and the host never waits for the device (pageable memory would make the copy synchronous).
// The ring grows (doubling) when a copy does not fit; a range is written again only after the event recorded behind
// its last copy has passed (checked, almost always long done). One host thread queues (the Ops table's model).
#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/staging.cuh"

namespace sftdp::cuda {
namespace {

constexpr size_t kMinRingBytes = size_t{4} << 20;
constexpr size_t kAlign = 256;

struct InFlight {
  size_t begin, end;
  cudaEvent_t done;
};

struct Ring {
  char* buf = nullptr;
  size_t capacity = 0, head = 0;
  std::deque<InFlight> in_flight;
  std::vector<cudaEvent_t> spare;

  cudaEvent_t event() {
    if (spare.empty()) {
      cudaEvent_t e = nullptr;
      CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      return e;
    }
    const cudaEvent_t e = spare.back();
    spare.pop_back();
    return e;
  }
  // Waits for (and forgets) every copy out of [begin, end); forgets the others that have finished.
  void reclaim(size_t begin, size_t end) {
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      const bool overlaps = it->begin < end && begin < it->end;
      if (overlaps) CHECK_CUDA(cudaEventSynchronize(it->done));
      const cudaError_t state = overlaps ? cudaSuccess : cudaEventQuery(it->done);
      if (state == cudaSuccess) {
        spare.push_back(it->done);
        it = in_flight.erase(it);
        continue;
      }
      if (state != cudaErrorNotReady) CHECK_CUDA(state);
      ++it;
    }
  }
  void grow(size_t need) {
    reclaim(0, capacity);  // every copy out of the old ring done
    if (buf) CHECK_CUDA(cudaFreeHost(buf));
    capacity = std::max({need, 2 * capacity, kMinRingBytes});
    CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&buf), capacity));
    head = 0;
  }
};

Ring& ring() {
  static auto* r = new Ring;  // never destroyed: the CUDA runtime may be gone at exit
  return *r;
}

}  // namespace

void stage_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  Ring& r = ring();
  const size_t need = ceil_div(bytes, kAlign) * kAlign;
  if (need > r.capacity) r.grow(need);
  if (r.head + need > r.capacity) r.head = 0;  // wrap
  const size_t at = r.head;
  r.reclaim(at, at + need);
  std::memcpy(r.buf + at, src, bytes);
  memcpy_async(dst, r.buf + at, bytes, cudaMemcpyHostToDevice, stream);
  const cudaEvent_t done = r.event();
  CHECK_CUDA(cudaEventRecord(done, stream));
  r.in_flight.push_back({at, at + need, done});
  r.head = at + need;
}

}  // namespace sftdp::cuda
