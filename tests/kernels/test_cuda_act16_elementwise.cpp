// tests/kernels/test_cuda_act16_elementwise.cpp — the act16 path's elementwise and copy kernels (kernels/act16.h):
// RoPE in place on bf16 q|k|v rows (kernels/rope.h), SwiGLU forward and backward (kernels/swiglu.h) and the bf16 row
// gather/scatter of the LM head (kernels/gather.h). Each act16 kernel is its fp32 twin on the widened values with
// one rounding on store, so on one device it must equal bit for bit the fp32 kernel run on the widened inputs and
// rounded afterwards — the CUDA twins (the same kernel instantiated for bf16 storage) and the CPU twins (the fp32
// twin on widened copies) alike — at shapes that take the 16-byte vector path and the scalar one. Skips the CUDA
// half without a device or the simulator.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/act16.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

using act16::to_bf16;
using act16::to_float;

std::vector<uint16_t> bf16_values(size_t n, uint64_t seed, float lo = -3.f, float hi = 3.f) {
  const auto f = uniform(n, seed, lo, hi);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(f[i]);
  return out;
}
std::vector<float> widened(const std::vector<uint16_t>& h) {
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = to_float(h[i]);
  return out;
}
std::vector<uint16_t> rounded(const std::vector<float>& f) {
  std::vector<uint16_t> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = to_bf16(f[i]);
  return out;
}

// The tables to check: the CPU table always, the bf16 CUDA table where there is a device or the simulator.
std::vector<const Ops*> tables() {
  std::vector<const Ops*> out{&cpu_ops()};
  if (const Ops* cuda = cuda_ops(GemmInputs::kBf16)) out.push_back(cuda);
  return out;
}

struct RopeCase {
  int B, T, NH, KVH, HS;
  bool positions;
};
std::string test_name(const RopeCase& c) {
  return shape_name({{"B", c.B}, {"T", c.T}, {"NH", c.NH}, {"KVH", c.KVH}, {"HS", c.HS}}) +
         (c.positions ? "_positions" : "");
}
void PrintTo(const RopeCase& c, std::ostream* os) { *os << test_name(c); }
class Act16Rope : public ::testing::TestWithParam<RopeCase> {};

TEST_P(Act16Rope, IsTheFp32KernelOnWidenedValuesRoundedOnce) {
  const RopeCase c = GetParam();
  const size_t n = static_cast<size_t>(c.B) * c.T * (c.NH + 2 * c.KVH) * c.HS;
  const auto qkv = bf16_values(n, 81);
  std::vector<float> inv_freq(c.HS / 2);
  for (int i = 0; i < c.HS / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / c.HS));
  std::vector<int32_t> positions(static_cast<size_t>(c.B) * c.T);
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>((i * 7) % 1000);
  for (const Ops* o : tables()) {
    DeviceBuffer<float> freq(*o, inv_freq), x32(*o, widened(qkv));
    DeviceBuffer<int32_t> pos(*o, positions);
    DeviceBuffer<uint16_t> x16(*o, qkv);
    const int32_t* p = c.positions ? pos.get() : nullptr;
    for (const bool backward : {false, true}) {
      (backward ? o->rope_bwd : o->rope_fwd)(x32.get(), p, freq.get(), c.B, c.T, c.NH, c.KVH, c.HS);
      (backward ? o->act16.rope_bwd : o->act16.rope_fwd)(x16.get(), p, freq.get(), c.B, c.T, c.NH, c.KVH, c.HS);
      const auto want = rounded(x32.download());
      ASSERT_EQ(x16.download(), want) << o->name << (backward ? " rope_bwd" : " rope_fwd");
      x32.upload(widened(want));  // the next pass starts from the same values on both sides
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Act16Rope,
                         ::testing::Values(RopeCase{2, 5, 4, 2, 64, false},  // 8 pairs per vector
                                           RopeCase{1, 7, 3, 1, 12, true},   // HS/2 = 6: scalar pairs
                                           RopeCase{2, 3, 2, 2, 128, true}),
                         NameFromParam());

struct SwigluCase {
  int N, F;
};
std::string test_name(const SwigluCase& c) { return shape_name({{"N", c.N}, {"F", c.F}}); }
void PrintTo(const SwigluCase& c, std::ostream* os) { *os << test_name(c); }
class Act16Swiglu : public ::testing::TestWithParam<SwigluCase> {};

TEST_P(Act16Swiglu, IsTheFp32KernelOnWidenedValuesRoundedOnce) {
  const SwigluCase c = GetParam();
  const size_t n = static_cast<size_t>(c.N), f = static_cast<size_t>(c.F);
  const auto inp = bf16_values(n * 2 * f, 82), dout = bf16_values(n * f, 83);
  for (const Ops* o : tables()) {
    DeviceBuffer<float> inp32(*o, widened(inp)), dout32(*o, widened(dout)), out32(*o, n * f), dinp32(*o, n * 2 * f);
    DeviceBuffer<uint16_t> inp16(*o, inp), dout16(*o, dout), out16(*o, n * f), dinp16(*o, n * 2 * f);
    o->swiglu_fwd(out32.get(), inp32.get(), c.N, c.F);
    o->act16.swiglu_fwd(out16.get(), inp16.get(), c.N, c.F);
    o->swiglu_bwd(dinp32.get(), inp32.get(), dout32.get(), c.N, c.F);
    o->act16.swiglu_bwd(dinp16.get(), inp16.get(), dout16.get(), c.N, c.F);
    EXPECT_EQ(out16.download(), rounded(out32.download())) << o->name << " swiglu_fwd";
    EXPECT_EQ(dinp16.download(), rounded(dinp32.download())) << o->name << " swiglu_bwd";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Act16Swiglu,
                         ::testing::Values(SwigluCase{5, 64}, SwigluCase{3, 21}, SwigluCase{40, 136}), NameFromParam());

TEST(Act16Rows, GatherAndScatterCopyBf16RowsAsTheFp32OnesCopyFloats) {
  for (const int C : {64, 13}) {  // vectors of 8; a row that is not a whole number of them
    const int N = 12, n = 5;
    const auto rows = bf16_values(static_cast<size_t>(N) * C, 84);
    const std::vector<int32_t> idx{9, 0, 4, 11, 6};
    for (const Ops* o : tables()) {
      DeviceBuffer<uint16_t> table(*o, rows), packed(*o, static_cast<size_t>(n) * C);
      DeviceBuffer<int32_t> index(*o, idx);
      o->act16.gather_rows(packed.get(), table.get(), index.get(), n, C);
      const auto got = packed.download();
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < C; ++c) ASSERT_EQ(got[i * C + c], rows[idx[i] * C + c]) << o->name << " gather";
      DeviceBuffer<uint16_t> out(*o, std::vector<uint16_t>(static_cast<size_t>(N) * C, 0x1234));
      o->act16.scatter_rows(out.get(), packed.get(), index.get(), n, C);
      const auto scattered = out.download();
      for (int r = 0; r < N; ++r) {
        const bool listed = std::find(idx.begin(), idx.end(), r) != idx.end();
        for (int c = 0; c < C; ++c)
          ASSERT_EQ(scattered[r * C + c], listed ? rows[r * C + c] : uint16_t{0x1234}) << o->name << " scatter";
      }
    }
  }
}

}  // namespace
}  // namespace sftdp::test
