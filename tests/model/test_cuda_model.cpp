// tests/model/test_cuda_model.cpp — the whole model on one GPU (the CUDA Ops table) against the
// same model on the CPU table, for GPT-2 and for Llama-family variants (GQA with an untied head and
// Qwen2 biases; Qwen3 q/k norm with its own head size): same weights and micro-batch (unequal masked rows, packed
// segments) give the same loss sum (1e-5), weight sum (exact) and gradient sums (1e-4 per tensor);
// GA 1 equals GA 4 on the GPU; remat gives bitwise the gradients of keeping the activations;
// three training steps run twice are bitwise equal; bf16 GEMM inputs
// (the GemmInputs::kBf16 table) keep the loss within 1e-2 of fp32, as do the bf16 mirrors (one rounding
// of the parameters per pass, the copies read in place); bf16 activations on that table (the act16 path)
// match their CPU twins, track fp32, and recompute bitwise with remat. Every test skips
// without a CUDA device (or the CUDA simulator).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "kernels/test_cuda_util.h"
#include "model/model_fixtures.h"
#include "sftdp/config.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

#ifdef SFTDP_CUDA_SIM
#include "cudasim/record.h"
constexpr bool kSimulator = true;  // the simulator's record mode is there
#else
constexpr bool kSimulator = false;
#endif

namespace sftdp::test {
namespace {

constexpr int kT = 12;  // tiny_dims().maxT: every position embedding is used
// The act16 path's gradient sums per tensor, GPU against its CPU twins (the same roundings; fp32 summation order
// decides a few bf16 roundings differently, which then propagate) and against the fp32 model (bf16 activations).
constexpr double kAct16TwinRel = 2e-3;  // measured up to 7.7e-4 (the three families, 2026-12-06)
constexpr double kAct16Fp32Rel = 5e-2;  // measured up to 1.9e-2

std::vector<Family> families() {
  config::ModelDims llama;
  llama.L = 2, llama.NH = 4, llama.C = 16, llama.F = 24, llama.V = 37, llama.maxT = 64;
  llama.block = config::Block::kLlama, llama.KVH = 2, llama.HS = 4;
  llama.tied = false, llama.qkv_bias = true, llama.rope_theta = 500000;
  llama.rope_scaling = {true, 8, 1, 4, 16};
  config::ModelDims qwen3 = llama;
  qwen3.tied = true, qwen3.qkv_bias = false, qwen3.qk_norm = true, qwen3.HS = 6, qwen3.KVH = 1;
  qwen3.norm_eps = 1e-6, qwen3.rope_scaling = {};
  return {{"gpt2", tiny_dims()}, {"llama_gqa_untied_qkv_bias", llama}, {"qwen3_qk_norm_mqa", qwen3}};
}

class CudaModel : public ::testing::TestWithParam<Family> {};

// Seeded initialisation plus uniform noise, so norm weights and biases sit at no special value.
std::vector<float> noisy_params(const config::ModelDims& d) {
  const auto layout = model::param_layout(d);
  std::vector<float> p;
  model::init_params(p, layout, d, 7);
  const auto noise = uniform(p.size(), 99, -0.05f, 0.05f);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

// Gradient sums (with the two trailing sums) of one forward_backward per micro-batch from zero.
std::vector<float> accumulated_grads(const Ops& ops, const config::ModelDims& d, const std::vector<float>& params,
                                     const std::vector<data::Batch>& micro_batches, bool remat = false,
                                     bool bf16_activations = false) {
  const auto m = model::make_model(d, ops, micro_batches.front().B, kT, remat, bf16_activations);
  m->set_params_from_host(params);
  m->zero_grads();
  for (const auto& b : micro_batches) m->forward_backward(b);
  return m->grads_to_host();
}

// The slice of a gradient buffer that belongs to one parameter tensor.
std::vector<float> tensor_of(const std::vector<float>& buffer, const model::ParamInfo& t) {
  const auto first = buffer.begin() + static_cast<std::ptrdiff_t>(t.offset);
  return {first, first + static_cast<std::ptrdiff_t>(t.numel)};
}

// Gradient sums normalised by the weight sum (the update's g/W), without the trailing sums.
std::vector<float> normalised_grads(const std::vector<float>& buffer, size_t total) {
  const double weight_sum = buffer[total + 1];
  std::vector<float> g(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(total));
  for (float& x : g) x = static_cast<float>(x / weight_sum);
  return g;
}

TEST_P(CudaModel, MatchesCpuOnSameWeightsAndData) {
  SFTDP_REQUIRE_CUDA(cuda);
  const auto d = GetParam().dims;
  const auto params = noisy_params(d);
  const auto layout = model::param_layout(d);
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "one sequence per row");
    const std::vector<data::Batch> batch = {random_rows(5, kT, d.V, 31, segments)};  // row 3 fully masked
    const auto cpu = accumulated_grads(cpu_ops(), d, params, batch);
    const auto gpu = accumulated_grads(*cuda, d, params, batch);
    const double cpu_loss = cpu[layout.total], gpu_loss = gpu[layout.total];
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * cpu_loss);
    EXPECT_EQ(gpu[layout.total + 1], cpu[layout.total + 1]);  // sums of 0, 0.5 and 1: exact in fp32
    for (const auto& t : layout.tensors) {
      EXPECT_LE(max_rel_diff(tensor_of(gpu, t), tensor_of(cpu, t)), 1e-4) << t.name;
    }

    // The evaluation path (forward only) agrees too.
    const auto cpu_model = model::make_model(d, cpu_ops(), 5, kT), gpu_model = model::make_model(d, *cuda, 5, kT);
    cpu_model->set_params_from_host(params);
    gpu_model->set_params_from_host(params);
    const auto cpu_eval = cpu_model->forward(batch.front()), gpu_eval = gpu_model->forward(batch.front());
    EXPECT_NEAR(gpu_eval.loss_sum, cpu_eval.loss_sum, 1e-5 * cpu_eval.loss_sum);
    EXPECT_EQ(gpu_eval.weight_sum, cpu_eval.weight_sum);
  }
}

// SPEC §1 on the GPU: 8 rows as one micro-batch or as 4 micro-batches of 2 give the same normalised
// loss and gradients (the rows hold very different token counts; some are fully masked).
TEST_P(CudaModel, GradientAccumulationIsOneBigBatch) {
  SFTDP_REQUIRE_CUDA(cuda);
  const auto d = GetParam().dims;
  const auto params = noisy_params(d);
  const size_t total = model::param_layout(d).total;
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "one sequence per row");
    const auto rows = random_rows(8, kT, d.V, 2024, segments);
    std::vector<data::Batch> quarters;
    for (int q = 0; q < 4; ++q) quarters.push_back(slice_rows(rows, 2 * q, 2 * q + 2));
    const auto ga1 = accumulated_grads(*cuda, d, params, {rows});
    const auto ga4 = accumulated_grads(*cuda, d, params, quarters);
    const double loss1 = ga1[total] / ga1[total + 1], loss4 = ga4[total] / ga4[total + 1];
    EXPECT_EQ(ga4[total + 1], ga1[total + 1]);
    EXPECT_NEAR(loss4, loss1, 1e-6 * loss1);
    EXPECT_LE(max_rel_diff(normalised_grads(ga4, total), normalised_grads(ga1, total)), 1e-5);
  }
}

// remat (SPEC §1) on the GPU: recomputing each block's activations in backward gives bitwise the
// gradient, loss and weight sums of keeping them, over two accumulated micro-batches (the second
// with fewer rows than the first, i.e. than max_B), with and without packed segments.
TEST_P(CudaModel, RematIsBitwiseEqualToKeepingActivations) {
  SFTDP_REQUIRE_CUDA(cuda);
  auto d = GetParam().dims;
  d.L = 3;  // two blocks recomputed
  const auto params = noisy_params(d);
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "one sequence per row");
    const auto rows = random_rows(7, kT, d.V, 4242, segments);
    const std::vector<data::Batch> micro = {slice_rows(rows, 0, 4), slice_rows(rows, 4, 7)};
    const auto keep = accumulated_grads(*cuda, d, params, micro, /*remat=*/false);
    const auto remat = accumulated_grads(*cuda, d, params, micro, /*remat=*/true);
    EXPECT_GT(keep[model::param_layout(d).total + 1], 0.0f);
    EXPECT_TRUE(bitwise_equal(remat, keep));
  }
}

struct TrainedState {
  std::vector<float> params, m, v;
  std::vector<double> losses, grad_norms;
};

// Three optimizer steps (two micro-batches each) from `params` with fresh moments.
TrainedState train_three_steps(const Ops& ops, const config::ModelDims& d, const std::vector<float>& params) {
  config::Config cfg;  // AdamW defaults, clipping at 1.0
  const auto model = model::make_model(d, ops, 3, kT);
  auto& m = *model;
  m.set_params_from_host(params);
  optim::AdamW opt(m);
  TrainedState s;
  for (int step = 1; step <= 3; ++step) {
    m.zero_grads();
    const auto rows = random_rows(6, kT, d.V, 500 + step, /*segments=*/true);
    m.forward_backward(slice_rows(rows, 0, 3));
    m.forward_backward(slice_rows(rows, 3, 6));
    const auto stats = opt.apply(cfg, 1e-3, step);
    s.losses.push_back(stats.loss);
    s.grad_norms.push_back(stats.grad_norm);
  }
  s.params = m.params_to_host();
  opt.moments_to_host(s.m, s.v);
  return s;
}

TEST_P(CudaModel, TwoRunsAreBitwiseEqual) {
  SFTDP_REQUIRE_CUDA(cuda);
  const auto d = GetParam().dims;
  const auto params = noisy_params(d);
  const auto first = train_three_steps(*cuda, d, params), second = train_three_steps(*cuda, d, params);
  EXPECT_FALSE(bitwise_equal(first.params, params)) << "the three steps changed no parameter";
  EXPECT_TRUE(bitwise_equal(second.params, first.params));
  EXPECT_TRUE(bitwise_equal(second.m, first.m));
  EXPECT_TRUE(bitwise_equal(second.v, first.v));
  EXPECT_EQ(second.losses, first.losses);
  EXPECT_EQ(second.grad_norms, first.grad_norms);
}

// Four optimizer steps of two micro-batches (the same rows every step, so that shapes repeat) and two evaluations,
// with or without CUDA graphs (src/model/graph_cache.h); how many graphs the model kept, and (simulator) how many
// device operations of the last step came from a graph launch, of how many.
struct GraphRun {
  TrainedState state;
  std::vector<double> eval;
  size_t captured = 0, replayed_ops = 0, last_step_ops = 0;
};
GraphRun train_with_graphs(const Ops& ops, const config::ModelDims& d, const std::vector<float>& params, bool graphs,
                           bool bf16_activations, const std::string& record) {
  config::Config cfg;
  cfg.cuda_graphs = graphs;
  const auto model = model::make_model(d, ops, 3, kT, /*remat=*/false, bf16_activations);
  auto& m = *model;
  m.set_cuda_graphs(graphs);
  m.set_params_from_host(params);
  optim::AdamW opt(m);
  const auto rows = random_rows(6, kT, d.V, 777, /*segments=*/true);
  GraphRun r;
  for (int step = 1; step <= 4; ++step) {
#ifdef SFTDP_CUDA_SIM
    if (step == 4 && !record.empty()) sim::set_record(record, false);
#endif
    m.zero_grads();
    m.forward_backward(slice_rows(rows, 0, 3));
    m.forward_backward(slice_rows(rows, 3, 6));
    const auto stats = opt.apply(cfg, 1e-3, step);
#ifdef SFTDP_CUDA_SIM
    if (step == 4 && !record.empty()) sim::set_record("", false);
#endif
    r.state.losses.push_back(stats.loss);
    r.state.grad_norms.push_back(stats.grad_norm);
  }
  for (int i = 0; i < 2; ++i) {
    const auto e = m.forward(slice_rows(rows, 0, 3));
    r.eval.push_back(e.loss_sum), r.eval.push_back(e.weight_sum);
  }
  r.state.params = m.params_to_host();
  opt.moments_to_host(r.state.m, r.state.v);
  r.captured = m.graphs_captured();
  if (!record.empty()) {
    std::ifstream in(record);
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"op\":\"start\"") != std::string::npos || line.find("\"op\":\"mark\"") != std::string::npos)
        continue;
      ++r.last_step_ops;
      r.replayed_ops += line.find("\"graph\":") != std::string::npos;
    }
  }
  return r;
}

// CUDA graphs (config key cuda_graphs): a micro-step's passes run as they come the first time their shape is seen,
// are captured and launched the second time, and only launched from then on; the update too. Bitwise the results
// of launching every operation as it comes (parameters, moments, losses, gradient norms, evaluations), on the fp32
// table and on the act16 path; by the fourth step (simulator) all of the step's device work but its uploads and the
// statistics' read-back comes from graph launches.
TEST_P(CudaModel, CudaGraphsReplayBitwiseWhatRunsAsItComes) {
  SFTDP_REQUIRE_CUDA(cuda);
  const Ops* cuda_bf16 = cuda_ops(GemmInputs::kBf16);
  const auto d = GetParam().dims;
  const auto params = noisy_params(d);
  for (const bool act16 : {false, true}) {
    SCOPED_TRACE(act16 ? "act16 path" : "fp32 table");
    const Ops& ops = act16 ? *cuda_bf16 : *cuda;
    const std::string record =
        ::testing::TempDir() + "graphs_" + std::string(GetParam().name) + (act16 ? "_act16" : "") + ".jsonl";
    std::remove(record.c_str());
    const GraphRun eager = train_with_graphs(ops, d, params, false, act16, "");
    const GraphRun graphs = train_with_graphs(ops, d, params, true, act16, kSimulator ? record : "");
    EXPECT_EQ(eager.captured, 0u);
    EXPECT_GE(graphs.captured, act16 ? 2u : 1u) << "the update (and, padded to 128 rows, the act16 micro-steps)";
    EXPECT_TRUE(bitwise_equal(graphs.state.params, eager.state.params));
    EXPECT_TRUE(bitwise_equal(graphs.state.m, eager.state.m));
    EXPECT_TRUE(bitwise_equal(graphs.state.v, eager.state.v));
    EXPECT_EQ(graphs.state.losses, eager.state.losses);
    EXPECT_EQ(graphs.state.grad_norms, eager.state.grad_norms);
    EXPECT_EQ(graphs.eval, eager.eval);
    if (act16 && kSimulator) {  // the simulator's record: only uploads and the read-back launched alone
      EXPECT_GT(graphs.last_step_ops, 50u);
      EXPECT_GE(graphs.replayed_ops + 20, graphs.last_step_ops) << graphs.replayed_ops << " of " << graphs.last_step_ops;
    }
  }
}

// bf16 GEMM inputs (fp32 accumulation): the loss stays within 1e-2 of fp32, and the gradients show
// that the inputs really were rounded. The two tables share scratch buffers and the algorithm cache.
TEST_P(CudaModel, Bf16GemmLossCloseToFp32) {
  SFTDP_REQUIRE_CUDA(cuda);
  const Ops* cuda_bf16 = cuda_ops(GemmInputs::kBf16);
  ASSERT_NE(cuda_bf16, nullptr);
  const auto d = GetParam().dims;
  const auto params = noisy_params(d);
  const size_t total = model::param_layout(d).total;
  const std::vector<data::Batch> batch = {random_rows(5, kT, d.V, 77, /*segments=*/true)};
  const auto fp32 = accumulated_grads(*cuda, d, params, batch);
  const auto bf16 = accumulated_grads(*cuda_bf16, d, params, batch);
  EXPECT_EQ(bf16[total + 1], fp32[total + 1]);
  EXPECT_NEAR(bf16[total] / bf16[total + 1], fp32[total] / fp32[total + 1],
              1e-2 * fp32[total] / fp32[total + 1]);
  EXPECT_GT(max_rel_diff(normalised_grads(bf16, total), normalised_grads(fp32, total)), 1e-6)
      << "bf16 mode gave fp32 gradients: GEMM inputs not rounded?";
  // The fp32 table after the bf16 one (same scratch, same algorithm cache): the fp32 result again,
  // bit for bit.
  EXPECT_TRUE(bitwise_equal(accumulated_grads(*cuda, d, params, batch), fp32));
}

// The act16 path (bf16 activations on the bf16-GEMM table, ActivationStorage::kBf16 in sftdp/model.h: every GEMM-only activation
// bf16, the fused kernels). On the GPU it equals the same passes on the act16 CPU twins (cpu_bf16_ops: the same
// roundings at the same points; the two sides differ only where fp32 sums in another order round a bf16 value the
// other way), over two accumulated micro-batches (the second with fewer rows) of 3 layers, with and without packed
// segments; and it stays within bf16's precision of the fp32 model.
TEST_P(CudaModel, Act16PathMatchesItsCpuTwinsAndTracksFp32) {
  SFTDP_REQUIRE_CUDA_GEMM(cuda_bf16, GemmInputs::kBf16);
  auto d = GetParam().dims;
  d.L = 3;
  const auto params = noisy_params(d);
  const auto layout = model::param_layout(d);
  constexpr auto kBf16 = model::ActivationStorage::kBf16;
  ASSERT_EQ(model::make_model(d, *cuda_bf16, 4, kT, false, /*bf16_activations=*/true)->activation_storage(), kBf16);
  ASSERT_EQ(model::make_model(d, cpu_bf16_ops(), 4, kT, false, /*bf16_activations=*/true)->activation_storage(), kBf16);
  EXPECT_NE(model::make_model(d, *cuda_bf16, 4, kT)->activation_storage(), kBf16);
  for (bool segments : {false, true}) {
    SCOPED_TRACE(segments ? "packed segments" : "one sequence per row");
    const auto rows = random_rows(7, kT, d.V, 919, segments);
    const std::vector<data::Batch> micro = {slice_rows(rows, 0, 4), slice_rows(rows, 4, 7)};
    const auto gpu = accumulated_grads(*cuda_bf16, d, params, micro, /*remat=*/false, /*bf16=*/true);
    const auto cpu = accumulated_grads(cpu_bf16_ops(), d, params, micro, /*remat=*/false, /*bf16=*/true);
    const auto fp32 = accumulated_grads(cpu_ops(), d, params, micro);
    EXPECT_GT(gpu[layout.total + 1], 0.0f);
    EXPECT_EQ(gpu[layout.total + 1], cpu[layout.total + 1]);
    EXPECT_NEAR(gpu[layout.total], cpu[layout.total], 1e-4 * cpu[layout.total]);
    EXPECT_NEAR(gpu[layout.total], fp32[layout.total], 2e-2 * fp32[layout.total]);
    for (const auto& t : layout.tensors) {
      EXPECT_LE(max_rel_diff(tensor_of(gpu, t), tensor_of(cpu, t)), kAct16TwinRel) << t.name;
      EXPECT_LE(max_rel_diff(tensor_of(gpu, t), tensor_of(fp32, t)), kAct16Fp32Rel) << t.name;
    }
    EXPECT_GT(max_rel_diff(normalised_grads(gpu, layout.total), normalised_grads(fp32, layout.total)), 1e-5)
        << "the act16 path gave fp32 gradients: were the activations stored as bf16?";
  }
}

// remat on the act16 path: the same kernels on the same inputs, so bitwise the gradients of keeping the
// activations; remat_saved_bytes() is what it saves.
TEST_P(CudaModel, Act16RematIsBitwiseEqualToKeepingActivations) {
  SFTDP_REQUIRE_CUDA_GEMM(cuda_bf16, GemmInputs::kBf16);
  auto d = GetParam().dims;
  d.L = 3;
  const auto params = noisy_params(d);
  const auto rows = random_rows(7, kT, d.V, 4243, /*segments=*/true);
  const std::vector<data::Batch> micro = {slice_rows(rows, 0, 4), slice_rows(rows, 4, 7)};
  const auto keep = accumulated_grads(*cuda_bf16, d, params, micro, /*remat=*/false, /*bf16=*/true);
  const auto remat = accumulated_grads(*cuda_bf16, d, params, micro, /*remat=*/true, /*bf16=*/true);
  EXPECT_TRUE(bitwise_equal(remat, keep));
  const auto with = model::make_model(d, *cuda_bf16, 4, kT, /*remat=*/true, true),
             without = model::make_model(d, *cuda_bf16, 4, kT, /*remat=*/false, true);
  ASSERT_EQ(with->activation_storage(), model::ActivationStorage::kBf16);
  ASSERT_EQ(without->activation_storage(), model::ActivationStorage::kBf16);
  EXPECT_EQ(without->activation_bytes() - with->activation_bytes(), without->remat_saved_bytes());
  // bf16 activations: below the fp32 model's, above half of it (the residual stream and statistics stay fp32)
  const auto fp32 = model::make_model(d, *cuda_bf16, 4, kT);
  EXPECT_LT(without->activation_bytes(), fp32->activation_bytes());
  EXPECT_GT(2 * without->activation_bytes(), fp32->activation_bytes());
}

// The bf16 mirrors (kernels/bf16.h, sftdp/model.h): each pass rounds the parameters once and the
// GEMMs read that copy (and the bf16 activation copies) in place; without them every GEMM rounds its
// own inputs. Bitwise the same gradient and evaluation sums, over passes with other parameters in
// between (a copy left from the first would show), with and without bf16 activation storage.
TEST_P(CudaModel, Bf16MirrorsAreBitwiseRoundingInEveryGemm) {
  SFTDP_REQUIRE_CUDA_GEMM(cuda_bf16, GemmInputs::kBf16);
  auto d = GetParam().dims;
  d.L = 3;
  const auto p1 = noisy_params(d);
  auto p2 = p1;
  const auto noise = uniform(p2.size(), 123, -0.05f, 0.05f);
  for (size_t i = 0; i < p2.size(); ++i) p2[i] += noise[i];
  const auto rows = random_rows(7, kT, d.V, 31337, /*segments=*/true);
  const std::vector<data::Batch> micro = {slice_rows(rows, 0, 4), slice_rows(rows, 4, 7)};
  for (bool bf16_acts : {false, true}) {
    SCOPED_TRACE(bf16_acts ? "bf16 activations" : "fp32 activations");
    const auto run = [&](bool mirrors) {
      const auto m = model::make_model(d, *cuda_bf16, 4, kT, /*remat=*/false, bf16_acts);
      m->set_bf16_mirrors(mirrors);
      EXPECT_EQ(m->bf16_mirrors(), mirrors);
      std::vector<std::vector<float>> out;
      for (const std::vector<float>* p : {&p1, static_cast<const std::vector<float>*>(&p2)}) {
        m->set_params_from_host(*p);
        m->zero_grads();
        for (const auto& b : micro) m->forward_backward(b);
        out.push_back(m->grads_to_host());
        const auto eval = m->forward(micro[1]);
        out.push_back({static_cast<float>(eval.loss_sum), static_cast<float>(eval.weight_sum)});
      }
      return out;
    };
    const auto on = run(true), off = run(false);
    ASSERT_EQ(on.size(), off.size());
    for (size_t i = 0; i < on.size(); ++i) EXPECT_TRUE(bitwise_equal(on[i], off[i])) << "output " << i;
  }
  EXPECT_FALSE(model::make_model(d, cpu_ops(), 4, kT)->bf16_mirrors());  // only the bf16-GEMM table has them
}

INSTANTIATE_TEST_SUITE_P(Families, CudaModel, ::testing::ValuesIn(families()), family_name);

}  // namespace
}  // namespace sftdp::test