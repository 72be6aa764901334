// kernels/cuda/staging.cuh — host-to-device copies through a pinned staging ring (staging.cu): queued, never
// waited for; src may be reused as soon as the call returns.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace sftdp::cuda {
void stage_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
}  // namespace sftdp::cuda
