// tests/model/test_gpt2_reference.cpp — our fp32 GPT-2 against an independent float64 PyTorch
// implementation of the SPEC's maths (tests/model/reference_gpt2.py, generated on the fly): the
// loss sum, the weight sum and every gradient tensor, with and without packed segments, and with
// the fused LM head in chunks of 4 gathered positions (crossing rows of T = 10).
#include <gtest/gtest.h>

#include "common/reference_gpt2.h"
#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/model.h"

using namespace sftdp;

namespace {

void compare_with_reference(bool segments, int head_chunk_rows = 0) {
  const auto d = test::tiny_dims();
  const int B = 3, T = 10;
  const auto m_owned = model::make_model(d, cpu_ops(), B, T);
  auto& m = *m_owned;
  m.set_head_chunking(head_chunk_rows);
  std::vector<float> p;
  model::init_params(p, m.layout(), d, 5);
  const auto noise = test::uniform(p.size(), 17, -0.1f, 0.1f);  // no special values anywhere
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  m.set_params_from_host(p);
  const auto batch = test::random_rows(B, T, d.V, 31, segments);
  m.zero_grads();
  m.forward_backward(batch);
  const auto ours = m.grads_to_host();

  const auto ref = test::reference_gpt2(d, m.layout(), p, batch);
  ASSERT_EQ(ref.grads.size(), p.size());
  const size_t P = m.layout().total;
  EXPECT_NEAR(ours[P], ref.loss_sum, 1e-5 * ref.loss_sum);
  EXPECT_DOUBLE_EQ(ours[P + 1], ref.weight_sum);

  for (const auto& t : m.layout().tensors) {
    const std::vector<float> a(ours.begin() + t.offset, ours.begin() + t.offset + t.numel);
    const std::vector<float> b(ref.grads.begin() + t.offset, ref.grads.begin() + t.offset + t.numel);
    EXPECT_LE(test::max_rel_diff(a, b), 1e-4) << t.name << (segments ? " (segments)" : "");
  }
}

}  // namespace

TEST(Gpt2Reference, MatchesFloat64PyTorch) { compare_with_reference(false); }
TEST(Gpt2Reference, MatchesFloat64PyTorchWithPackedSegments) { compare_with_reference(true); }
TEST(Gpt2Reference, MatchesFloat64PyTorchWithSmallHeadChunks) { compare_with_reference(true, 4); }
