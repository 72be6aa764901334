// cudasim/tensor_core.cpp — the arithmetic of the warp-level matrix instructions (tensor_core.h),
// written from the PTX ISA's fragment tables ("Matrix Fragments for mma.m16n8k16 with floating point
// type"; ldmatrix's "Figure: ldmatrix fragment"), with groupID = laneid >> 2 and
// threadID_in_group = laneid % 4:
//   A (16x16, .row; 4 .b32 registers holding a0..a7, the lower-numbered element in the low half):
//       row = groupID + 8·(i ∈ {2,3,6,7}),  col = 2·threadID_in_group + (i & 1) + 8·(i >= 4)
//   B (16x8 K×N, .col; 2 registers holding b0..b3):
//       row (k) = 2·threadID_in_group + (i & 1) + 8·(i >= 2),  col (n) = groupID
//   C, D (16x8, fp32; c0..c3):  row = groupID + 8·(i >= 2),  col = 2·threadID_in_group + (i & 1)
//   ldmatrix .m8n8 .b16: lanes 8·j .. 8·j+7 give the row addresses of matrix j; lane l receives, in
//       register j, elements (row l/4, cols 2·(l%4), 2·(l%4)+1) of matrix j, or with .trans (the
//       matrix read column-major) elements (rows 2·(l%4), 2·(l%4)+1; col l/4).
#include "cudasim/tensor_core.h"

#include <cstring>

namespace sftdp::sim {
namespace {

constexpr int kLanes = 32;

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;  // bf16 is fp32's upper half: exact
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}
uint16_t half_of(uint32_t reg, int which) { return static_cast<uint16_t>(which ? reg >> 16 : reg & 0xffffu); }

}  // namespace

void mma_bf16_warp(const MmaLane* const lanes[32]) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < kLanes; ++lane) {
    const int g = lane >> 2, t = lane % 4;
    const MmaLane& L = *lanes[lane];
    for (int i = 0; i < 8; ++i) {
      const int row = g + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
      const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = bf16_bits_to_float(half_of(L.a[i / 2], i & 1));
    }
    for (int i = 0; i < 4; ++i) {
      const int k = 2 * t + (i & 1) + (i >= 2 ? 8 : 0);
      B[k][g] = bf16_bits_to_float(half_of(L.b[i / 2], i & 1));
    }
    for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = L.c[i];
  }
  float D[16][8];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double acc = C[m][n];
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[m][k]) * static_cast<double>(B[k][n]);
      D[m][n] = static_cast<float>(acc);
    }
  for (int lane = 0; lane < kLanes; ++lane) {  // every C read above: d may alias c
    const int g = lane >> 2, t = lane % 4;
    for (int i = 0; i < 4; ++i) lanes[lane]->d[i] = D[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)];
  }
}

std::string ldmatrix_warp(int num, bool trans, const LdmatrixLane* const lanes[32],
                          bool (*in_shared)(const void* p, size_t bytes)) {
  if (num != 1 && num != 2 && num != 4) return "ldmatrix: .x" + std::to_string(num) + " is not .x1, .x2 or .x4";
  uint16_t M[4][8][8];  // [matrix][row][col] as stored: row r of matrix j at lane 8·j + r's address
  for (int j = 0; j < num; ++j)
    for (int r = 0; r < 8; ++r) {
      const int lane = 8 * j + r;
      const void* row = lanes[lane]->row;
      if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
        return "ldmatrix: lane " + std::to_string(lane) + "'s row address is not 16-byte aligned";
      if (!in_shared(row, 16))
        return "ldmatrix: lane " + std::to_string(lane) + "'s row address is not 16 bytes of shared memory";
      std::memcpy(M[j][r], row, 16);
    }
  for (int lane = 0; lane < kLanes; ++lane) {
    const int q = lane / 4, p = 2 * (lane % 4);
    for (int j = 0; j < num; ++j) {
      const uint16_t lo = trans ? M[j][p][q] : M[j][q][p];
      const uint16_t hi = trans ? M[j][p + 1][q] : M[j][q][p + 1];
      lanes[lane]->out[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
  return "";
}

}  // namespace sftdp::sim
