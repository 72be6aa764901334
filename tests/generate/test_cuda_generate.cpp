// tests/generate/test_cuda_generate.cpp — generation on the GPU is the CPU's: the same Generator code
// path on the CUDA Ops table gives, for every family (generate_fixtures.h), a prefill's and each
// decoding step's logits within 1e-5 of the largest logit of the CPU table's, and the same greedy
// tokens. Skips without a GPU or the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "generate/generate_fixtures.h"
#include "kernels/test_cuda_util.h"

namespace sftdp::test {
namespace {

class CudaGenerate : public ::testing::TestWithParam<Family> {};

TEST_P(CudaGenerate, LogitsAndGreedyTokensAreTheCpus) {
  SFTDP_REQUIRE_CUDA(ops);
  const config::ModelDims d = GetParam().dims;
  const auto m = random_model(d, 7);
  generate::Generator cpu(m, cpu_ops(), 14), gpu(m, *ops, 14);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  std::vector<float> want = cpu.feed(prompt.data(), 5, true), got = gpu.feed(prompt.data(), 5, true);
  for (int step = 0; step < 6; ++step) {  // decoding: the CPU's greedy token into both
    const auto& c = cpu.feed(prompt.data() + step % 5, 1);
    want.insert(want.end(), c.begin(), c.end());
    const auto& g = gpu.feed(prompt.data() + step % 5, 1);
    got.insert(got.end(), g.begin(), g.end());
  }
  double largest = 0;
  for (float x : want) largest = std::max(largest, double(std::fabs(x)));
  EXPECT_TRUE(allclose(got, want, 1e-5 * largest, 0));
  generate::Sampler a({}), b({});
  EXPECT_EQ(generate::generate(gpu, a, prompt, 8, {}), generate::generate(cpu, b, prompt, 8, {}));
}

INSTANTIATE_TEST_SUITE_P(Families, CudaGenerate, ::testing::ValuesIn(generate_families()), family_name);

}  // namespace
}  // namespace sftdp::test
