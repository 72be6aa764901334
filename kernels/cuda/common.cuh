// kernels/cuda/common.cuh — what every sftdp CUDA file shares: the checking macros (from
// sftdp/check.h), the one stream the Ops table runs on, grow-only scratch buffers, launch-size
// helpers and deterministic warp/block sums (fixed shuffle trees and shared-memory orders; no
// atomic adds of values anywhere, so the same inputs give the same bits on every run: the one
// atomic is reduce.cuh's count of finished blocks).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/profile.cuh"
#include "sftdp/check_cuda.h"

// After every kernel launch: a bad launch configuration is reported at the launching line.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

// Before a loop over a per-thread register array: unrolled, so that every index is a compile-time
// constant (an array indexed at run time lives in local memory). Nothing in the simulator build, whose
// registers are host memory and whose host compiler would warn about the pragma.
#ifdef SFTDP_CUDA_SIM
#define SFTDP_UNROLL
#else
#define SFTDP_UNROLL _Pragma("unroll")
#endif

// kernel<<<grid, block, smem, stream>>>(args...), written so that a host compiler can build it too:
// exactly that launch under nvcc; in the CUDA simulator build (SFTDP_CUDA_SIM, cudasim) the
// simulator's launch, which runs the same kernel source on the CPU under CUDA's execution model.
// Either way inside a profile window (profile.cuh) the launch is timed on the device, tagged with the
// kernel's name as written here and its file:line, as the simulator's record tags it.
#ifdef SFTDP_CUDA_SIM
#define SFTDP_LAUNCH_ONLY(kernel, grid, block, smem, stream, ...) \
  ::sftdp::sim::launch({#kernel, __FILE__, __LINE__}, kernel, grid, block, smem, stream, __VA_ARGS__)
#else
#define SFTDP_LAUNCH_ONLY(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif
#define SFTDP_LAUNCH(kernel, grid, block, smem, stream, ...)                                           \
  do {                                                                                                 \
    const ::sftdp::cuda::profile::Scope sftdp_timed_launch_((stream), "kernel", #kernel, __FILE__, __LINE__); \
    SFTDP_LAUNCH_ONLY(kernel, grid, block, smem, stream, __VA_ARGS__);                                 \
  } while (0)

namespace sftdp::cuda {

// The stream of the CUDA Ops table: created non-blocking on first use, on the current device.
cudaStream_t stream();

// Private device buffers of the launchers, one per slot so that two ops never share one.
// Grow-only: a request larger than the slot's buffer synchronises the device (queued work may
// still read the old buffer), frees it and allocates the new size. All are freed at exit.
// Slots assume one host thread queueing on one stream (the trainer's model).
enum class Scratch : int {
  kReducePartials,    // reduce.cu: fp64 per-block partial sums
  kColumnPartials,    // reduce.cu / layernorm.cu: per-row-chunk column partial sums
  kCrossEntropyRows,  // cross_entropy.cu: per-row loss and weight (fp64)
  kGemmWorkspace,     // gemm.cu: cuBLASLt workspace
  kGemmA16,           // gemm.cu: bf16 copy of the first GEMM input
  kGemmB16,           // gemm.cu: bf16 copy of the second GEMM input
  kGemmDout16,        // matmul.cu: bf16 copy of dout, read by both backward GEMMs
  kGemmBias16,        // gemm.cu: bf16 copy of a bias that has no mirror (act16: a bf16 D's epilogue)
  kGemmEpilogue,      // gemm.cu: fp32 product of an act16 GEMM whose epilogue no algorithm takes
  kGemmBiasGrad,      // matmul.cu: the bias gradient BGRADB writes (act16::linear_bwd), then added
  kAttnDelta,         // attention/cuda_cores.cu, tensor_cores.cu: D per (b, h, t), backward
  kAttnQkv16,         // attention/tensor_cores.cu: bf16 copy of q, k, v
  kAttnDout16,        // attention/tensor_cores.cu: bf16 copy of dO, backward
  kAttnRanges,        // attention/tensor_cores.cu: (min, max) segment id per 64-row tile (of the queries)
  kAttnKv16,          // attention/tensor_cores.cu: bf16 copy of context parallelism's gathered k, v
  kAttnRangesKeys,    // attention/tensor_cores.cu: context parallelism's key tiles' segment ranges
  kEncoderBuckets,    // encoder.cu: token/position buckets built on the host
  kBlocksDone,        // reduce.cu: last_block_to_finish's counter (one unsigned, 0 between launches)
  kCount
};
void* scratch(Scratch slot, size_t bytes);
template <class T>
T* scratch_as(Scratch slot, size_t count) {
  return static_cast<T*>(scratch(slot, count * sizeof(T)));
}

constexpr int kWarp = 32;

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Streaming multiprocessors of the current device (cudaDevAttrMultiProcessorCount), asked once per device.
int sm_count();
// Threads an SM keeps resident at once on sm_80/sm_90 (64 warps): a grid of sm_count() ·
// kResidentThreadsPerSm threads is one full wave.
constexpr int kResidentThreadsPerSm = 2048;

// Blocks for a grid-stride loop over n items (n > 0): one full wave of the device (kResidentThreadsPerSm
// / block blocks per SM), fewer when n needs fewer. A grid-stride loop's results do not depend on it.
inline unsigned elementwise_blocks(size_t n, int block) {
  const size_t want = ceil_div(n, static_cast<size_t>(block));
  const size_t wave = static_cast<size_t>(sm_count()) * static_cast<size_t>(kResidentThreadsPerSm / block);
  return static_cast<unsigned>(want < wave ? want : wave);
}

// Butterfly sum over the 32 lanes: every lane gets the same bits (IEEE addition is commutative,
// so both partners of each exchange compute the same value), in an order fixed by lane ids.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Fixed order: each warp's butterfly, then warp 0 sums the warp totals by butterfly.
// `shared` holds 32 T. Contains __syncthreads: every thread of the block must call it.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_sum(total);
  return total;  // every warp computed the same butterfly over the same 32 values
}

// Maximum over the whole block (blockDim.x a multiple of 32, at most 1024), −inf where the block holds
// none; every thread gets the result. Same order and contract as block_sum: `shared` holds 32 floats,
// and every thread of the block must call it.
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? shared[lane] : -INFINITY);
}

}  // namespace sftdp::cuda
