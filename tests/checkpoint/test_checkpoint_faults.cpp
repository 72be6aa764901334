// tests/checkpoint/test_checkpoint_faults.cpp — checkpoints under faults: a save onto a full file
// system dies naming the checkpoint and the OS reason and leaves no file; damaged tensor data
// (caught by the Fletcher-32 checksum) and damaged metadata are refused on load; load_newest()
// falls back past refused checkpoints, moves them aside where newest()/prune() never look, warns
// naming both files, and when nothing loads throws a UserError naming them all, renaming nothing.
#include <hdf5.h>
#include <sys/mount.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/hand_layout.h"
#include "common/hdf5_damaged_file_leaks.h"
#include "common/test_util.h"
#include "sftdp/check.h"
#include "sftdp/checkpoint.h"

using sftdp::test::user_error_of;

namespace sftdp::checkpoint {
namespace {

using test::TempDir;

// ~24 KiB per tensor group: large enough that a few kB of file system do not hold a checkpoint.
model::ParamLayout fault_layout() {
  return test::make_layout({{"wte", {64, 32}}, {"h.0.mlp.fc.weight", {32, 64}}, {"ln_f.weight", {32}}});
}

// Overwrites `bytes.size()` bytes of the file at `offset`.
void overwrite(const std::string& path, long offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// File offset of the (first chunk of the) data of dataset `where`.
long data_offset(const std::string& path, const char* where) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dset = H5Dopen2(file, where, H5P_DEFAULT);
  haddr_t addr = HADDR_UNDEF;
  hsize_t chunk_offset[2] = {0, 0};
  unsigned filter_mask = 0;
  hsize_t size = 0;
  const hid_t space = H5Dget_space(dset);
  if (H5Dget_chunk_info(dset, space, 0, chunk_offset, &filter_mask, &addr, &size) < 0)
    addr = H5Dget_offset(dset);  // a contiguous dataset
  H5Sclose(space);
  H5Dclose(dset);
  H5Fclose(file);
  return addr == HADDR_UNDEF ? -1 : static_cast<long>(addr);
}

class CheckpointFaultsTest : public ::testing::Test {
 protected:
  std::string save_step(int64_t step, const std::string& in_dir) {
    TrainState state;
    state.step = step;
    state.epoch = 1;
    state.optimizer_updates = step / 2;
    state.config_yaml = "run_name: faults\n";
    const auto params = test::uniform(layout.total, static_cast<uint64_t>(step));
    const std::vector<float> m(layout.total, 0.f), v(layout.total, 1e-8f);
    return save(in_dir, layout, params, m, v, state);
  }
  std::string save_step(int64_t step) { return save_step(step, dir.path()); }

  // load_newest() with stderr captured into `warnings`.
  std::optional<std::string> load_newest_here(TrainState& state) {
    std::vector<float> p, m, v;
    ::testing::internal::CaptureStderr();
    std::optional<std::string> got;
    try {
      got = load_newest(dir.path(), layout, p, m, v, state);
    } catch (...) {
      warnings = ::testing::internal::GetCapturedStderr();
      throw;
    }
    warnings = ::testing::internal::GetCapturedStderr();
    return got;
  }

  TempDir dir;
  model::ParamLayout layout = fault_layout();
  std::string warnings;
};

TEST_F(CheckpointFaultsTest, GarbageInTensorDataFailsTheChecksum) {
  const std::string path = save_step(4);
  const long at = data_offset(path, "/opt/m/h.0.mlp.fc.weight");
  ASSERT_GT(at, 0);
  // Finite floats: without a checksum these would load as silently wrong moments.
  overwrite(path, at + 100, std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  std::vector<float> p, m, v;
  TrainState s;
  EXPECT_EQ(user_error_of([&] { load(path, layout, p, m, v, s); }),
            path + ": /opt/m/h.0.mlp.fc.weight could not be read (the file is corrupt)");
}

TEST_F(CheckpointFaultsTest, GarbageInMetadataIsRefused) {
  const std::string path = save_step(4);
  // Past the superblock, into the root group's object header.
  overwrite(path, 48, std::string(64, '\x5a'));
  std::vector<float> p, m, v;
  TrainState s;
  EXPECT_CONTAINS(user_error_of([&] { load(path, layout, p, m, v, s); }), path + ": ");
}

TEST_F(CheckpointFaultsTest, AChangedByteInARootAttributeFailsTheHeaderChecksum) {
  // The step attribute's 8 bytes, found by value; one byte changed still makes a valid step, so
  // only the object header checksum (HDF5 1.8 file format) can tell.
  const int64_t step = 0x0123456789AB;
  const std::string path = save_step(step);
  const std::string bytes = test::read_file(path);
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&step), sizeof step));
  ASSERT_NE(at, std::string::npos);
  overwrite(path, static_cast<long>(at), "\x01");
  std::vector<float> p, m, v;
  TrainState s;
  EXPECT_EQ(user_error_of([&] { load(path, layout, p, m, v, s); }),
            path + ": not a readable HDF5 checkpoint (looking up attribute 'format_version')");
}

TEST_F(CheckpointFaultsTest, LoadNewestOfAnEmptyOrMissingDirectoryIsNothing) {
  TrainState s;
  EXPECT_FALSE(load_newest_here(s).has_value());
  std::vector<float> p, m, v;
  EXPECT_FALSE(load_newest(dir / "nope", layout, p, m, v, s).has_value());
}

TEST_F(CheckpointFaultsTest, LoadNewestTakesTheNewestWhenItLoads) {
  save_step(2);
  const std::string four = save_step(4);
  TrainState s;
  EXPECT_EQ(load_newest_here(s), four);
  EXPECT_EQ(s.step, 4);
  EXPECT_EQ(warnings, "");
}

// Each way the newest file can be damaged: the previous checkpoint is used instead, the damaged
// one is kept as step_<S>.h5.corrupt, and the warning names both files and the reason.
struct Damage {
  const char* name;
  void (*apply)(const std::string& path);
  const char* reason;  // part of the refusal
};

void truncate_half(const std::string& path) {
  const std::string bytes = test::read_file(path);
  test::write_file(path, bytes.substr(0, bytes.size() / 2));
}
void garbage_header(const std::string& path) { overwrite(path, 0, "garbage!"); }
void drop_tensor(const std::string& path) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  H5Ldelete(f, "/opt/v/wte", H5P_DEFAULT);
  H5Fclose(f);
}
void nan_param(const std::string& path) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, "/params/ln_f.weight", H5P_DEFAULT);
  std::vector<float> x(32, NAN);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data());
  H5Dclose(d);
  H5Fclose(f);
}

class NewestDamaged : public CheckpointFaultsTest, public ::testing::WithParamInterface<Damage> {};

TEST_P(NewestDamaged, FallsBackToThePreviousAndMovesTheDamagedOneAside) {
  save_step(3);
  const std::string six = save_step(6), nine = save_step(9);
  GetParam().apply(nine);
  TrainState s;
  EXPECT_EQ(load_newest_here(s), six);
  EXPECT_EQ(s.step, 6);
  EXPECT_CONTAINS(warnings, "warning: " + nine + ": ");
  EXPECT_CONTAINS(warnings, GetParam().reason);
  EXPECT_CONTAINS(warnings, "resuming from the older " + six + " instead");
  EXPECT_CONTAINS(warnings, nine + ".corrupt");
  EXPECT_FALSE(test::file_exists(nine));
  EXPECT_TRUE(test::file_exists(nine + ".corrupt"));
  // newest() and prune() no longer see it: a prune keeps good files, never the damaged one.
  EXPECT_EQ(newest(dir.path()), six);
  prune(dir.path(), 1);
  EXPECT_EQ(test::list_files(dir.path()), (std::vector<std::string>{six, nine + ".corrupt"}));
  // A second resume does not trip on it again.
  EXPECT_EQ(load_newest_here(s), six);
  EXPECT_EQ(warnings, "");
}

INSTANTIATE_TEST_SUITE_P(
    Damages, NewestDamaged,
    ::testing::Values(Damage{"Truncated", truncate_half, "not a readable HDF5 checkpoint"},
                      Damage{"GarbageHeader", garbage_header, "not a readable HDF5 checkpoint"},
                      Damage{"MissingTensor", drop_tensor, "/opt/v/wte is missing"},
                      Damage{"NanParam", nan_param, "/params/ln_f.weight element 0 is nan"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(CheckpointFaultsTest, SeveralDamagedAreAllSkippedAndAsideNamesNeverOverwrite) {
  const std::string two = save_step(2), five = save_step(5), seven = save_step(7);
  test::write_file(five + ".corrupt", "an earlier refused file");
  truncate_half(five);
  garbage_header(seven);
  TrainState s;
  EXPECT_EQ(load_newest_here(s), two);
  EXPECT_EQ(test::read_file(five + ".corrupt"), "an earlier refused file");
  EXPECT_TRUE(test::file_exists(five + ".corrupt.2"));
  EXPECT_TRUE(test::file_exists(seven + ".corrupt"));
  EXPECT_CONTAINS(warnings, seven + ": not a readable HDF5 checkpoint; resuming from the older " + two);
  EXPECT_CONTAINS(warnings, five + ": not a readable HDF5 checkpoint; resuming from the older " + two);
}

TEST_F(CheckpointFaultsTest, NoneLoadableIsAUserErrorNamingEachAndRenamesNothing) {
  const std::string one = save_step(1), two = save_step(2);
  truncate_half(one);
  garbage_header(two);
  const auto before = test::list_files(dir.path());
  TrainState s;
  const std::string msg = user_error_of([&] { load_newest_here(s); });
  EXPECT_CONTAINS(msg, "no checkpoint in " + dir.path() + " can be resumed from (2 refused)");
  EXPECT_CONTAINS(msg, two + ": not a readable HDF5 checkpoint");
  EXPECT_CONTAINS(msg, one + ": not a readable HDF5 checkpoint");
  EXPECT_EQ(test::list_files(dir.path()), before);
  // A single checkpoint: its own message, unchanged.
  TempDir other;
  const std::string only = save_step(3, other.path());
  garbage_header(only);
  std::vector<float> p, m, v;
  EXPECT_EQ(user_error_of([&] { load_newest(other.path(), layout, p, m, v, s); }),
            only + ": not a readable HDF5 checkpoint");
}

TEST_F(CheckpointFaultsTest, ADifferentModelRefusesEveryCheckpointAndMovesNothing) {
  save_step(1);
  save_step(2);
  const auto before = test::list_files(dir.path());
  layout = test::make_layout({{"wte", {64, 48}}, {"h.0.mlp.fc.weight", {32, 64}}, {"ln_f.weight", {32}}});
  TrainState s;
  EXPECT_CONTAINS(user_error_of([&] { load_newest_here(s); }), "has shape [64,32], the model needs [64,48]");
  EXPECT_EQ(test::list_files(dir.path()), before);
}

// A file system of `kib` KiB mounted on `dir` for the test (as root; skipped where mounting is
// refused: a container without CAP_SYS_ADMIN, a non-root user).
class FullDiskTest : public CheckpointFaultsTest {
 protected:
  void mount_tmpfs(const std::string& where, int kib) {
    const std::string opts = "size=" + std::to_string(kib) + "k";
    if (::mount("tmpfs", where.c_str(), "tmpfs", 0, opts.c_str()) != 0)
      GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
    mounted_ = where;
  }
  void TearDown() override {
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
  }
  std::string mounted_;
};

TEST_F(FullDiskTest, SaveNamesTheCheckpointAndTheOsReasonAndLeavesNoFile) {
  const std::string small = dir / "small";
  test::run_command("mkdir -p " + small);
  mount_tmpfs(small, 80);  // one checkpoint (~52 KiB) fits, two do not
  if (IsSkipped()) return;
  const std::string first = save_step(1, small);
  EXPECT_EXIT(save_step(2, small), ::testing::ExitedWithCode(1),
              "cannot write checkpoint " + small + "/step_2.h5: No space left on device \\(errno 28\\)"
              ".*temporary file removed, earlier checkpoints untouched");
  EXPECT_EQ(test::list_files(small), std::vector<std::string>{first});  // no temporary left
  std::vector<float> p, m, v;
  TrainState s;
  load(first, layout, p, m, v, s);
  EXPECT_EQ(s.step, 1);
}

}  // namespace
}  // namespace sftdp::checkpoint
