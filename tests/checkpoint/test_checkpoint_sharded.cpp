// tests/checkpoint/test_checkpoint_sharded.cpp — sharded checkpoints (SPEC §5, issue 36), in one
// process: the shard files of every rank of world W1 at ZeRO stage S1 (fp32 and bf16 weights) are
// written as those ranks would (train::rank_runs: what each writes), and every rank of W2 at S2
// reads back only its runs (rank_runs' read runs) through checkpoint::Reader: bitwise the values
// written, for W in {1, 2, 4} x stages 0-3 both ways; every float is written exactly once and the
// ranks of W2 together read all of them. Also: a step_<S>/ without index.h5 is not a checkpoint
// (never listed, removed at the start of a run), keep_checkpoints prunes directories, a missing or
// damaged shard is a UserError naming the shard file and resume falls back to the older checkpoint,
// a single-file (format 1) checkpoint reads range by range through the same Reader, a failed shard
// write throws WriteError (save()'s message, no temporary file) instead of ending the process, and a
// directory consolidated into one file (save_as) loads as the same checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/hdf5_damaged_file_leaks.h"
#include "common/test_util.h"
#include "model/model_fixtures.h"
#include "sftdp/checkpoint.h"
#include "sftdp/model.h"
#include "train/checkpoint_shards.h"

using namespace sftdp;
using namespace sftdp::checkpoint;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  model::ParamLayout layout;
  train::Sharding sharding;
  std::array<std::vector<float>, kGroups> values;  // the global params, m, v
  TrainState state;
  Fixture() {
    const auto d = test::tiny_llama_dims();
    layout = model::param_layout(d);
    sharding.total = layout.total, sharding.n_decay = layout.n_decay;
    sharding.units = model::units_of(layout, d.L);
    for (int g = 0; g < kGroups; ++g) {
      values[g].assign(layout.total, 0.f);  // the padding between tensors stays 0, as in a model
      const auto u = test::uniform(layout.total, 10 + g, g == 2 ? 0.f : -1.f, 1.f);
      for (const auto& t : layout.tensors) std::copy_n(u.begin() + t.offset, t.numel, values[g].begin() + t.offset);
    }
    state.step = 6, state.epoch = 1, state.step_in_epoch = 2, state.global_batch = 8, state.optimizer_updates = 2;
    state.config_yaml = "run_name: t\n";
  }
  // Every rank of `world` writes its shard of `stage`, then the index: step_<state.step>/.
  std::string write(const std::string& dir, int world, int stage, bool bf16 = false) {
    train::Sharding s = sharding;
    s.zero_stage = stage, s.bf16_weights = bf16;
    prepare_step_dir(dir, state.step);
    std::vector<Runs> runs_of;
    std::vector<size_t> written(layout.total * kGroups, 0);
    for (int r = 0; r < world; ++r) {
      const auto rr = train::rank_runs(s, r, world);
      HostShard shard;
      shard.runs = train::runs_only(rr);
      for (int g = 0; g < kGroups; ++g)
        for (const auto& run : shard.runs[g])
          for (size_t i = run.begin; i < run.begin + run.count; ++i)
            shard.data[g].push_back(values[g][i]), ++written[g * layout.total + i];
      write_shard(dir, state.step, r, world, layout, shard);
      runs_of.push_back(shard.runs);
    }
    for (size_t i = 0; i < written.size(); ++i)
      EXPECT_EQ(written[i], 1u) << "float " << i % layout.total << " of group " << i / layout.total << " written "
                                << written[i] << " times (world " << world << ", stage " << stage << ")";
    return commit_index(dir, layout, state, stage, runs_of);
  }
};

// Reads what each rank of `world` at `stage` needs and checks it bitwise; every float is read by
// some rank.
void read_back(Fixture& f, const std::string& path, int world, int stage, const std::string& what) {
  train::Sharding s = f.sharding;
  s.zero_stage = stage;
  std::array<std::vector<char>, kGroups> seen;
  for (auto& x : seen) x.assign(f.layout.total, 0);
  for (int r = 0; r < world; ++r) {
    Reader reader(path, f.layout);
    EXPECT_EQ(reader.state().step, f.state.step);
    EXPECT_EQ(reader.state().optimizer_updates, f.state.optimizer_updates);
    const auto rr = train::rank_runs(s, r, world);
    for (int g = 0; g < kGroups; ++g)
      for (const auto& run : g == 0 ? rr.read_params : rr.read_moments) {
        std::vector<float> got(run.count, 0.f);
        reader.read(g, run.begin, run.count, got.data());
        const std::vector<float> want(f.values[g].begin() + run.begin, f.values[g].begin() + run.begin + run.count);
        // Padding between tensors is in no piece: read() leaves it as it was (0 here, as the fixture's).
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), run.count * sizeof(float)))
            << what << ": rank " << r << " of " << world << " at stage " << stage << ", group " << g << " ["
            << run.begin << ", " << run.begin + run.count << ")";
        for (size_t i = run.begin; i < run.begin + run.count; ++i) seen[g][i] = 1;
      }
  }
  for (int g = 0; g < kGroups; ++g)
    EXPECT_EQ(std::count(seen[g].begin(), seen[g].end(), 1), static_cast<long>(f.layout.total))
        << what << ": the ranks of " << world << " at stage " << stage << " did not read all of group " << g;
}

}  // namespace

TEST(ShardedCheckpoint, ReshardsAcrossWorldSizesAndStagesBitwise) {
  Fixture f;
  for (int w1 : {1, 2, 4})
    for (int s1 : {0, 1, 2, 3})
      for (bool bf16 : {false, true}) {
        if (bf16 && s1 == 0) continue;  // bf16 weights need a ZeRO stage
        test::TempDir dir;
        const std::string path = f.write(dir.path(), w1, s1, bf16);
        EXPECT_TRUE(is_sharded(path));
        for (int w2 : {1, 2, 4})
          for (int s2 : {0, 1, 2, 3})
            read_back(f, path, w2, s2,
                      "written by " + std::to_string(w1) + " ranks at stage " + std::to_string(s1) + (bf16 ? " bf16" : ""));
      }
}

TEST(ShardedCheckpoint, EveryRankWritesAboutOneWorldthAtEveryStage) {
  Fixture f;
  for (int stage : {0, 1, 2, 3}) {
    train::Sharding s = f.sharding;
    s.zero_stage = stage;
    for (int g = 0; g < kGroups; ++g) {
      size_t most = 0;
      for (int r = 0; r < 4; ++r) {
        size_t n = 0;
        const auto runs = train::rank_runs(s, r, 4);
        for (const auto& h : runs.write[g]) n += h.count;
        most = std::max(most, n);
      }
      // Units are split evenly; ZeroShard's tail (< world floats) and unit padding add little.
      EXPECT_LE(most, f.layout.total / 4 + f.sharding.units.size() * 4 + 4) << "stage " << stage << " group " << g;
    }
  }
}

TEST(ShardedCheckpoint, OldSingleFileReadsRangeByRange) {
  Fixture f;
  test::TempDir dir;
  const std::string path = save(dir.path(), f.layout, f.values[0], f.values[1], f.values[2], f.state);
  for (int w : {1, 2, 4})
    for (int stage : {0, 1, 2, 3}) read_back(f, path, w, stage, "single file");
  std::vector<float> p, m, v;
  TrainState st;
  load(path, f.layout, p, m, v, st);  // and the whole-file path still works
  EXPECT_EQ(p, f.values[0]);
}

TEST(ShardedCheckpoint, LoadAndLoadParamsReadADirectoryWhole) {
  Fixture f;
  test::TempDir dir;
  const std::string path = f.write(dir.path(), 4, 3);
  std::vector<float> p, m, v;
  TrainState st;
  load(path, f.layout, p, m, v, st);
  EXPECT_EQ(p, f.values[0]);
  EXPECT_EQ(m, f.values[1]);
  EXPECT_EQ(v, f.values[2]);
  EXPECT_EQ(st.config_yaml, f.state.config_yaml);
  std::vector<float> only;
  load_params(path, f.layout, only);
  EXPECT_EQ(only, f.values[0]);
  EXPECT_EQ(read_config(path).value_or(""), f.state.config_yaml);
}

TEST(ShardedCheckpoint, FailedShardWriteThrowsWriteErrorAndLeavesNoTemporary) {
  Fixture f;
  test::TempDir dir;
  test::write_file(step_dir(dir.path(), 5), "a file where step_5/ should be");  // its shard cannot be created
  HostShard shard;
  shard.runs[0] = {{0, 4}};
  shard.data[0] = {1, 2, 3, 4};
  try {
    write_shard(dir.path(), 5, 0, 1, f.layout, shard);
    FAIL() << "write_shard into a file succeeded";
  } catch (const WriteError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write checkpoint " + step_dir(dir.path(), 5) + "/shard_0.h5: "),
              std::string::npos)
        << e.what();
    EXPECT_STREQ(e.lib, "POSIX");
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"step_5"});
}

TEST(ShardedCheckpoint, ConsolidatedIntoOneFileLoadsTheSame) {
  Fixture f;
  test::TempDir dir;
  const std::string path = f.write(dir.path(), 4, 2);
  std::vector<float> p, m, v;
  TrainState st;
  load(path, f.layout, p, m, v, st);
  const std::string one = dir.path() + "/one.h5";
  save_as(one, f.layout, p, m, v, st);
  std::vector<float> p1, m1, v1;
  TrainState st1;
  load(one, f.layout, p1, m1, v1, st1);
  EXPECT_EQ(p1, f.values[0]);
  EXPECT_EQ(m1, f.values[1]);
  EXPECT_EQ(v1, f.values[2]);
  EXPECT_EQ(st1.step, f.state.step);
  EXPECT_EQ(st1.step_in_epoch, f.state.step_in_epoch);
  EXPECT_EQ(st1.optimizer_updates, f.state.optimizer_updates);
  EXPECT_EQ(st1.config_yaml, f.state.config_yaml);
}

TEST(ShardedCheckpoint, DirectoryWithoutIndexIsNoCheckpointAndIsRemoved) {
  Fixture f;
  test::TempDir dir;
  f.state.step = 3;
  f.write(dir.path(), 2, 1);
  f.state.step = 6;
  const std::string path = f.write(dir.path(), 2, 1);
  fs::remove(fs::path(path) / "index.h5");  // the write of step 6 died before its index
  EXPECT_FALSE(is_sharded(path));
  EXPECT_EQ(newest(dir.path()).value_or(""), step_dir(dir.path(), 3));
  EXPECT_EQ(checkpoints_newest_first(dir.path()), std::vector<std::string>{step_dir(dir.path(), 3)});
  EXPECT_NE(test::user_error_of([&] { Reader r(path, f.layout); }).find("no index.h5"), std::string::npos);
  EXPECT_EQ(remove_unfinished_writes(dir.path()), 1);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(is_sharded(step_dir(dir.path(), 3)));
}

TEST(ShardedCheckpoint, PruneDeletesOldDirectories) {
  Fixture f;
  test::TempDir dir;
  for (int64_t s : {2, 4, 6}) f.state.step = s, f.write(dir.path(), 2, 0);
  prune(dir.path(), 2);
  EXPECT_FALSE(fs::exists(step_dir(dir.path(), 2)));
  EXPECT_TRUE(is_sharded(step_dir(dir.path(), 4)));
  EXPECT_TRUE(is_sharded(step_dir(dir.path(), 6)));
}

TEST(ShardedCheckpoint, MissingOrDamagedShardNamesTheFileAndResumeFallsBack) {
  Fixture f;
  test::TempDir dir;
  f.state.step = 3;
  f.write(dir.path(), 2, 2);
  f.state.step = 6;
  const std::string path = f.write(dir.path(), 2, 2);
  const std::string shard1 = (fs::path(path) / "shard_1.h5").string();
  {  // damage the data of shard 1 (past its metadata): a checksum mismatch
    std::fstream io(shard1, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(0, std::ios::end);
    const auto size = static_cast<long>(io.tellg());
    for (long at = size / 4; at < size * 3 / 4; ++at) {
      io.seekp(at);
      io.put('\x5a');
    }
  }
  std::vector<float> p, m, v;
  TrainState st;
  const std::string why = test::user_error_of([&] { load(path, f.layout, p, m, v, st); });
  EXPECT_NE(why.find("shard_1.h5"), std::string::npos) << why;
  const auto used = load_newest(dir.path(), f.layout, p, m, v, st);
  EXPECT_EQ(used.value_or(""), step_dir(dir.path(), 3));
  EXPECT_TRUE(fs::exists(path + ".corrupt"));
  EXPECT_EQ(p, f.values[0]);
  // A missing shard is named too.
  fs::remove(fs::path(step_dir(dir.path(), 3)) / "shard_0.h5");
  const std::string missing = test::user_error_of([&] { load(step_dir(dir.path(), 3), f.layout, p, m, v, st); });
  EXPECT_NE(missing.find("shard_0.h5: is missing"), std::string::npos) << missing;
}
