// tests/model/test_context_parallel_mpi.cpp — context parallelism (issue 37, SPEC §1) as one big batch:
// under `mpiexec -n 2` and `-n 4`, every context_parallelism n that divides the world (2, and 4 on four
// ranks) with world / n data-parallel groups, GA 1 and 2 (the oracle test: GA 2 at n = 2, 1 at n = 4). Each group's ranks feed the group's whole rows
// (packed: two segments a row, cut anywhere, so segments cross chunk boundaries); each rank computes its
// two chunks; the gradient sums are summed over every rank once. They must be the float64 oracle's over
// the global batch (GPT-2, ≤ 1e-4 per tensor), the same as one rank's without context parallelism (the
// Llama family, GQA; ≤ 1e-5 per tensor), bitwise the same run to run, and a rank whose positions carry no
// loss weight must still take part (its group's attention needs its keys and values). On the act16 path (bf16
// activations, the cpu-bf16 table's CPU twins; issue 43) the same within bf16 rounding, with remat too, gathering
// as often as the fp32 path.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/reference_gpt2.h"
#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/context_split.h"
#include "model/model_fixtures.h"
#include "sftdp/comm.h"
#include "sftdp/model.h"

using namespace sftdp;

namespace {

// The rows of data-parallel group g at micro-step m: B of T positions, deterministic in (g, m).
data::Batch group_rows(int g, int m, int B, int T, int V) { return test::random_rows(B, T, V, 1000 + 10 * g + m, true); }

// Rows of a batch one after the other in one batch.
void append(data::Batch& all, const data::Batch& b) {
  all.T = b.T, all.B += b.B;
  all.inputs.insert(all.inputs.end(), b.inputs.begin(), b.inputs.end());
  all.targets.insert(all.targets.end(), b.targets.begin(), b.targets.end());
  all.loss_weights.insert(all.loss_weights.end(), b.loss_weights.begin(), b.loss_weights.end());
  all.segment_ids.insert(all.segment_ids.end(), b.segment_ids.begin(), b.segment_ids.end());
  all.positions.insert(all.positions.end(), b.positions.begin(), b.positions.end());
}

std::vector<float> params_of(const config::ModelDims& d) {
  std::vector<float> p;
  model::init_params(p, model::param_layout(d), d, 5);
  const auto noise = test::uniform(p.size(), 77, -0.1f, 0.1f);  // attention far from uniform
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

// One step's gradient sums (and the two trailing sums) of the whole world at context parallelism n:
// every rank's passes over its group's rows, then one sum over every rank. `rows` gives a group's
// rows at a micro-step.
// act16: the act16 path (bf16 activations on the cpu-bf16 table).
template <class Rows>
std::vector<float> world_grads(comm::Communicator& c, const config::ModelDims& d, int n, int ga, int B, int T,
                               const Rows& rows, bool remat = false, uint64_t* gathers = nullptr, bool act16 = false) {
  auto m = model::make_model(d, act16 ? cpu_bf16_ops() : cpu_ops(), B, T / n, remat, act16);
  if (act16) EXPECT_EQ(m->activation_storage(), model::ActivationStorage::kBf16);
  m->set_params_from_host(params_of(d));
  const auto group = c.context_group(n);
  m->set_context_parallel(model::context_split(T, c.world(), c.rank(), n), group.get());
  m->zero_grads();
  for (int micro = 0; micro < ga; ++micro) m->forward_backward(rows(c.rank() / n, micro));
  if (gathers) *gathers = m->context_gathers();
  auto g = m->grads_to_host();
  c.allreduce_sum(g.data(), g.size());
  return g;
}

// The same step on this rank alone without context parallelism: every group's rows.
template <class Rows>
std::vector<float> one_rank_grads(const config::ModelDims& d, int groups, int ga, int B, int T, const Rows& rows,
                                  bool act16 = false) {
  auto m = model::make_model(d, act16 ? cpu_bf16_ops() : cpu_ops(), B, T, /*remat=*/false, act16);
  m->set_params_from_host(params_of(d));
  m->zero_grads();
  for (int micro = 0; micro < ga; ++micro)
    for (int g = 0; g < groups; ++g) m->forward_backward(rows(g, micro));
  return m->grads_to_host();
}

void expect_tensors_near(const model::ParamLayout& lay, const std::vector<float>& got, const std::vector<float>& want,
                         double tol, const std::string& what) {
  for (const auto& t : lay.tensors) {
    const std::vector<float> a(got.begin() + t.offset, got.begin() + t.offset + t.numel);
    const std::vector<float> b(want.begin() + t.offset, want.begin() + t.offset + t.numel);
    EXPECT_LE(test::max_rel_diff(a, b), tol) << t.name << ", " << what;
  }
}

std::vector<int> context_sizes(int world) {
  std::vector<int> v;
  for (int n = 2; n <= world; n *= 2)
    if (world % n == 0) v.push_back(n);
  return v;
}

}  // namespace

TEST(ContextParallel, Gpt2StepOneGradientSumsAreTheFloat64OracleOverTheGlobalBatch) {
  auto c = comm::make_mpi_communicator();
  comm::set_collective_timeout(120);
  auto d = test::tiny_dims();
  d.maxT = 320;
  const int B = 2;
  for (int n : context_sizes(c->world())) {
    const int ga = n == 2 ? 2 : 1;  // GA 2 at n = 2 (with 2 groups on 4 ranks), GA 1 at n = 4
    const int T = n == 2 ? 300 : 304, groups = c->world() / n;  // 2n must divide T: 300 = 4·75, 304 = 8·38
    const auto rows = [&](int g, int micro) { return group_rows(g, micro, B, T, d.V); };
    const auto grads = world_grads(*c, d, n, ga, B, T, rows);
    if (c->rank() != 0) continue;
    data::Batch all;
    for (int micro = 0; micro < ga; ++micro)
      for (int g = 0; g < groups; ++g) append(all, rows(g, micro));
    const auto lay = model::param_layout(d);
    const auto ref = test::reference_gpt2(d, lay, params_of(d), all);
    ASSERT_EQ(ref.grads.size(), lay.total);
    const std::string what = "context_parallelism " + std::to_string(n) + " x " + std::to_string(groups) +
                             " groups x GA " + std::to_string(ga) + ", T " + std::to_string(T);
    EXPECT_NEAR(grads[lay.total], ref.loss_sum, 1e-5 * ref.loss_sum) << "loss sum, " << what;
    EXPECT_NEAR(grads[lay.total + 1], ref.weight_sum, 1e-6 * ref.weight_sum) << "weight sum, " << what;
    const std::vector<float> g(grads.begin(), grads.begin() + lay.total);
    expect_tensors_near(lay, g, ref.grads, 1e-4, what);
  }
}

TEST(ContextParallel, LlamaGqaGradientSumsAreOneRanksWithoutItAndBitwiseRunToRun) {
  auto c = comm::make_mpi_communicator();
  comm::set_collective_timeout(120);
  auto d = test::tiny_llama_dims();  // 4 query heads, 2 k/v heads
  d.maxT = 320;
  const int B = 2, T = 64;
  for (int n : context_sizes(c->world()))
    for (int ga : {1, 2}) {
      const int groups = c->world() / n;
      const auto rows = [&](int g, int micro) { return group_rows(g, micro, B, T, d.V); };
      const auto a = world_grads(*c, d, n, ga, B, T, rows);
      const auto b = world_grads(*c, d, n, ga, B, T, rows);
      const std::string what = "context_parallelism " + std::to_string(n) + " x " + std::to_string(groups) +
                               " groups x GA " + std::to_string(ga);
      EXPECT_EQ(a, b) << "bitwise run to run, " << what;
      const auto one = one_rank_grads(d, groups, ga, B, T, rows);
      const auto lay = model::param_layout(d);
      EXPECT_NEAR(a[lay.total], one[lay.total], 1e-6 * one[lay.total]) << "loss sum, " << what;
      EXPECT_EQ(a[lay.total + 1], one[lay.total + 1]) << "weight sum, " << what;
      expect_tensors_near(lay, a, one, 1e-5, what);
    }
}

// Loss weights only in the rows' first chunk: every other rank of a group has no weighted position,
// yet its passes must run (the group's collectives) and the sums are still the whole batch's.
TEST(ContextParallel, RanksWithoutWeightedPositionsStillTakePart) {
  auto c = comm::make_mpi_communicator();
  comm::set_collective_timeout(120);
  auto d = test::tiny_llama_dims();
  d.maxT = 320;
  const int B = 2, T = 64;
  for (int n : context_sizes(c->world())) {
    const int groups = c->world() / n, first_chunk = T / (2 * n);
    const auto rows = [&](int g, int micro) {
      auto b = group_rows(g, micro, B, T, d.V);
      for (int r = 0; r < B; ++r)
        for (int t = 0; t < T; ++t) b.loss_weights[size_t(r) * T + t] = t < first_chunk ? 1.0f : 0.0f;
      return b;
    };
    const auto a = world_grads(*c, d, n, 1, B, T, rows);
    const auto one = one_rank_grads(d, groups, 1, B, T, rows);
    const auto lay = model::param_layout(d);
    EXPECT_EQ(a[lay.total + 1], one[lay.total + 1]) << "weight sum, context_parallelism " << n;
    expect_tensors_near(lay, a, one, 1e-5, "weights in the first chunk only, context_parallelism " + std::to_string(n));
  }
}

// Backward gathers a layer's keys and values again only where its forward was not the last attention to
// run: 2L − 1 all-gathers per micro-step without remat (the last layer's backward reuses its forward's) and
// with remat too (each recomputed layer's), and the gradient sums are the same bits either way.
TEST(ContextParallel, BackwardReusesTheLastGatherWithAndWithoutRemat) {
  auto c = comm::make_mpi_communicator();
  comm::set_collective_timeout(120);
  auto d = test::tiny_llama_dims();
  d.L = 3, d.maxT = 320;
  const int B = 2, T = 64, n = 2, ga = 2;
  const auto rows = [&](int g, int micro) { return group_rows(g, micro, B, T, d.V); };
  uint64_t plain = 0, remat = 0;
  const auto a = world_grads(*c, d, n, ga, B, T, rows, false, &plain);
  const auto b = world_grads(*c, d, n, ga, B, T, rows, true, &remat);
  EXPECT_EQ(plain, uint64_t(ga * (2 * d.L - 1))) << "without remat";
  EXPECT_EQ(remat, uint64_t(ga * (2 * d.L - 1))) << "with remat";
  EXPECT_EQ(a, b) << "remat gives the same bits";
}

// The act16 path: bf16 q|k|v gathered as bf16 and attended on the bf16 table's tensor-core twin (head size 16), the
// k/v gradients reduce-scattered in fp32 and rounded once. One rank's act16 run without context parallelism is the
// reference: the loss sum to fp32 order (the rows' forward is the same arithmetic), the gradients within bf16
// rounding; run to run bitwise; with remat the same bits and the same 2L − 1 gathers per micro-step.
TEST(ContextParallel, Act16PathTracksOneRanksAct16Run) {
  auto c = comm::make_mpi_communicator();
  comm::set_collective_timeout(120);
  auto d = test::tiny_llama_dims();
  d.C = 64, d.HS = 16, d.F = 96, d.maxT = 320;  // 4 query heads of 16, 2 k/v heads: the tensor-core twin
  const int B = 1, T = 128;                     // two key tiles; chunks of 32 (n = 2) or 16 (n = 4)
  for (int n : context_sizes(c->world())) {
    const int groups = c->world() / n;
    const auto rows = [&](int g, int micro) { return group_rows(g, micro, B, T, d.V); };
    uint64_t plain = 0, remat = 0;
    const auto a = world_grads(*c, d, n, 1, B, T, rows, false, &plain, /*act16=*/true);
    const auto b = world_grads(*c, d, n, 1, B, T, rows, true, &remat, /*act16=*/true);
    const std::string what = "act16, context_parallelism " + std::to_string(n);
    EXPECT_EQ(a, b) << "remat gives the same bits, " << what;
    EXPECT_EQ(plain, uint64_t(2 * d.L - 1)) << what;
    EXPECT_EQ(remat, uint64_t(2 * d.L - 1)) << what;
    const auto one = one_rank_grads(d, groups, 1, B, T, rows, /*act16=*/true);
    const auto lay = model::param_layout(d);
    EXPECT_NEAR(a[lay.total], one[lay.total], 1e-5 * one[lay.total]) << "loss sum, " << what;
    EXPECT_EQ(a[lay.total + 1], one[lay.total + 1]) << "weight sum, " << what;
    expect_tensors_near(lay, a, one, 2e-2, what);
  }
}
