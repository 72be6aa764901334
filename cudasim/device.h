// cudasim/device.h — what nvcc gives device code, for the CUDA simulator build (SFTDP_CUDA_SIM):
// force-included (-include) before every .cu file, which is then compiled as host C++ with its maths
// unchanged. Types and runtime declarations come from NVIDIA's own headers; this file adds what they
// leave out of a host compile: the CUDA keywords, threadIdx/blockIdx/blockDim/gridDim, __syncthreads,
// the warp shuffles and votes, the device maths the kernels use (CUDA's rounding, no fast-math), the 32-bit
// integer atomics and the fences, and the launch that SFTDP_LAUNCH (kernels/cuda/common.cuh) becomes.
// Semantics: cudasim/README.md.
#pragma once

// __shared__ storage is one per block: the simulator runs one block at a time (block_runner.cpp) and
// fills this section with 0xff bytes (NaN) before each block, so a read of unwritten shared memory
// shows. Defined before NVIDIA's headers, which then keep it (host_defines.h defines it only if absent).
#ifdef __shared__
#error "cudasim/device.h must be included before any CUDA header (it defines __shared__ for them)"
#endif
#define __shared__ static __attribute__((section("sftdp_sim_shared")))
#define __launch_bounds__(...)
// kernels/<op>.h declare the sftdp::cuda:: twins for CUDA translation units (__CUDACC__ under nvcc).
#define SFTDP_CUDA_DECLS 1

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cudasim/launch.h"
#include "cudasim/tensor_core.h"  // mma, ldmatrix, cp.async: kernels/cuda/tensor_core.cuh

// ---- built-in variables: the simulated thread's, read through a per-OS-thread pointer that the
// block runner sets before it resumes each thread's fiber ----------------------------------------------
#define threadIdx (*::sftdp::sim::t_builtins.thread_idx)
#define blockIdx (*::sftdp::sim::t_builtins.block_idx)
#define blockDim (*::sftdp::sim::t_builtins.block_dim)
#define gridDim (*::sftdp::sim::t_builtins.grid_dim)
#define warpSize 32

// ---- synchronisation: real barriers and exchanges among the simulated threads ------------------------
#define __syncthreads() ::sftdp::sim::syncthreads(__FILE__, __LINE__)

namespace sftdp::sim::detail {
template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T>
T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const char* file, int line) {
  return from_bits<T>(warp_exchange(op, mask, to_bits(v), arg, width, file, line));
}
}  // namespace sftdp::sim::detail

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  return ::sftdp::sim::detail::shuffle(::sftdp::sim::WarpOp::kShflIdx, mask, var, src_lane, width, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  return ::sftdp::sim::detail::shuffle(::sftdp::sim::WarpOp::kShflXor, mask, var, lane_mask, width, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  return ::sftdp::sim::detail::shuffle(::sftdp::sim::WarpOp::kShflDown, mask, var, static_cast<int>(delta), width, file,
                                       line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  return ::sftdp::sim::detail::shuffle(::sftdp::sim::WarpOp::kShflUp, mask, var, static_cast<int>(delta), width, file,
                                       line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  (void)::sftdp::sim::warp_exchange(::sftdp::sim::WarpOp::kSyncWarp, mask, 0, 0, warpSize, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return static_cast<unsigned>(
      ::sftdp::sim::warp_exchange(::sftdp::sim::WarpOp::kBallot, mask, pred != 0, 0, warpSize, file, line));
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(
      ::sftdp::sim::warp_exchange(::sftdp::sim::WarpOp::kAll, mask, pred != 0, 0, warpSize, file, line));
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(
      ::sftdp::sim::warp_exchange(::sftdp::sim::WarpOp::kAny, mask, pred != 0, 0, warpSize, file, line));
}

// ---- device maths: CUDA's overloads, IEEE single/double operations rounded to nearest. The sim
// build compiles .cu files with -ffp-contract=off, so a·b + c is two roundings, as __fmul_rn and
// __fadd_rn promise (nvcc's default --fmad=true may contract plain expressions: a real-GPU difference
// of an ulp that the CUDA-vs-CPU tolerances cover) ---------------------------------------------------
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frcp_rn(float a) { return 1.f / a; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float rsqrtf(float a) { return 1.f / sqrtf(a); }
inline int __float_as_int(float x) { return ::sftdp::sim::detail::from_bits<int>(::sftdp::sim::detail::to_bits(x)); }
inline float __int_as_float(int x) { return ::sftdp::sim::detail::from_bits<float>(::sftdp::sim::detail::to_bits(x)); }
inline unsigned __float_as_uint(float x) {
  return ::sftdp::sim::detail::from_bits<unsigned>(::sftdp::sim::detail::to_bits(x));
}
inline float __uint_as_float(unsigned x) {
  return ::sftdp::sim::detail::from_bits<float>(::sftdp::sim::detail::to_bits(x));
}
template <class T>
T __ldg(const T* p) {
  return *p;
}
// ld.global.cg (cached in L2 only, not in the SM's L1): on a GPU what a block reads of another block's writes
// within one launch; here one memory, so a plain read.
template <class T>
T __ldcg(const T* p) {
  return *p;
}

// ---- atomics and fences. The CUDA Programming Guide's 32-bit integer read-modify-writes, each returning
// the word `old` it read: atomicAdd stores old + val, atomicInc stores (old >= val) ? 0 : old + 1,
// atomicExch stores val. Atomic here without a lock: a simulated thread runs until it reaches a sync point
// (block_runner.cpp), never between the read and the write, and one block runs at a time. Whatever order
// the threads' atomics take is the schedule's, so a result that depends on it (which thread got which `old`)
// differs between the racecheck's schedules and is reported; a "blocks done" counter whose last block alone
// acts on it does not. The address may be global or shared memory, as on a GPU.
inline int atomicAdd(int* address, int val) {
  const int old = *address;
  *address = static_cast<int>(static_cast<unsigned>(old) + static_cast<unsigned>(val));  // wraps, as on a GPU
  return old;
}
inline unsigned atomicAdd(unsigned* address, unsigned val) {
  const unsigned old = *address;
  *address = old + val;
  return old;
}
inline unsigned atomicInc(unsigned* address, unsigned val) {
  const unsigned old = *address;
  *address = old >= val ? 0u : old + 1u;
  return old;
}
inline int atomicExch(int* address, int val) {
  const int old = *address;
  *address = val;
  return old;
}
inline unsigned atomicExch(unsigned* address, unsigned val) {
  const unsigned old = *address;
  *address = val;
  return old;
}
// __threadfence orders a thread's writes before its later ones as seen by the whole device,
// __threadfence_block as seen by its block. No-ops: one thread runs at a time and one block after another,
// so every write is visible to every later read (README "What it cannot see": a missing fence passes).
inline void __threadfence() {}
inline void __threadfence_block() {}
