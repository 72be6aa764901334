// tests/kernels/test_cuda_kv_cache.cpp — the CUDA twins of kernels/kv_cache.h against their CPU twins
// through the two Ops tables: kv_append (bit for bit: a copy) and kv_attention_fwd over a cache of
// p = 0, 1, 127, 128 and 300 earlier positions (tile edges of the kernel's 128 keys) for Tq = 1 (a
// decoding step) and Tq = 5 (a chunk), multi-head and grouped-query heads, HS 8, 64, 130 and 256 (one
// and two accumulators per thread); outputs poisoned with NaN, two CUDA runs bitwise equal; fp32
// within 1e-5 relative (kSoftmaxRtol). Skips without a GPU or the simulator.
#include <string>
#include <vector>

#include "common/test_util.h"
#include "test_cuda_util.h"

namespace sftdp::test {
namespace {

struct Shape {
  int p, Tq, NH, KVH, HS;
};
std::string test_name(const Shape& s) {
  return shape_name({{"p", s.p}, {"Tq", s.Tq}, {"NH", s.NH}, {"KVH", s.KVH}, {"HS", s.HS}});
}
void PrintTo(const Shape& s, std::ostream* os) { *os << test_name(s); }
class CudaKvCache : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaKvCache, AppendAndAttentionMatchCpu) {
  SFTDP_REQUIRE_CUDA(ops);
  const Shape s = GetParam();
  const int maxT = s.p + s.Tq + 3;
  const size_t QKV = size_t(s.NH + 2 * s.KVH) * s.HS, KV = size_t(s.KVH) * s.HS, A = size_t(s.NH) * s.HS;
  const auto qkv = uniform(s.Tq * QKV, 21, -2.f, 2.f);
  const auto k0 = uniform(maxT * KV, 22, -2.f, 2.f), v0 = uniform(maxT * KV, 23, -2.f, 2.f);  // earlier positions
  std::vector<float> k = k0, v = v0, out(s.Tq * A);
  cpu_ops().kv_append(k.data(), v.data(), qkv.data(), s.p, s.Tq, s.NH, s.KVH, s.HS);
  cpu_ops().kv_attention_fwd(out.data(), qkv.data(), k.data(), v.data(), s.p, s.Tq, s.NH, s.KVH, s.HS);

  DeviceBuffer<float> d_qkv(*ops, qkv), d_k(*ops, maxT * KV), d_v(*ops, maxT * KV), d_out(*ops, s.Tq * A);
  const auto got = run_twice_same_bits([&] {
    d_k.upload(k0), d_v.upload(v0), d_out.poison();
    ops->kv_append(d_k.get(), d_v.get(), d_qkv.get(), s.p, s.Tq, s.NH, s.KVH, s.HS);
    ops->kv_attention_fwd(d_out.get(), d_qkv.get(), d_k.get(), d_v.get(), s.p, s.Tq, s.NH, s.KVH, s.HS);
    return std::vector<std::vector<float>>{d_k.download(), d_v.download(), d_out.download()};
  });
  EXPECT_TRUE(bitwise_equal(got[0], k)) << "k cache";
  EXPECT_TRUE(bitwise_equal(got[1], v)) << "v cache";
  EXPECT_TRUE(allclose(got[2], out, 1e-6, kSoftmaxRtol)) << "attention";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaKvCache,
                         ::testing::Values(Shape{0, 1, 2, 2, 8}, Shape{0, 5, 4, 2, 8}, Shape{1, 1, 4, 1, 64},
                                           Shape{127, 1, 2, 1, 64}, Shape{128, 5, 4, 2, 130},
                                           Shape{300, 1, 2, 2, 256}, Shape{7, 5, 6, 3, 256}),
                         NameFromParam());

}  // namespace
}  // namespace sftdp::test
