// tests/train/test_checkpoint_reshard_mpi.cpp — under mpiexec (2 and 4 ranks): a sharded checkpoint
// (SPEC §5, issue 36) written by the real models and optimisers of every rank at ZeRO stage S1
// (train::snapshot: each rank copies only what it writes) and read back at stage S2 (train::read_into:
// each rank reads only what it holds) gives bitwise the parameters and both moments, for S1, S2 in
// 0-3 on this world; and one written by rank 0 alone (world 1, the no-communicator optimiser) reads
// back on this world at every stage, and one written on this world reads back on rank 0 alone.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/checkpoint.h"
#include "sftdp/comm.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"
#include "train/checkpoint_shards.h"

using namespace sftdp;

namespace {

constexpr int kB = 2, kT = 8;

struct Trainee {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<optim::AdamW> opt;
  int stage;
  Trainee(comm::Communicator* c, const config::ModelDims& d, int zero_stage) : stage(zero_stage) {
    m = model::make_model(d, cpu_ops(), kB, kT, false, false, {}, stage >= 2 ? stage : 0);
    opt = c ? std::make_unique<optim::AdamW>(*m, *c, stage) : std::make_unique<optim::AdamW>(*m);
  }
  void set(const std::vector<float>& p, const std::vector<float>& mm, const std::vector<float>& v) {
    m->set_trainable_from_host(p);
    opt->set_moments_from_host(mm, v);
  }
};

// All ranks: the global vectors (rank 0 receives them; the others get empty ones).
struct Global {
  std::vector<float> p, m, v;
};
Global gather(Trainee& run) {
  Global g;
  g.p = run.m->trainable_to_host();  // a collective where sharded
  run.opt->moments_to_host(g.m, g.v);
  return g;
}

// Writes the sharded checkpoint of step 5 of this world's ranks into dir.
void save_sharded(comm::Communicator& c, Trainee& run, const std::string& dir) {
  checkpoint::TrainState st;
  st.step = 5, st.optimizer_updates = 5, st.config_yaml = "x: 1\n";
  if (c.rank() == 0) checkpoint::prepare_step_dir(dir, st.step);
  c.barrier();
  const auto shard = train::snapshot(*run.m, *run.opt, run.stage, c.rank(), c.world());
  checkpoint::write_shard(dir, st.step, c.rank(), c.world(), run.m->trainable_layout(), shard);
  c.barrier();
  if (c.rank() == 0) {
    std::vector<checkpoint::Runs> runs;
    const auto s = train::sharding_of(*run.m, run.stage);
    for (int r = 0; r < c.world(); ++r) runs.push_back(train::runs_only(train::rank_runs(s, r, c.world())));
    checkpoint::commit_index(dir, run.m->trainable_layout(), st, run.stage, runs);
  }
  c.barrier();
}

}  // namespace

TEST(CheckpointReshard, EveryStagePairOnThisWorldIsBitwise) {
  auto c = comm::make_mpi_communicator();
  const auto d = test::tiny_llama_dims();
  for (int s1 : {0, 1, 2, 3}) {
    std::string dir;
    test::TempDir tmp;  // every rank makes one; rank 0's is the checkpoint directory
    dir = tmp.path();
    std::vector<char> buf(dir.begin(), dir.end());
    buf.resize(4096, '\0');
    c->broadcast_host(buf.data(), buf.size(), 0);
    dir = buf.data();
    Trainee w(c.get(), d, s1);
    const size_t n = w.m->trainable_layout().total;
    const auto p = test::uniform(n, 80 + s1), m = test::uniform(n, 90 + s1), v = test::uniform(n, 100 + s1, 0.f, 1.f);
    w.set(p, m, v);
    save_sharded(*c, w, dir);
    const std::string path = checkpoint::step_dir(dir, 5);
    for (int s2 : {0, 1, 2, 3}) {
      Trainee r(c.get(), d, s2);
      checkpoint::Reader reader(path, r.m->trainable_layout());
      train::read_into(reader, *r.m, *r.opt, s2, c->rank(), c->world());
      const Global g = gather(r);
      if (c->rank() == 0) {
        EXPECT_EQ(g.p, p) << "written at stage " << s1 << ", read at " << s2;
        EXPECT_EQ(g.m, m) << "written at stage " << s1 << ", read at " << s2;
        EXPECT_EQ(g.v, v) << "written at stage " << s1 << ", read at " << s2;
      }
    }
    c->barrier();  // before rank 0's TempDir goes
  }
}

TEST(CheckpointReshard, WorldOneToThisWorldAndBack) {
  auto c = comm::make_mpi_communicator();
  const auto d = test::tiny_llama_dims();
  test::TempDir tmp;
  std::vector<char> buf(tmp.path().begin(), tmp.path().end());
  buf.resize(4096, '\0');
  c->broadcast_host(buf.data(), buf.size(), 0);
  const std::string dir = buf.data();
  auto model0 = model::make_model(d, cpu_ops(), kB, kT, false, false, {}, 0);
  const size_t n = model0->trainable_layout().total;
  const auto p = test::uniform(n, 7), m = test::uniform(n, 8), v = test::uniform(n, 9, 0.f, 1.f);
  checkpoint::TrainState st;
  st.step = 5, st.optimizer_updates = 5, st.config_yaml = "x: 1\n";
  if (c->rank() == 0) {  // world 1: rank 0 alone, the optimiser without a communicator
    Trainee one(nullptr, d, 0);
    one.set(p, m, v);
    checkpoint::prepare_step_dir(dir + "/one", st.step);
    const auto shard = train::snapshot(*one.m, *one.opt, 0, 0, 1);
    checkpoint::write_shard(dir + "/one", st.step, 0, 1, one.m->trainable_layout(), shard);
    checkpoint::commit_index(dir + "/one", one.m->trainable_layout(), st, 0,
                             {train::runs_only(train::rank_runs(train::sharding_of(*one.m, 0), 0, 1))});
  }
  c->barrier();
  for (int s2 : {0, 1, 2, 3}) {
    Trainee r(c.get(), d, s2);
    checkpoint::Reader reader(checkpoint::step_dir(dir + "/one", 5), r.m->trainable_layout());
    train::read_into(reader, *r.m, *r.opt, s2, c->rank(), c->world());
    const Global g = gather(r);
    if (c->rank() == 0) {
      EXPECT_EQ(g.p, p) << "world 1 -> " << c->world() << " ranks at stage " << s2;
      EXPECT_EQ(g.m, m) << "world 1 -> " << c->world() << " ranks at stage " << s2;
      EXPECT_EQ(g.v, v) << "world 1 -> " << c->world() << " ranks at stage " << s2;
    }
  }
  for (int s1 : {0, 1, 2, 3}) {  // this world -> rank 0 alone
    Trainee w(c.get(), d, s1);
    w.set(p, m, v);
    save_sharded(*c, w, dir + "/many" + std::to_string(s1));
    if (c->rank() == 0) {
      Trainee one(nullptr, d, 0);
      checkpoint::Reader reader(checkpoint::step_dir(dir + "/many" + std::to_string(s1), 5), one.m->trainable_layout());
      train::read_into(reader, *one.m, *one.opt, 0, 0, 1);
      const Global g = gather(one);
      EXPECT_EQ(g.p, p) << c->world() << " ranks at stage " << s1 << " -> world 1";
      EXPECT_EQ(g.m, m) << c->world() << " ranks at stage " << s1 << " -> world 1";
      EXPECT_EQ(g.v, v) << c->world() << " ranks at stage " << s1 << " -> world 1";
    }
    c->barrier();
  }
}
