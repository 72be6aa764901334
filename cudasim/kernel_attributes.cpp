// cudasim/kernel_attributes.cpp — cudaFuncSetAttribute, as far as kernels use it: the opt-in to
// more than 48 KiB of dynamic shared memory per block (cudaFuncAttributeMaxDynamicSharedMemorySize, at
// most the device's sharedMemPerBlockOptin, 227 KiB on sm_90), which launch.cpp checks every launch
// against, and the shared-memory carveout preference (accepted; it changes nothing here).
#include <map>
#include <mutex>

#include "cudasim/runtime.h"
#include "cudasim/tensor_core.h"

namespace sftdp::sim {
namespace {

constexpr size_t kDefaultDynamicShared = 48 << 10;
constexpr int kOptinDynamicShared = 227 << 10;  // cudaGetDeviceProperties' sharedMemPerBlockOptin

struct OptIns {
  std::mutex mu;
  std::map<const void*, size_t> bytes;  // per kernel (its host address)
};
OptIns& opt_ins() {
  static auto* table = new OptIns;
  return *table;
}

}  // namespace

size_t max_dynamic_shared(const void* kernel) {
  OptIns& t = opt_ins();
  std::lock_guard<std::mutex> lock(t.mu);
  const auto it = t.bytes.find(kernel);
  return it == t.bytes.end() ? kDefaultDynamicShared : it->second;
}

}  // namespace sftdp::sim

using sftdp::sim::fail;

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize: {
      if (value < 0 || value > sftdp::sim::kOptinDynamicShared) {
        sftdp::sim::report("launch", "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(value) +
                                         "): at most " + std::to_string(sftdp::sim::kOptinDynamicShared) +
                                         " bytes (sharedMemPerBlockOptin)");
        return fail(cudaErrorInvalidValue);
      }
      auto& t = sftdp::sim::opt_ins();
      std::lock_guard<std::mutex> lock(t.mu);
      t.bytes[func] = static_cast<size_t>(value);
      return cudaSuccess;
    }
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
    default:
      return fail(cudaErrorInvalidValue);  // not simulated: refused, never ignored
  }
}
