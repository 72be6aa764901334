// tests/checkpoint/test_checkpoint_files.cpp — checkpoint files on disk: saves are atomic (no
// temporary left, nothing else touched, a failed write leaves nothing), newest() orders steps as
// numbers and skips stray temporary files, prune() keeps exactly the newest N, and a new run removes
// the temporary files of writes that never finished.
#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint/hand_layout.h"
#include "common/test_util.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"

namespace sftdp::checkpoint {
namespace {

using test::TempDir;

model::ParamLayout tiny_layout() { return test::make_layout({{"wte", {8, 2}}, {"ln_f.weight", {2}}}); }

class CheckpointFilesTest : public ::testing::Test {
 protected:
  std::string save_step(int64_t step, const std::string& in_dir) {
    TrainState state;
    state.step = step;
    state.config_yaml = "run_name: files\n";
    const auto params = test::uniform(layout.total, static_cast<uint64_t>(step));
    const std::vector<float> zeros(layout.total, 0.f);
    return save(in_dir, layout, params, zeros, zeros, state);
  }
  std::string save_step(int64_t step) { return save_step(step, dir.path()); }

  TempDir dir;
  model::ParamLayout layout = tiny_layout();
};

TEST_F(CheckpointFilesTest, SaveLeavesOnlyTheStepFileAndTouchesNothingElse) {
  test::write_file(dir / "notes.txt", "keep me\n");
  const std::string path = save_step(5);
  EXPECT_EQ(test::list_files(dir.path()), (std::vector<std::string>{dir / "notes.txt", path}));
  EXPECT_EQ(test::read_file(dir / "notes.txt"), "keep me\n");
}

TEST_F(CheckpointFilesTest, SaveCreatesMissingParentDirectories) {
  const std::string nested = dir / "run/checkpoints";
  const std::string path = save_step(2, nested);
  EXPECT_EQ(path, nested + "/step_2.h5");
  EXPECT_TRUE(test::file_exists(path));
}

TEST_F(CheckpointFilesTest, SavingTheSameStepAgainReplacesTheFile) {
  save_step(4);
  TrainState state;
  state.step = 4;
  state.epoch = 9;
  const std::vector<float> ones(layout.total, 1.f);
  save(dir.path(), layout, ones, ones, ones, state);
  std::vector<float> p, m, v;
  TrainState loaded;
  load(dir / "step_4.h5", layout, p, m, v, loaded);
  EXPECT_EQ(p, ones);
  EXPECT_EQ(loaded.epoch, 9);
  EXPECT_EQ(test::list_files(dir.path()).size(), 1u);
}

TEST_F(CheckpointFilesTest, FailedWriteDiesAndLeavesNoFile) {
  // Two tensors with one name: HDF5 refuses the second dataset halfway through the file.
  model::ParamLayout bad = layout;
  bad.tensors[1].name = "wte";
  const std::vector<float> zeros(bad.total, 0.f);
  TrainState state;
  state.step = 7;
  EXPECT_EXIT(save(dir.path(), bad, zeros, zeros, zeros, state), ::testing::ExitedWithCode(1),
              "HDF5 error: .*H5Dcreate2.*temporary file removed");
  EXPECT_TRUE(test::list_files(dir.path()).empty());
}

TEST_F(CheckpointFilesTest, NewestOfAMissingOrEmptyDirectoryIsNothing) {
  EXPECT_FALSE(newest(dir / "does_not_exist").has_value());
  EXPECT_FALSE(newest(dir.path()).has_value());
}

TEST_F(CheckpointFilesTest, NewestComparesStepsAsNumbers) {
  save_step(9);
  const std::string ten = save_step(10);
  EXPECT_EQ(newest(dir.path()), ten);
  const std::string hundred = save_step(100);
  EXPECT_EQ(newest(dir.path()), hundred);
}

TEST_F(CheckpointFilesTest, NewestIgnoresStrayTemporaryAndForeignFiles) {
  const std::string three = save_step(3);
  // A crash mid-save leaves a temporary file; other names are not checkpoints either.
  test::write_file(dir / ".step_7.h5.tmp.12345", "half a file");
  for (const char* name : {"step_8.h5.tmp", "step_9.h5.bak", "step_x.h5", "step_.h5",
                           "step_011.h5", "step_-4.h5", "model_20.h5", "step_99999999999999999999.h5"})
    test::write_file(dir / name, "not a checkpoint");
  test::run_command("mkdir " + (dir / "step_50.h5"));  // a directory is not a checkpoint
  EXPECT_EQ(newest(dir.path()), three);
}

TEST_F(CheckpointFilesTest, PruneKeepsExactlyTheNewestN) {
  for (int64_t s : {1, 2, 3, 9, 10}) save_step(s);
  test::write_file(dir / ".step_11.h5.tmp.1", "stray");
  test::write_file(dir / "notes.txt", "unrelated");
  prune(dir.path(), 2);
  EXPECT_EQ(test::list_files(dir.path()),
            (std::vector<std::string>{dir / ".step_11.h5.tmp.1", dir / "notes.txt",
                                      dir / "step_10.h5", dir / "step_9.h5"}));
  prune(dir.path(), 1);
  EXPECT_FALSE(test::file_exists(dir / "step_9.h5"));
  EXPECT_TRUE(test::file_exists(dir / "step_10.h5"));
}

TEST_F(CheckpointFilesTest, PruneWithNonPositiveKeepOrFewFilesDeletesNothing) {
  for (int64_t s : {1, 2, 3}) save_step(s);
  prune(dir.path(), 0);
  prune(dir.path(), -1);
  prune(dir.path(), 3);
  prune(dir.path(), 10);
  EXPECT_EQ(test::list_files(dir.path()).size(), 3u);
  prune(dir / "does_not_exist", 1);  // nothing to do, no error
}

TEST_F(CheckpointFilesTest, UnfinishedWritesAreRemovedAndNothingElse) {
  // A writer killed mid-save (SIGKILL, its node lost) leaves its temporary file behind; the next
  // run removes exactly those files: not the checkpoints, refused ones or anything else.
  const std::string three = save_step(3);
  for (const char* name : {".step_7.h5.tmp.12345", ".step_10.h5.tmp.1"})
    test::write_file(dir / name, "half a file");
  const std::vector<std::string> kept = {".step_7.h5.tmp.x", ".step_07.h5.tmp.5", "step_8.h5.tmp.3",
                                         ".step_9.h5.tmp.", ".notes.h5.tmp.4", "step_4.h5.corrupt", "notes.txt"};
  for (const std::string& name : kept) test::write_file(dir / name, "not ours to delete");
  test::run_command("mkdir " + (dir / ".step_11.h5.tmp.2"));  // a directory is not a write
  EXPECT_EQ(remove_unfinished_writes(dir.path()), 2);
  std::vector<std::string> want = {three};  // list_files: regular files only
  for (const std::string& name : kept) want.push_back(dir / name);
  std::vector<std::string> got = test::list_files(dir.path());
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(remove_unfinished_writes(dir.path()), 0);
  EXPECT_TRUE(test::file_exists(dir / ".step_11.h5.tmp.2"));
  EXPECT_EQ(remove_unfinished_writes(dir / "does_not_exist"), 0);
}

}  // namespace
}  // namespace sftdp::checkpoint
