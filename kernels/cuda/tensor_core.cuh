// kernels/cuda/tensor_core.cuh — the device helpers of the tensor-core kernels: mma.sync (m16n8k16,
// bf16 in, fp32 accumulate), ldmatrix (x1/x2/x4, .trans), cp.async (16 bytes, zero-fill, commit and
// wait groups), bf16 pairs, and dynamic shared memory. Under nvcc each is one inline PTX instruction
// (PTX ISA: mma, ldmatrix, cp.async); in the CUDA simulator build the simulator's own implementation
// of the same instruction (cudasim/tensor_core.h), which gathers the warp's fragments by the
// ISA's lane tables and lets an un-waited cp.async read stale shared memory.
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16", groupID g = lane/4, t = lane%4):
//   A 16x16 row-major: 4 registers a[0..3] of bf16 pairs: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
//   B 16x8 (k × n, "col"): b[0], b[1]: (k = 2t..2t+1, n = g), (k = 2t+8..2t+9, n = g)
//   C/D 16x8 fp32: c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace sftdp::cuda::tc {

// In the simulator build each helper takes its caller's source line (a warp instruction is matched
// across lanes by its call site, as __shfl_sync's are); under nvcc nothing is added.
#ifdef SFTDP_CUDA_SIM
#define SFTDP_TC_SITE_ONLY const char *file = __builtin_FILE(), int line = __builtin_LINE()
#define SFTDP_TC_SITE , SFTDP_TC_SITE_ONLY
#else
#define SFTDP_TC_SITE_ONLY
#define SFTDP_TC_SITE
#endif

// Two floats rounded to bf16 (to nearest even) in one register: lo in the low half (the lower-numbered
// fragment element), hi in the high half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo: the low half (one cvt.rn.bf16x2.f32)
  return static_cast<uint32_t>(__bfloat16_as_ushort(v.x)) | (static_cast<uint32_t>(__bfloat16_as_ushort(v.y)) << 16);
}

// d = a·b + c (d may be c).
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                               const float c[4] SFTDP_TC_SITE) {
#ifdef SFTDP_CUDA_SIM
  ::sftdp::sim::mma_m16n8k16_bf16(d, a, b, c, file, line);
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// ldmatrix .m8n8 .b16: `row` is the shared-memory address of the 16-byte row this lane supplies (lane
// 8j + r: row r of matrix j); r[j] receives this lane's fragment of matrix j. kTrans reads each matrix
// column-major (its transpose).
template <int kNum, bool kTrans>
__device__ __forceinline__ void ldmatrix(uint32_t r[kNum], const void* row SFTDP_TC_SITE) {
  static_assert(kNum == 1 || kNum == 2 || kNum == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef SFTDP_CUDA_SIM
  ::sftdp::sim::ldmatrix(kNum, kTrans, r, row, file, line);
#elif defined(__CUDA_ARCH__)
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kNum == 4 && kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
  else if constexpr (kNum == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
  else if constexpr (kNum == 2 && kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s)
                 : "memory");
  else if constexpr (kNum == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s)
                 : "memory");
  else if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s) : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s) : "memory");
#endif
}

// cp.async.cg of 16 bytes from global src to shared dst (both 16-byte aligned); valid = false reads
// nothing and zero-fills the 16 bytes (src must still be a valid address of the same allocation).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid SFTDP_TC_SITE) {
#ifdef SFTDP_CUDA_SIM
  ::sftdp::sim::cp_async(dst, src, valid ? 16 : 0, file, line);
#elif defined(__CUDA_ARCH__)
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
#endif
}

// Closes the group of copies this thread issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef SFTDP_CUDA_SIM
  ::sftdp::sim::cp_async_commit();
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight. Other threads'
// copies are visible only after a __syncthreads that follows their own wait.
template <int kPending>
__device__ __forceinline__ void cp_async_wait(SFTDP_TC_SITE_ONLY) {
#ifdef SFTDP_CUDA_SIM
  ::sftdp::sim::cp_async_wait(kPending, file, line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

#undef SFTDP_TC_SITE
#undef SFTDP_TC_SITE_ONLY

}  // namespace sftdp::cuda::tc

// The block's dynamic shared memory as a T*: extern __shared__ under nvcc, the simulator's per-block
// buffer in its build. Launches above 48 KiB need cudaFuncSetAttribute's opt-in first.
#ifdef SFTDP_CUDA_SIM
#define SFTDP_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::sftdp::sim::dynamic_shared())
#else
#define SFTDP_DYNAMIC_SHARED(T, name)                         \
  extern __shared__ __align__(16) unsigned char name##_raw[]; \
  T* name = reinterpret_cast<T*>(name##_raw)
#endif
