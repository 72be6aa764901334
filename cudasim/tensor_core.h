// cudasim/tensor_core.h — the warp-level matrix instructions and asynchronous copies of the PTX ISA
// that kernels/cuda/tensor_core.cuh issues as inline PTX under nvcc, as the simulator runs them:
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   (PTX ISA 9.7.14.5.8, "Matrix Fragments for
//       mma.m16n8k16 with floating point type")
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16  (PTX ISA 9.7.14.5.15)
//   cp.async.cg.shared.global [dst], [src], 16, src_size; cp.async.commit_group;
//   cp.async.wait_group N; cp.async.wait_all             (PTX ISA 9.7.9.25)
// and dynamic shared memory (extern __shared__, cudaFuncSetAttribute's opt-in above 48 KiB).
// mma and ldmatrix are warp-collective: every lane of the warp posts its operands at the same call
// site (all 32 lanes, mask 0xffffffff: .aligned), and the simulator gathers the matrices from the
// lanes' registers by the ISA's lane <-> element tables, computes, and scatters the results back
// (tensor_core.cpp). cp.async is per thread: a copy reads its source when issued and lands in shared
// memory only when the issuing thread's cp.async.wait_group / wait_all completes its group, so a
// missing wait reads stale shared memory, as it may on a GPU (block_runner.cpp).
// Semantics and what differs from hardware: cudasim/README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace sftdp::sim {

// ---- device-side entry points (called from kernels/cuda/tensor_core.cuh in the simulator build) ----
// d = a·b + c for this lane's fragments: a 4 registers of bf16 pairs (A, 16x16, row-major), b 2 (B,
// 16x8, column-major), c and d 4 fp32 (C/D, 16x8). d may alias c.
void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c, const char* file, int line);
// ldmatrix .x<num> (num 1, 2 or 4), .trans or not: `row` is the shared-memory address of the 16-byte
// row this lane supplies (lanes 0..8·num−1 are read, the others ignored); out receives num registers.
void ldmatrix(int num, bool trans, uint32_t* out, const void* row, const char* file, int line);
// cp.async.cg of 16 bytes: src_bytes (0..16) are read from src, the rest of the 16 zero-filled.
void cp_async(void* dst, const void* src, int src_bytes, const char* file, int line);
void cp_async_commit();
// cp.async.wait_group n (n >= 0): completes this thread's oldest committed groups until at most n
// are pending; n < 0: cp.async.wait_all (commits the open group, then completes every group).
void cp_async_wait(int n, const char* file, int line);
// The running block's dynamic shared memory (the launch's dynamic_smem bytes, 0xff until written).
void* dynamic_shared();

// ---- the instructions' arithmetic, on the 32 lanes' operands (tensor_core.cpp) ----
struct MmaLane {
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
  float* d;
};
// Gathers A, B, C from lanes[0..31] (PTX ISA layout), D = A·B + C with each element the fp32 rounding
// (to nearest even) of C + Σ_k A·B formed in fp64 (the 16 products of bf16 values are exact; their
// sum is exact unless their exponents span more than 37 bits), and scatters D.
void mma_bf16_warp(const MmaLane* const lanes[32]);

struct LdmatrixLane {
  const void* row;
  uint32_t* out;
};
// Checks each row address that is read (16-byte aligned, 16 bytes inside shared memory: in_shared)
// and distributes the 8x8 matrices; returns "" or what is wrong (nothing is written then).
std::string ldmatrix_warp(int num, bool trans, const LdmatrixLane* const lanes[32],
                          bool (*in_shared)(const void* p, size_t bytes));

// True when [p, p + bytes) lies in the running block's static or dynamic shared memory.
bool in_shared_memory(const void* p, size_t bytes);

// Dynamic shared memory a launch of `kernel` may ask for: 48 KiB, or what cudaFuncSetAttribute(kernel,
// cudaFuncAttributeMaxDynamicSharedMemorySize, n) opted in to (at most the device's 227 KiB).
size_t max_dynamic_shared(const void* kernel);

}  // namespace sftdp::sim
