// tests/model/test_fused_head.cpp — the fused, chunked linear cross-entropy of Model (only the
// positions with loss weight != 0, gathered, R at a time) against the unfused computation it
// replaced (every position through one (B·T, V) logits buffer: set_head_chunking(0, true), which
// is the pre-fusion path — full-logits matmul_fwd, cross-entropy with zero-weight rows, full
// matmul_bwd). GPT-2 (tied head) and Llama-family variants (untied with MQA, tied with GQA), with
// 0%, ~60% (SFT-like masked prompt prefixes) and 100% of the positions masked, with and without
// packed segments, chunks of 1, 5 (crossing row boundaries: T = 12) and the default: loss sum
// within 1e-6 relative, weight sum exact, every gradient tensor within 1e-6 of its largest entry,
// over two accumulated micro-batches; eval sums the same. A fully masked micro-batch adds nothing
// (bitwise). The float64 references (test_gpt2_reference.cpp) and finite differences
// (test_*_grad.cpp) check the fused path independently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "kernels/test_cuda_util.h"  // NameFromParam
#include "model/model_fixtures.h"
#include "sftdp/model.h"

namespace sftdp::test {
namespace {

constexpr int kB = 3, kT = 12;
constexpr double kRel = 1e-6;

std::vector<Family> families() {
  std::vector<Family> f;
  f.push_back({"gpt2", tiny_dims()});
  config::ModelDims l;
  l.L = 2, l.NH = 4, l.C = 16, l.F = 24, l.V = 37, l.maxT = 64;
  l.block = config::Block::kLlama, l.KVH = 1, l.HS = 4, l.norm_eps = 1e-5, l.rope_theta = 10000;
  l.tied = false;
  f.push_back({"llama_untied_mqa", l});
  l.tied = true, l.KVH = 2;
  f.push_back({"llama_tied_gqa", l});
  return f;
}

// rows × T random tokens, SFT-shaped: each row's prompt prefix (about `masked` of it, ±2 positions
// when 0 < masked < 1) has weight 0, the completion weight 1 with a few 0.5.
data::Batch sft_batch(int rows, int T, int V, double masked, uint64_t seed, bool segments) {
  data::Batch b = random_rows(rows, T, V, seed, segments);  // tokens, segments, positions
  std::mt19937 rng(static_cast<uint32_t>(seed) + 1);
  for (int r = 0; r < rows; ++r) {
    int prompt = static_cast<int>(std::lround(masked * T));
    if (masked > 0 && masked < 1) prompt = std::clamp(prompt + static_cast<int>(rng() % 5) - 2, 1, T - 1);
    for (int t = 0; t < T; ++t)
      b.loss_weights[size_t(r) * T + t] = t < prompt ? 0.0f : (rng() % 7 == 0 ? 0.5f : 1.0f);
  }
  return b;
}

double masked_share(const data::Batch& b) {
  return double(std::count(b.loss_weights.begin(), b.loss_weights.end(), 0.0f)) / b.loss_weights.size();
}

std::vector<float> noisy_params(const model::ParamLayout& lay, const config::ModelDims& d) {
  std::vector<float> p;
  model::init_params(p, lay, d, 3);
  const auto noise = uniform(p.size(), 4, -0.15f, 0.15f);  // no parameter at a special value
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

struct Result {
  std::vector<float> grads;  // with the two trailing sums
  std::vector<model::LossSums> eval;
};

// Gradient sums of forward_backward over the micro-batches from zero, then eval of each.
Result run(const config::ModelDims& d, const std::vector<float>& params, const std::vector<data::Batch>& micro,
        int chunk_rows, bool every_row) {
  auto m = model::make_model(d, cpu_ops(), kB, kT);
  m->set_head_chunking(chunk_rows, every_row);
  m->set_params_from_host(params);
  m->zero_grads();
  for (const auto& b : micro) m->forward_backward(b);
  Result r{m->grads_to_host(), {}};
  for (const auto& b : micro) r.eval.push_back(m->forward(b));
  return r;
}

struct Case {
  Family family;
  double masked;
  int chunk_rows;  // 0: default
};
std::string test_name(const Case& c) {
  return std::string(c.family.name) + "_masked" + std::to_string(int(c.masked * 100)) + "_chunk" +
         std::to_string(c.chunk_rows);
}
void PrintTo(const Case& c, std::ostream* os) { *os << test_name(c); }
class FusedHead : public ::testing::TestWithParam<Case> {};

TEST_P(FusedHead, MatchesUnfusedHeadOnEveryTensor) {
  const auto& [family, masked, chunk_rows] = GetParam();
  const auto& d = family.dims;
  const auto layout = model::param_layout(d);
  const auto params = noisy_params(layout, d);
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "no segments");
    const std::vector<data::Batch> micro = {sft_batch(kB, kT, d.V, masked, 21, segments),
                                            sft_batch(2, kT, d.V, masked, 22, segments)};
    const double share = masked_share(micro[0]);
    if (masked > 0 && masked < 1) {
      EXPECT_NEAR(share, masked, 0.12);
    } else {
      EXPECT_EQ(share, masked);
    }
    const Result ref = run(d, params, micro, 0, /*every_row=*/true);
    const Result got = run(d, params, micro, chunk_rows, false);
    const size_t P = layout.total;
    EXPECT_NEAR(got.grads[P], ref.grads[P], kRel * std::fabs(ref.grads[P])) << "loss sum";
    EXPECT_EQ(got.grads[P + 1], ref.grads[P + 1]) << "weight sum";
    if (masked < 1) {
      EXPECT_GT(ref.grads[P + 1], 0.f);
    }
    for (const auto& t : layout.tensors) {
      const std::vector<float> a(got.grads.begin() + t.offset, got.grads.begin() + t.offset + t.numel);
      const std::vector<float> b(ref.grads.begin() + t.offset, ref.grads.begin() + t.offset + t.numel);
      EXPECT_LE(max_rel_diff(a, b), kRel) << t.name;
      if (masked == 1) {
        EXPECT_TRUE(bitwise_equal(a, std::vector<float>(a.size(), 0.f))) << t.name;
      }
    }
    for (size_t i = 0; i < micro.size(); ++i) {
      EXPECT_NEAR(got.eval[i].loss_sum, ref.eval[i].loss_sum, kRel * std::fabs(ref.eval[i].loss_sum)) << "eval " << i;
      EXPECT_EQ(got.eval[i].weight_sum, ref.eval[i].weight_sum) << "eval " << i;
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> c;
  for (const auto& f : families())
    for (double masked : {0.0, 0.6, 1.0})
      for (int rows : {1, 5, 0}) c.push_back({f, masked, rows});
  return c;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedHead, ::testing::ValuesIn(cases()), NameFromParam());

// Sums and gradients already accumulated stay bit for bit what they were after a micro-batch whose
// every position has weight 0; eval of it is exactly {0, 0}.
TEST(FusedHeadMasked, FullyMaskedMicroBatchAddsNothing) {
  for (const auto& f : families()) {
    SCOPED_TRACE(f.name);
    auto m = model::make_model(f.dims, cpu_ops(), kB, kT);
    m->set_params_from_host(noisy_params(m->layout(), f.dims));
    m->zero_grads();
    m->forward_backward(sft_batch(kB, kT, f.dims.V, 0.6, 31, false));
    const auto before = m->grads_to_host();
    const auto empty = sft_batch(kB, kT, f.dims.V, 1.0, 32, false);
    m->forward_backward(empty);
    EXPECT_TRUE(bitwise_equal(m->grads_to_host(), before));
    const auto s = m->forward(empty);
    EXPECT_EQ(s.loss_sum, 0.0);
    EXPECT_EQ(s.weight_sum, 0.0);
  }
}

// The default chunk: 128 MiB of fp32 logits, at least 256 rows, at most the micro-batch.
TEST(FusedHeadChunk, DefaultRowsBoundTheLogitsBuffer) {
  EXPECT_EQ(model::Model::default_head_chunk_rows(50257, 1 << 20), 667);   // GPT-2: 127.9 MiB
  EXPECT_EQ(model::Model::default_head_chunk_rows(151936, 1 << 20), 256);  // floor
  EXPECT_EQ(model::Model::default_head_chunk_rows(50257, 256), 256);       // B·T smaller
  EXPECT_EQ(model::Model::default_head_chunk_rows(37, 36), 36);
  auto m = model::make_model(tiny_dims(), cpu_ops(), kB, kT);
  EXPECT_EQ(m->head_chunk_rows(), kB * kT);
  m->set_head_chunking(5);
  EXPECT_EQ(m->head_chunk_rows(), 5);
  m->set_head_chunking(1000);
  EXPECT_EQ(m->head_chunk_rows(), kB * kT);
}

}  // namespace
}  // namespace sftdp::test
