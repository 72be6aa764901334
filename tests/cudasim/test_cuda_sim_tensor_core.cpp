// tests/cudasim/test_cuda_sim_tensor_core.cpp — the simulator's tensor-core instructions against the PTX
// ISA, not against how sft-dp's kernels use them: mma.sync.m16n8k16 (bf16 in, fp32 accumulate) against
// a plain matrix product and against entries of the ISA's fragment figures typed in by hand; ldmatrix
// x1/x2/x4 with and without .trans against the same figures, on rows that are not contiguous; cp.async
// lands only at its group's wait (a missing or too-early wait reads stale shared memory), zero-fills,
// and a thread that exits with copies in flight is reported; dynamic shared memory above 48 KiB needs
// cudaFuncSetAttribute's opt-in. Planted bugs: a fragment built on the wrong lanes, a missing wait, a
// warp instruction some lane skips, an ldmatrix row outside shared memory — each must be caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace sftdp::test {
namespace {

using cuda::tc::pack_bf16x2;

// ---- the ISA's tables, written out independently of cudasim (groupID g, threadID_in_group t) ----
struct RowCol {
  int row, col;
};
// A element i (0..7) of lane l: "row = g for a_i with i < 2 or 4 <= i < 6, else g + 8;
// col = 2t + (i & 1) for i < 4, else 2t + (i & 1) + 8".
RowCol a_elem(int l, int i) {
  const int g = l >> 2, t = l % 4;
  return {(i < 2 || (i >= 4 && i < 6)) ? g : g + 8, 2 * t + (i & 1) + (i < 4 ? 0 : 8)};
}
// B element i (0..3): "row = 2t + (i & 1) for i < 2, else 2t + (i & 1) + 8; col = g".
RowCol b_elem(int l, int i) { return {2 * (l % 4) + (i & 1) + (i < 2 ? 0 : 8), l >> 2}; }
// C/D element i (0..3): "row = g for i < 2, else g + 8; col = 2t + (i & 1)".
RowCol c_elem(int l, int i) { return {i < 2 ? l >> 2 : (l >> 2) + 8, 2 * (l % 4) + (i & 1)}; }

float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// ---- kernels ---------------------------------------------------------------------------------------
// One warp: D (16x8) = A (16x16) · B (16x8) + C, every matrix row-major in global memory; each lane
// builds its fragments by the table above. wrong_lane: lanes 0 and 1 build a[1] from each other's
// elements (a fragment on the wrong lane: the planted bug).
__global__ void mma_kernel(float* D, const float* A, const float* B, const float* C, bool wrong_lane) {
  const int l = static_cast<int>(threadIdx.x);
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (int r = 0; r < 4; ++r) {
    const int src = wrong_lane && r == 1 && l < 2 ? 1 - l : l;
    const RowCol lo = a_elem(src, 2 * r), hi = a_elem(src, 2 * r + 1);
    a[r] = pack_bf16x2(A[lo.row * 16 + lo.col], A[hi.row * 16 + hi.col]);
  }
  for (int r = 0; r < 2; ++r) {
    const RowCol lo = b_elem(l, 2 * r), hi = b_elem(l, 2 * r + 1);
    b[r] = pack_bf16x2(B[lo.row * 8 + lo.col], B[hi.row * 8 + hi.col]);
  }
  for (int i = 0; i < 4; ++i) c[i] = C[c_elem(l, i).row * 8 + c_elem(l, i).col];
  cuda::tc::mma_bf16_16816(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[c_elem(l, i).row * 8 + c_elem(l, i).col] = d[i];
}

// What lane l holds after an mma whose A = B = 0 and C(m, n) = 100·m + n: its D fragment, verbatim.
__global__ void c_layout_kernel(float* out, const float* C) {
  const int l = static_cast<int>(threadIdx.x);
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) c[i] = C[c_elem(l, i).row * 8 + c_elem(l, i).col];
  cuda::tc::mma_bf16_16816(d, a, b, c);
  for (int i = 0; i < 4; ++i) out[l * 4 + i] = d[i];
}

// ldmatrix of kNum 8x8 matrices of 16-bit values from (dynamic: 4·24·8 uint16) shared memory, rows
// placed 3 rows apart in a 24-row buffer (rows need not be contiguous): row r of matrix j holds
// j·64 + r·8 + c in column c. out[lane·4 + j] = register j of the lane. (Dynamic, not a static
// __shared__ array: gcc ignores the section attribute of statics in function templates, see
// cudasim/README.md.)
template <int kNum, bool kTrans>
__global__ void ldmatrix_kernel(uint32_t* out) {
  SFTDP_DYNAMIC_SHARED(uint16_t, s);
  const auto at = [s](int j, int row) { return s + (j * 24 + row) * 8; };
  const int l = static_cast<int>(threadIdx.x);
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < 8; ++r) at(j, 3 * r)[l % 8] = static_cast<uint16_t>(j * 64 + r * 8 + l % 8);
  __syncwarp();
  uint32_t reg[kNum];
  const int j = l / 8 < kNum ? l / 8 : 0;  // lanes past 8·kNum give addresses that are ignored
  cuda::tc::ldmatrix<kNum, kTrans>(reg, at(j, 3 * (l % 8)));
  for (int k = 0; k < 4; ++k) out[l * 4 + k] = k < kNum ? reg[k] : 0xdeadbeefu;
}

// ldmatrix whose row is global memory (misplaced = true) or 8 bytes off alignment (else).
__global__ void ldmatrix_bad_kernel(uint32_t* out, const uint16_t* global, bool misplaced) {
  __shared__ __align__(16) uint16_t s[8][16];
  const int l = static_cast<int>(threadIdx.x);
  for (int c = 0; c < 16; ++c) s[l % 8][c] = static_cast<uint16_t>(c);
  __syncwarp();
  uint32_t reg[1];
  cuda::tc::ldmatrix<1, false>(reg, misplaced ? static_cast<const void*>(global + 8 * (l % 8)) : &s[l % 8][4]);
  out[l] = reg[0];
}

// mma where lane 31 has exited (planted bug: .aligned needs every lane).
__global__ void mma_lane_exited_kernel(float* out) {
  if (threadIdx.x == 31) return;
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4] = {1, 1, 1, 1}, d[4];
  cuda::tc::mma_bf16_16816(d, a, b, c);
  out[threadIdx.x] = d[0];
}

// A 64-float tile copied by cp.async (16 threads × 16 bytes) from src, then read by other threads.
// mode 0: commit, wait_group 0, barrier; 1: no wait at all (planted bug), then wait at the end so no copy
// is left in flight; 2: two groups (src, then src2 into a second tile), wait_group 1: the first has
// landed, the second not yet; 3: zero-fill (src-size 0) for the upper half.
__global__ void cp_async_kernel(float* out, const float* src, const float* src2, int mode) {
  __shared__ __align__(16) float tile[2][64];
  const int t = static_cast<int>(threadIdx.x);  // 32 threads
  tile[0][t] = -1.f, tile[0][t + 32] = -1.f, tile[1][t] = -1.f, tile[1][t + 32] = -1.f;
  __syncthreads();
  if (t < 16) {
    cuda::tc::cp_async_16(&tile[0][4 * t], src + 4 * t, mode != 3 || t < 8);
    cuda::tc::cp_async_commit();
    if (mode == 2) {
      cuda::tc::cp_async_16(&tile[1][4 * t], src2 + 4 * t, true);
      cuda::tc::cp_async_commit();
    }
  }
  if (mode == 0 || mode == 3) cuda::tc::cp_async_wait<0>();
  if (mode == 2) cuda::tc::cp_async_wait<1>();
  __syncthreads();
  out[t] = tile[0][63 - t];  // other threads' copies
  out[32 + t] = mode == 2 ? tile[1][63 - t] : tile[0][31 - t];
  __syncthreads();
  if (mode == 1 || mode == 2) cuda::tc::cp_async_wait<0>();  // nothing left in flight at exit
}

__global__ void cp_async_never_waited_kernel(const float* src) {
  __shared__ __align__(16) float tile[64];
  if (threadIdx.x < 16) cuda::tc::cp_async_16(&tile[4 * threadIdx.x], src + 4 * threadIdx.x, true);
}

// Every byte of `bytes` of dynamic shared memory written, then read back reversed by another thread.
__global__ void dynamic_shared_kernel(uint32_t* out, int words) {
  SFTDP_DYNAMIC_SHARED(uint32_t, s);
  for (int i = static_cast<int>(threadIdx.x); i < words; i += static_cast<int>(blockDim.x)) s[i] = 7u * i;
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < words; i += static_cast<int>(blockDim.x)) out[i] = s[words - 1 - i];
}

class SimTensorCore : public SimTest {
 protected:
  // A (16x16) and B (16x8) bf16-exact, C (16x8) any fp32: D from the simulated mma.
  std::vector<float> mma(const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& C,
                         bool wrong_lane) {
    float* d = device<float>(128);
    SFTDP_LAUNCH(mma_kernel, 1, 32, 0, stream_, d, device_from(A), device_from(B), device_from(C), wrong_lane);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return host(d, 128);
  }
};

// D(m, n) = C(m, n) + Σ_k A(m, k)·B(k, n), in fp64 then rounded to fp32 once (what the simulator promises;
// bf16 products are exact).
std::vector<float> product(const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& C) {
  std::vector<float> D(128);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double acc = C[m * 8 + n];
      for (int k = 0; k < 16; ++k) acc += double(A[m * 16 + k]) * double(B[k * 8 + n]);
      D[m * 8 + n] = static_cast<float>(acc);
    }
  return D;
}

TEST_F(SimTensorCore, MmaIsThePlainMatrixProductOfItsFragments) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> A(256), B(128), C(128);
  for (float& x : A) x = round_bf16(u(rng));
  for (float& x : B) x = round_bf16(u(rng));
  for (float& x : C) x = u(rng);
  const auto got = mma(A, B, C, false), want = product(A, B, C);
  for (int i = 0; i < 128; ++i) ASSERT_EQ(got[i], want[i]) << "D(" << i / 8 << "," << i % 8 << ")";
  // and, independently of the rounding model, the fp32 product to fp32 accuracy
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float f = C[m * 8 + n];
      for (int k = 0; k < 16; ++k) f += A[m * 16 + k] * B[k * 8 + n];
      EXPECT_NEAR(got[m * 8 + n], f, 1e-5f * 16);
    }
}

TEST_F(SimTensorCore, AFragmentOnTheWrongLaneGivesAWrongProduct) {  // the planted bug is caught
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> A(256), B(128), C(128, 0.f);
  for (float& x : A) x = round_bf16(u(rng));
  for (float& x : B) x = round_bf16(u(rng));
  const auto got = mma(A, B, C, true), want = product(A, B, C);
  int wrong = 0;
  for (int i = 0; i < 128; ++i) wrong += got[i] != want[i];
  EXPECT_GT(wrong, 0);
}

// The ISA's figure for the accumulator, lane by lane: lane 0 holds (0,0) (0,1) (8,0) (8,1); lane 5
// (g 1, t 1) (1,2) (1,3) (9,2) (9,3); lane 31 (7,6) (7,7) (15,6) (15,7).
TEST_F(SimTensorCore, AccumulatorFragmentsFollowTheIsaFigure) {
  std::vector<float> C(128);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) C[m * 8 + n] = 100.f * m + n;
  float* out = device<float>(128);
  SFTDP_LAUNCH(c_layout_kernel, 1, 32, 0, stream_, out, device_from(C));
  const auto got = host(out, 128);
  const float lane0[4] = {0, 1, 800, 801}, lane5[4] = {102, 103, 902, 903}, lane31[4] = {706, 707, 1506, 1507};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[0 * 4 + i], lane0[i]);
    EXPECT_EQ(got[5 * 4 + i], lane5[i]);
    EXPECT_EQ(got[31 * 4 + i], lane31[i]);
  }
}

// The tables above against the ISA's A and B figures at a few lanes, so that a mistake shared by the
// test's table and the simulator cannot pass: lane 5 holds A (1,2) (1,3) | (9,2) (9,3) | (1,10) (1,11)
// | (9,10) (9,11) and B (k 2,3; n 1) | (k 10,11; n 1); lane 30 A (7,4) ... (15,12) (15,13).
TEST(SimTensorCoreTables, MatchTheIsaFigures) {
  const RowCol a5[8] = {{1, 2}, {1, 3}, {9, 2}, {9, 3}, {1, 10}, {1, 11}, {9, 10}, {9, 11}};
  const RowCol a30[8] = {{7, 4}, {7, 5}, {15, 4}, {15, 5}, {7, 12}, {7, 13}, {15, 12}, {15, 13}};
  const RowCol b5[4] = {{2, 1}, {3, 1}, {10, 1}, {11, 1}};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(a_elem(5, i).row, a5[i].row);
    EXPECT_EQ(a_elem(5, i).col, a5[i].col);
    EXPECT_EQ(a_elem(30, i).row, a30[i].row);
    EXPECT_EQ(a_elem(30, i).col, a30[i].col);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(b_elem(5, i).row, b5[i].row);
    EXPECT_EQ(b_elem(5, i).col, b5[i].col);
  }
}

// ldmatrix: lane l receives row l/4, columns 2·(l%4) and +1 of each matrix (the ISA's figure: "a group of
// four threads loads an entire row"); .trans: rows 2·(l%4), +1 of column l/4.
template <int kNum, bool kTrans>
void check_ldmatrix(const std::vector<uint32_t>& got) {
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 4; ++j) {
      const uint32_t reg = got[l * 4 + j];
      if (j >= kNum) {
        EXPECT_EQ(reg, 0xdeadbeefu);
        continue;
      }
      const int q = l / 4, p = 2 * (l % 4);
      const auto elem = [j](int row, int col) { return static_cast<uint32_t>(j * 64 + row * 8 + col); };
      const uint32_t lo = kTrans ? elem(p, q) : elem(q, p), hi = kTrans ? elem(p + 1, q) : elem(q, p + 1);
      EXPECT_EQ(reg, lo | hi << 16) << "lane " << l << " register " << j;
    }
  // the figure at lane 6 (row 1, columns 4 and 5), matrix 0: elements 12 and 13; transposed: 33 and 41
  EXPECT_EQ(got[6 * 4], kTrans ? (33u | 41u << 16) : (12u | 13u << 16));
}

TEST_F(SimTensorCore, LdmatrixX1X2X4WithAndWithoutTransFollowTheIsa) {
  uint32_t* out = device<uint32_t>(128);
  constexpr size_t kBytes = 4 * 24 * 8 * sizeof(uint16_t);
  SFTDP_LAUNCH((ldmatrix_kernel<1, false>), 1, 32, kBytes, stream_, out);
  check_ldmatrix<1, false>(host(out, 128));
  SFTDP_LAUNCH((ldmatrix_kernel<2, false>), 1, 32, kBytes, stream_, out);
  check_ldmatrix<2, false>(host(out, 128));
  SFTDP_LAUNCH((ldmatrix_kernel<4, false>), 1, 32, kBytes, stream_, out);
  check_ldmatrix<4, false>(host(out, 128));
  SFTDP_LAUNCH((ldmatrix_kernel<1, true>), 1, 32, kBytes, stream_, out);
  check_ldmatrix<1, true>(host(out, 128));
  SFTDP_LAUNCH((ldmatrix_kernel<2, true>), 1, 32, kBytes, stream_, out);
  check_ldmatrix<2, true>(host(out, 128));
  SFTDP_LAUNCH((ldmatrix_kernel<4, true>), 1, 32, kBytes, stream_, out);
  check_ldmatrix<4, true>(host(out, 128));
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimTensorCore, LdmatrixOutsideSharedMemoryOrMisalignedIsAnError) {
  uint32_t* out = device<uint32_t>(32);
  const uint16_t* global = device_from(std::vector<uint16_t>(64, 1));
  SFTDP_LAUNCH(ldmatrix_bad_kernel, 1, 32, 0, stream_, out, global, true);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "ldmatrix_bad_kernel", "not 16 bytes of shared memory");
  sim::clear_sticky_error();
  sim::clear_reports();
  SFTDP_LAUNCH(ldmatrix_bad_kernel, 1, 32, 0, stream_, out, global, false);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "ldmatrix_bad_kernel", "not 16-byte aligned");
}

TEST_F(SimTensorCore, MmaWithAnExitedLaneIsAnError) {
  float* out = device<float>(32);
  SFTDP_LAUNCH(mma_lane_exited_kernel, 1, 32, 0, stream_, out);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "mma_lane_exited_kernel", "lane 31", "has exited");
}

TEST_F(SimTensorCore, MmaInAPartialWarpIsAnError) {
  float* out = device<float>(32);
  SFTDP_LAUNCH(c_layout_kernel, 1, 16, 0, stream_, out, device_from(std::vector<float>(128, 0.f)));
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "c_layout_kernel", "all 32 lanes of a full warp");
}

class SimCpAsync : public SimTensorCore {
 protected:
  std::vector<float> run(int mode) {
    std::vector<float> a(64), b(64);
    for (int i = 0; i < 64; ++i) a[i] = static_cast<float>(i), b[i] = 1000.f + i;
    float* out = device<float>(64);
    SFTDP_LAUNCH(cp_async_kernel, 1, 32, 0, stream_, out, device_from(a), device_from(b), mode);
    return host(out, 64);
  }
};

TEST_F(SimCpAsync, CopiesLandAtTheirWait) {
  const auto got = run(0);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(got[t], static_cast<float>(63 - t));
    EXPECT_EQ(got[32 + t], static_cast<float>(31 - t));
  }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(SimCpAsync, AMissingWaitReadsStaleSharedMemory) {  // the planted bug is visible
  const auto got = run(1);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(got[t], -1.f) << t;
}

TEST_F(SimCpAsync, WaitGroupOneLeavesTheNewestGroupInFlight) {
  const auto got = run(2);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(got[t], static_cast<float>(63 - t));  // group 1 landed
    EXPECT_EQ(got[32 + t], -1.f);                   // group 2 not yet
  }
}

TEST_F(SimCpAsync, SourceSizeZeroFillsWithZeros) {
  const auto got = run(3);  // threads 8..15 copied nothing: tile[32..63] are zeros, tile[0..31] the source
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(got[t], 0.f) << t;
    EXPECT_EQ(got[32 + t], static_cast<float>(31 - t)) << t;
  }
}

TEST_F(SimCpAsync, AThreadExitingWithCopiesInFlightIsAnError) {
  const float* src = device_from(std::vector<float>(64, 1.f));
  SFTDP_LAUNCH(cp_async_never_waited_kernel, 1, 32, 0, stream_, src);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("synccheck", "cp_async_never_waited_kernel", "never waited for");
}

TEST_F(SimTensorCore, DynamicSharedMemoryAbove48KiBNeedsTheOptIn) {
  constexpr int kWords = 96 << 8;  // 96 KiB
  uint32_t* out = device<uint32_t>(kWords);
  SFTDP_LAUNCH(dynamic_shared_kernel, 1, 256, kWords * 4, stream_, out, kWords);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_REPORT("launch", "dynamic_shared_kernel", "98304 bytes of dynamic shared memory", "opt-in");
  ASSERT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void*>(dynamic_shared_kernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kWords * 4),
            cudaSuccess);
  SFTDP_LAUNCH(dynamic_shared_kernel, 1, 256, kWords * 4, stream_, out, kWords);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto got = host(out, kWords);
  for (int i = 0; i < kWords; ++i) ASSERT_EQ(got[i], 7u * (kWords - 1 - i)) << i;
  EXPECT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void*>(dynamic_shared_kernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

}  // namespace
}  // namespace sftdp::test
