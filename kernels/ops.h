// kernels/ops.h — the one table through which model and optimiser code reach a device
// (ggml's backend vtable, in miniature). Filled once per device in kernels/cpu/ops.cpp and
// kernels/cuda/ops.cu and picked once from `hardware:`. Every pointer argument lives in that
// device's memory ("device memory" is host memory for the CPU table). Entries have the
// signatures of the sftdp::cpu:: twins; the CUDA table runs them on its current stream.
// All entries are required unless marked (optional).
#pragma once
#include <cstddef>
#include <cstdint>

namespace sftdp {

struct Ops {
  const char* name;  // "cpu" | "cuda"
  // --- memory ---
  void* (*alloc)(size_t bytes);  // zero-filled; throws / dies on failure
  void (*free)(void* p);
  void (*zero)(void* p, size_t bytes);
  void (*to_device)(void* dst, const void* src, size_t bytes);  // host -> device
  void (*to_host)(void* dst, const void* src, size_t bytes);    // device -> host
  void (*copy)(void* dst, const void* src, size_t bytes);       // device -> device
  void (*synchronize)();                                        // wait for queued work
  // --- kernels (see kernels/<op>.h for shapes and the accumulation contract) ---
  void (*encoder_fwd)(float*, const int32_t*, const int32_t*, const float*, const float*, int, int, int);
  void (*encoder_bwd)(float*, float*, const float*, const int32_t*, const int32_t*, int, int, int);
  void (*layernorm_fwd)(float*, float*, float*, const float*, const float*, const float*, int, int);
  void (*layernorm_bwd)(float*, float*, float*, const float*, const float*, const float*,
                        const float*, const float*, int, int);
  void (*matmul_fwd)(float*, const float*, const float*, const float*, int, int, int);
  void (*matmul_bwd)(float*, float*, float*, const float*, const float*, const float*, int, int, int);
  void (*attention_fwd)(float*, float*, const float*, const int32_t*, int, int, int, int);
  void (*attention_bwd)(float*, float*, const float*, const float*, const float*, int, int, int, int);
  void (*gelu_fwd)(float*, const float*, size_t);
  void (*gelu_bwd)(float*, const float*, const float*, size_t);
  void (*residual_fwd)(float*, const float*, const float*, size_t);
  void (*cross_entropy_fwd_bwd)(float*, float*, const float*, const int32_t*, const float*, int, int);
  void (*adamw_update)(float*, float*, float*, const float*, size_t, size_t, float, float, float,
                       float, float, int, float);
  void (*sum_squares)(float*, const float*, size_t);
};

const Ops& cpu_ops();
// The CUDA table, or nullptr when built without CUDA or when no CUDA device is usable.
const Ops* cuda_ops();
// True when built with CUDA and cudaGetDeviceCount reports a device ("driver insufficient" = no).
bool cuda_device_available();
// GPU builds only: picks this rank's device. With CUDA_VISIBLE_DEVICES narrowed to one device
// (srun --gpus-per-task) that device; else device local_rank % device_count. Returns its index.
int cuda_select_device(int local_rank);
// GPU builds only: GEMM inputs in bf16 (fp32 accumulation and outputs) when true; fp32 otherwise.
void cuda_set_bf16_gemm(bool on);

}  // namespace sftdp
