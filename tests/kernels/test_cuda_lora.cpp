// tests/kernels/test_cuda_lora.cpp — the LoRA kernels' CUDA twins (kernels/lora.h) on the CUDA table
// (the simulator in CI) against the CPU twins: forward and backward on strided column slices within
// fp32 rounding (fp32 table) or bf16 input rounding (bf16 table), the dropout mask bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "kernels/test_cuda_util.h"

namespace sftdp::test {
namespace {

struct Shape {
  int N, IC, r, OC, col, ldo;
};
const Shape kShapes[] = {{1, 8, 1, 4, 0, 4}, {37, 24, 4, 10, 6, 30}, {300, 64, 16, 48, 16, 96}, {5, 3, 2, 7, 0, 7}};

TEST(CudaLora, MatchesCpuTwinAndDropoutBitForBit) {
  for (const GemmInputs inputs : {GemmInputs::kFp32, GemmInputs::kBf16}) {
    SFTDP_REQUIRE_CUDA_GEMM(ops, inputs);
    const bool bf16 = inputs == GemmInputs::kBf16;
    for (const Shape& s : kShapes) {
      const auto x = uniform(size_t(s.N) * s.IC, 21), A = uniform(size_t(s.r) * s.IC, 22),
                 B = uniform(size_t(s.OC) * s.r, 23);
      const auto out0 = uniform(size_t(s.N) * s.ldo, 24), dout = uniform(size_t(s.N) * s.ldo, 25);
      const auto dx0 = uniform(x.size(), 26);
      const float scale = 2.0f;
      // CPU twin
      auto out = out0, dx = dx0;
      std::vector<float> u(size_t(s.N) * s.r), du(u.size()), dA(A.size()), dB(B.size());
      cpu::lora_fwd(out.data() + s.col, s.ldo, u.data(), x.data(), A.data(), B.data(), scale, s.N, s.IC, s.r, s.OC);
      cpu::lora_bwd(dx.data(), dA.data(), dB.data(), du.data(), dout.data() + s.col, s.ldo, x.data(), u.data(),
                    A.data(), B.data(), scale, s.N, s.IC, s.r, s.OC);
      // CUDA twin
      DeviceBuffer<float> g_out(*ops, out0), g_x(*ops, x), g_A(*ops, A), g_B(*ops, B), g_dout(*ops, dout),
          g_dx(*ops, dx0), g_u(*ops, u.size()), g_du(*ops, u.size()), g_dA(*ops, A.size()), g_dB(*ops, B.size());
      ops->lora_fwd(g_out.get() + s.col, s.ldo, g_u.get(), g_x.get(), g_A.get(), g_B.get(), scale, s.N, s.IC, s.r,
                    s.OC);
      ops->lora_bwd(g_dx.get(), g_dA.get(), g_dB.get(), g_du.get(), g_dout.get() + s.col, s.ldo, g_x.get(), g_u.get(),
                    g_A.get(), g_B.get(), scale, s.N, s.IC, s.r, s.OC);
      const double tol = bf16 ? 3e-2 : 1e-5;  // bf16: inputs rounded to 8 bits of mantissa
      EXPECT_LE(max_rel_diff(g_out.download(), out), tol) << "out N=" << s.N << (bf16 ? " bf16" : "");
      EXPECT_LE(max_rel_diff(g_dx.download(), dx), tol) << "dx N=" << s.N;
      EXPECT_LE(max_rel_diff(g_dA.download(), dA), tol) << "dA N=" << s.N;
      EXPECT_LE(max_rel_diff(g_dB.download(), dB), tol) << "dB N=" << s.N;
    }
    const int Bn = 2, T = 9, C = 33, N = Bn * T;
    const auto x = uniform(size_t(N) * C, 27);
    const std::vector<int64_t> rows = {5, 123456789012};
    std::vector<float> y(x.size());
    const std::vector<uint64_t> key = {99};  // read from device memory by the kernel (a graph replays the step's)
    cpu::lora_dropout(y.data(), x.data(), rows.data(), nullptr, key.data(), 0.4f, 1.0f / 0.6f, N, T, C);
    DeviceBuffer<float> g_x(*ops, x), g_y(*ops, x.size());
    DeviceBuffer<int64_t> g_rows(*ops, rows);
    DeviceBuffer<uint64_t> g_key(*ops, key);
    ops->lora_dropout(g_y.get(), g_x.get(), g_rows.get(), nullptr, g_key.get(), 0.4f, 1.0f / 0.6f, N, T, C);
    EXPECT_TRUE(bitwise_equal(g_y.download(), y));
    // With a position index (context parallelism's global positions): the CPU twin's bits.
    const std::vector<int32_t> index = {40, 3, 17, 0, 8, 99, 1, 2, 64};
    cpu::lora_dropout(y.data(), x.data(), rows.data(), index.data(), key.data(), 0.4f, 1.0f / 0.6f, N, T, C);
    DeviceBuffer<int32_t> g_index(*ops, index);
    ops->lora_dropout(g_y.get(), g_x.get(), g_rows.get(), g_index.get(), g_key.get(), 0.4f, 1.0f / 0.6f, N, T, C);
    EXPECT_TRUE(bitwise_equal(g_y.download(), y)) << "with an index";
  }
}

}  // namespace
}  // namespace sftdp::test
