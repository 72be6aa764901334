// bench/llmc_cuda13.h — lets llm.c's train_gpt2.cu (the anchor, 2025-05) build with CUDA 13, for
// the side-by-side bench only: pre-included by scripts/gpu_check.sh through nvcc's
// NVCC_APPEND_FLAGS="-include ...", so llm.c's own files stay as they are. CUDA 13 dropped the
// device-number form of cudaMemAdvise (its cudaMemLocation form remains); llm.c calls the old form
// once, with cudaCpuDeviceId, in the managed-memory fallback it takes only when cudaMalloc runs out
// of memory. This overload maps that form onto the new one. Nothing of sft-dp includes this file.
#pragma once
#include <cuda_runtime.h>

#if CUDART_VERSION >= 13000
inline cudaError_t cudaMemAdvise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, int device) {
  cudaMemLocation where{};
  where.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  where.id = device == cudaCpuDeviceId ? 0 : device;
  return cudaMemAdvise(ptr, bytes, advice, where);
}
#endif
