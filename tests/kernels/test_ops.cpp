// tests/kernels/test_ops.cpp — the CPU device table: every entry set, the kernels are the
// sftdp::cpu twins, alloc is zero-filled and 64-byte aligned, copies round-trip; without CUDA
// the CUDA table is absent.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/test_util.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace sftdp::test {
namespace {

TEST(CpuOps, EveryEntryIsSet) {
  const Ops& ops = cpu_ops();
  EXPECT_STREQ(ops.name, "cpu");
  // Ops is a struct of pointers only (after name): none may be null, but the CUDA graphs' (the CPU runs every pass
  // as it comes), which must all be.
  const auto* entries = reinterpret_cast<const void* const*>(&ops);
  const size_t n = sizeof(Ops) / sizeof(void*);
  const size_t graphs_begin = offsetof(Ops, graphs) / sizeof(void*);
  const size_t graphs_end = graphs_begin + sizeof(Ops::Graphs) / sizeof(void*);
  for (size_t i = 0; i < n; ++i) {
    if (i >= graphs_begin && i < graphs_end) EXPECT_EQ(entries[i], nullptr) << "graphs entry " << i;
    else EXPECT_NE(entries[i], nullptr) << "entry " << i;
  }
  EXPECT_EQ(ops.matmul_fwd, &cpu::matmul_fwd);
  EXPECT_EQ(ops.cross_entropy_fwd_bwd, &cpu::cross_entropy_fwd_bwd);
}

TEST(CpuOps, AllocIsZeroedAlignedAndCopiesRoundTrip) {
  const Ops& ops = cpu_ops();
  for (size_t bytes : {size_t(0), size_t(1), size_t(100), size_t(1) << 20}) {
    auto* p = static_cast<unsigned char*>(ops.alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << bytes;
    ops.free(p);
  }
  const std::vector<float> host = uniform(1000, 241);
  auto* a = static_cast<float*>(ops.alloc(host.size() * sizeof(float)));
  auto* b = static_cast<float*>(ops.alloc(host.size() * sizeof(float)));
  ops.to_device(a, host.data(), host.size() * sizeof(float));
  ops.copy(b, a, host.size() * sizeof(float));
  ops.synchronize();
  std::vector<float> back(host.size());
  ops.to_host(back.data(), b, back.size() * sizeof(float));
  EXPECT_TRUE(bitwise_equal(back, host));
  ops.zero(b, back.size() * sizeof(float));
  ops.to_host(back.data(), b, back.size() * sizeof(float));
  EXPECT_TRUE(bitwise_equal(back, std::vector<float>(host.size(), 0.f)));
  ops.free(a);
  ops.free(b);
}

TEST(CpuOps, HasNoStream) { EXPECT_EQ(cpu_ops().stream(), nullptr); }

#ifndef SFTDP_WITH_CUDA
TEST(CpuOps, NoCudaTableInCpuOnlyBuild) {
  EXPECT_EQ(cuda_ops(GemmInputs::kFp32), nullptr);
  EXPECT_EQ(cuda_ops(GemmInputs::kBf16), nullptr);
  EXPECT_FALSE(cuda_device_available());
}
#else
// A GPU build on a machine without a device: no table either (the CUDA tests then skip).
TEST(CpuOps, CudaTablesExactlyWhenADeviceIsUsable) {
  for (GemmInputs inputs : {GemmInputs::kFp32, GemmInputs::kBf16})
    EXPECT_EQ(cuda_ops(inputs) != nullptr, cuda_device_available());
}
#endif

}  // namespace
}  // namespace sftdp::test
