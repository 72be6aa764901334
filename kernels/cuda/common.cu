// kernels/cuda/common.cu — the Ops table's stream, the launchers' grow-only scratch buffers and the SM count
// grids are sized by (see common.cuh). Buffers are released by a static destructor at exit, errors ignored
// there because the CUDA runtime may already be shutting down.
#include <array>
#include <atomic>
#include <string>

#include "kernels/cuda/common.cuh"

namespace sftdp::cuda {
namespace {

struct ScratchBuffers {
  std::array<void*, static_cast<size_t>(Scratch::kCount)> ptr{};
  std::array<size_t, static_cast<size_t>(Scratch::kCount)> bytes{};
  ~ScratchBuffers() {
    for (void* p : ptr)
      if (p) (void)cudaFree(p);  // at exit: the driver reclaims everything anyway
  }
};

ScratchBuffers& buffers() {
  static ScratchBuffers b;
  return b;
}

}  // namespace

cudaStream_t stream() {
  // Non-blocking: no implicit ordering with the legacy default stream, so every memory entry of
  // the Ops table is queued on this stream explicitly (ops.cu).
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

int sm_count() {
  constexpr int kDevices = 64;  // cached per device ordinal; beyond that, asked every time
  static std::array<std::atomic<int>, kDevices> cached{};
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  if (device >= 0 && device < kDevices)
    if (const int n = cached[device].load(std::memory_order_relaxed); n > 0) return n;
  int n = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  SFTDP_ASSERT(n > 0, "cudaDevAttrMultiProcessorCount: no multiprocessor on device " + std::to_string(device));
  if (device >= 0 && device < kDevices) cached[device].store(n, std::memory_order_relaxed);
  return n;
}

void* scratch(Scratch slot, size_t bytes) {
  const auto i = static_cast<size_t>(slot);
  SFTDP_ASSERT(i < static_cast<size_t>(Scratch::kCount), "scratch: slot out of range");
  auto& b = buffers();
  if (bytes == 0) bytes = 1;
  if (bytes <= b.bytes[i]) return b.ptr[i];
  if (b.ptr[i]) {
    // Work queued earlier may still read the old buffer.
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaFree(b.ptr[i]));
    b.ptr[i] = nullptr;
    b.bytes[i] = 0;
  }
  // Round up to 1 MiB steps so slowly growing requests do not reallocate every call.
  const size_t rounded = ceil_div(bytes, size_t{1} << 20) << 20;
  CHECK_CUDA(cudaMalloc(&b.ptr[i], rounded));
  b.bytes[i] = rounded;
  return b.ptr[i];
}

}  // namespace sftdp::cuda
