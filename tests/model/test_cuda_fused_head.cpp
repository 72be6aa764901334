// tests/model/test_cuda_fused_head.cpp — the fused, chunked LM head + cross-entropy on one GPU:
// on the CUDA table, with chunks crossing row boundaries and ~60% of positions masked, the loss
// sum (1e-6 relative), weight sum (exact) and every gradient tensor (1e-6 of its largest entry)
// equal the unfused head on the same device (set_head_chunking(0, true)); and the GPU's fused
// step equals the CPU's (1e-5 loss, 1e-4 per tensor: different GEMMs and reductions). GPT-2 and
// an untied Llama. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "kernels/test_cuda_util.h"
#include "model/model_fixtures.h"
#include "sftdp/model.h"

namespace sftdp::test {
namespace {

constexpr int kB = 4, kT = 12;

std::vector<config::ModelDims> dims_under_test() {
  config::ModelDims l;
  l.L = 2, l.NH = 4, l.C = 16, l.F = 24, l.V = 37, l.maxT = 64;
  l.block = config::Block::kLlama, l.KVH = 2, l.HS = 4, l.norm_eps = 1e-5, l.rope_theta = 10000;
  l.tied = false;
  return {tiny_dims(), l};
}

// Masked prompt prefixes of 5..9 of the 12 positions (about 60%), completion weights 1 or 0.5.
data::Batch masked_batch(int V, uint64_t seed) {
  data::Batch b = random_rows(kB, kT, V, seed, /*segments=*/true);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int r = 0; r < kB; ++r) {
    const int prompt = 5 + static_cast<int>(rng() % 5);
    for (int t = 0; t < kT; ++t)
      b.loss_weights[size_t(r) * kT + t] = t < prompt ? 0.f : (rng() % 5 == 0 ? 0.5f : 1.f);
  }
  return b;
}

std::vector<float> grads_of(const Ops& ops, const config::ModelDims& d, const std::vector<float>& params,
                            int chunk_rows, bool every_row) {
  auto m = model::make_model(d, ops, kB, kT);
  m->set_head_chunking(chunk_rows, every_row);
  m->set_params_from_host(params);
  m->zero_grads();
  m->forward_backward(masked_batch(d.V, 5));
  m->forward_backward(masked_batch(d.V, 6));
  return m->grads_to_host();
}

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const model::ParamLayout& lay,
                  double loss_rel, double tensor_rel) {
  const size_t P = lay.total;
  EXPECT_NEAR(got[P], ref[P], loss_rel * std::fabs(ref[P])) << "loss sum";
  EXPECT_EQ(got[P + 1], ref[P + 1]) << "weight sum";
  for (const auto& t : lay.tensors) {
    const std::vector<float> a(got.begin() + t.offset, got.begin() + t.offset + t.numel);
    const std::vector<float> b(ref.begin() + t.offset, ref.begin() + t.offset + t.numel);
    EXPECT_LE(max_rel_diff(a, b), tensor_rel) << t.name;
  }
}

TEST(CudaFusedHead, MatchesUnfusedHeadOnDeviceAndCpu) {
  SFTDP_REQUIRE_CUDA(cuda);
  for (const auto& d : dims_under_test()) {
    SCOPED_TRACE(d.block == config::Block::kLlama ? "llama untied" : "gpt2");
    const auto lay = model::param_layout(d);
    std::vector<float> params;
    model::init_params(params, lay, d, 8);
    const auto noise = uniform(params.size(), 9, -0.1f, 0.1f);
    for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
    const auto fused = grads_of(*cuda, d, params, 5, false);
    expect_close(fused, grads_of(*cuda, d, params, 0, true), lay, 1e-6, 1e-6);
    expect_close(fused, grads_of(cpu_ops(), d, params, 5, false), lay, 1e-5, 1e-4);
  }
}

}  // namespace
}  // namespace sftdp::test
