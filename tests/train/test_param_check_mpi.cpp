// tests/train/test_param_check_mpi.cpp — under mpiexec: a data-parallel step (each rank its own
// micro-batches, one allreduce, the update) keeps parameters bitwise identical on every rank, and
// the check the trainer runs catches a rank that drifted.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/comm.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "train/param_check.h"

using namespace sftdp;

namespace {
config::ModelDims dims() { return test::tiny_dims(); }
using test::rows_of_rank;
}  // namespace

TEST(ParamCheck, DataParallelStepsKeepParametersIdenticalOnEveryRank) {
  auto comm = comm::make_mpi_communicator();
  const auto d = dims();
  const auto m_owned = model::make_model(d, cpu_ops(), 2, 8);
  auto& m = *m_owned;
  std::vector<float> p;
  model::init_params(p, m.layout(), d, 1);
  m.set_params_from_host(p);
  optim::AdamW opt(m);
  config::Config cfg;
  for (int step = 1; step <= 5; ++step) {
    m.zero_grads();
    for (int micro = 0; micro < 2; ++micro) m.forward_backward(rows_of_rank(comm->rank(), step * 2 + micro, 2, 8, d.V));
    comm->allreduce_sum(m.grads(), m.grad_buffer_floats());
    const auto s = opt.apply(cfg, 1e-3, step);
    ASSERT_FALSE(s.skipped);
    EXPECT_EQ(train::ranks_differing_from_rank0(m.params_to_host(), *comm), 0) << "after step " << step;
  }
}

TEST(ParamCheck, CatchesARankWhoseParametersDrifted) {
  auto comm = comm::make_mpi_communicator();
  std::vector<float> p = test::uniform(1000, 5);
  EXPECT_EQ(train::ranks_differing_from_rank0(p, *comm), 0);
  if (comm->rank() == comm->world() - 1) p[123] = std::nextafter(p[123], 2.0f);  // one ulp
  EXPECT_EQ(train::ranks_differing_from_rank0(p, *comm), comm->world() > 1 ? 1 : 0);
}
