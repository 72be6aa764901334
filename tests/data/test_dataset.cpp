// tests/data/test_dataset.cpp — sftdp::data::Dataset on files written here with the HDF5 C API:
// exact values for rows read in any order across two files, optional datasets, and one test per
// validation error class (each must name the file and the dataset or row at fault).
#include <hdf5.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <optional>

#include "common/test_util.h"
#include "sftdp/check.h"
#include "sftdp/data.h"

using sftdp::test::user_error_of;

namespace {

using sftdp::UserError;
using sftdp::data::Batch;
using sftdp::data::Dataset;

constexpr int kVocab = 264;

// One dataset to write: name, file and memory types, dims, data.
struct Column {
  std::string name;
  hid_t file_type, mem_type;
  std::vector<hsize_t> dims;
  const void* data;
};

// Writes the columns and (unless nullopt) the root attribute vocab_size, with the plain C API.
void write_h5(const std::string& path, const std::vector<Column>& columns,
              std::optional<int64_t> vocab_size = kVocab) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const auto& c : columns) {
    const hid_t space = H5Screate_simple(static_cast<int>(c.dims.size()), c.dims.data(), nullptr);
    const hid_t ds =
        H5Dcreate2(file, c.name.c_str(), c.file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    ASSERT_GE(H5Dwrite(ds, c.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.data), 0);
    H5Dclose(ds);
    H5Sclose(space);
  }
  if (vocab_size) {
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attr =
        H5Acreate2(file, "vocab_size", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &*vocab_size), 0);
    H5Aclose(attr);
    H5Sclose(space);
  }
  H5Fclose(file);
}

// Known contents: every value is a formula of (file tag, row, position), so reads can be checked.
struct Content {
  int N, T, tag;
  std::vector<int32_t> inputs, targets, segments, positions;
  std::vector<float> weights;
  int32_t input(int r, int t) const { return (tag * 50 + r * 7 + t) % 256; }
  int32_t target(int r, int t) const { return (tag * 31 + r * 3 + 2 * t) % kVocab; }
  float weight(int r, int t) const { return 0.5f * static_cast<float>((r + t) % 3); }
  int32_t segment(int, int t) const { return 1 + t / 4; }
  int32_t position(int, int t) const { return t % 4; }
};

Content make_content(int N, int T, int tag) {
  Content c{N, T, tag, {}, {}, {}, {}, {}};
  for (int r = 0; r < N; ++r)
    for (int t = 0; t < T; ++t) {
      c.inputs.push_back(c.input(r, t));
      c.targets.push_back(c.target(r, t));
      c.weights.push_back(c.weight(r, t));
      c.segments.push_back(c.segment(r, t));
      c.positions.push_back(c.position(r, t));
    }
  return c;
}

std::vector<Column> columns_of(const Content& c, bool with_optional) {
  const std::vector<hsize_t> d = {hsize_t(c.N), hsize_t(c.T)};
  std::vector<Column> cols = {
      {"/inputs", H5T_STD_I32LE, H5T_NATIVE_INT32, d, c.inputs.data()},
      {"/targets", H5T_STD_I32BE, H5T_NATIVE_INT32, d, c.targets.data()},  // BE: converted
      {"/loss_weights", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, d, c.weights.data()}};
  if (with_optional) {
    cols.push_back({"/segment_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, d, c.segments.data()});
    cols.push_back({"/positions", H5T_STD_I32LE, H5T_NATIVE_INT32, d, c.positions.data()});
  }
  return cols;
}

// Batch row b must hold row r of content c; optional fields checked when present.
void expect_row(const Batch& batch, int b, const Content& c, int r, bool file_has_optional) {
  for (int t = 0; t < c.T; ++t) {
    const size_t i = static_cast<size_t>(b) * c.T + t;
    ASSERT_EQ(batch.inputs[i], c.input(r, t)) << "batch row " << b << " t " << t;
    ASSERT_EQ(batch.targets[i], c.target(r, t)) << "batch row " << b << " t " << t;
    ASSERT_EQ(batch.loss_weights[i], c.weight(r, t)) << "batch row " << b << " t " << t;
    if (batch.has_segments()) {
      ASSERT_EQ(batch.segment_ids[i], file_has_optional ? c.segment(r, t) : 1);
    }
    if (batch.has_positions()) {
      ASSERT_EQ(batch.positions[i], file_has_optional ? c.position(r, t) : t);
    }
  }
}

class DatasetTest : public ::testing::Test {
 protected:
  sftdp::test::TempDir dir;
  std::string a = dir / "a.h5", b = dir / "b.h5";
  Content ca = make_content(5, 6, 1), cb = make_content(7, 6, 2);
};

TEST_F(DatasetTest, ReadsRowsInRequestedOrderAcrossTwoFiles) {
  write_h5(a, columns_of(ca, false));
  write_h5(b, columns_of(cb, false));
  Dataset ds({a, b}, 6, kVocab, 16);
  EXPECT_EQ(ds.rows(), 12);
  EXPECT_EQ(ds.T(), 6);
  const std::vector<int64_t> rows = {9, 0, 4, 5, 11, 2, 9, 6};  // repeats, both files, unsorted
  Batch batch;
  ds.read_rows(rows, batch);
  ASSERT_EQ(batch.B, 8);
  ASSERT_EQ(batch.T, 6);
  EXPECT_FALSE(batch.has_segments());
  EXPECT_FALSE(batch.has_positions());
  for (int i = 0; i < batch.B; ++i) {
    const int64_t g = rows[i];
    if (g < 5)
      expect_row(batch, i, ca, static_cast<int>(g), false);
    else
      expect_row(batch, i, cb, static_cast<int>(g - 5), false);
  }
}

TEST_F(DatasetTest, ManyDisjointRunsComeBackInRequestOrder) {
  const Content big = make_content(400, 5, 3);
  write_h5(a, columns_of(big, true));
  Dataset ds({a}, 5, kVocab, 16);
  // Descending, with ~60 gaps: more runs than one read takes (32), scattered back in order.
  std::vector<int64_t> rows;
  for (int64_t r = 399; r >= 0; r -= (r % 7 == 0 ? 5 : 1)) rows.push_back(r);
  Batch batch;
  ds.read_rows(rows, batch);
  ASSERT_EQ(batch.B, static_cast<int>(rows.size()));
  for (int i = 0; i < batch.B; ++i) expect_row(batch, i, big, static_cast<int>(rows[i]), true);
}

TEST_F(DatasetTest, OptionalDatasetsAreReadAndDefaultedForFilesWithoutThem) {
  write_h5(a, columns_of(ca, true));
  write_h5(b, columns_of(cb, false));
  Dataset ds({a, b}, 6, kVocab, 16);
  Batch batch;
  ds.read_rows({6, 1}, batch);
  ASSERT_TRUE(batch.has_segments());
  ASSERT_TRUE(batch.has_positions());
  expect_row(batch, 0, cb, 1, false);  // no optional datasets: segment 1, positions 0..T-1
  expect_row(batch, 1, ca, 1, true);
}

TEST_F(DatasetTest, MissingFileSuggestsSftPrepare) {
  const std::string msg = user_error_of([&] { Dataset ds({dir / "nope.h5"}, 6, kVocab, 16); });
  EXPECT_EQ(msg, dir / "nope.h5" + ": not found (run sft_prepare first?)");
}

TEST_F(DatasetTest, NotAnHdf5File) {
  sftdp::test::write_file(a, "{\"prompt\": \"jsonl, not hdf5\"}\n");
  EXPECT_CONTAINS(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }), a + ": not an HDF5 file");
}

TEST_F(DatasetTest, MissingRequiredDatasetIsNamed) {
  auto cols = columns_of(ca, false);
  cols.erase(cols.begin() + 1);  // no /targets
  write_h5(a, cols);
  EXPECT_CONTAINS(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
                  a + ": missing dataset /targets");
}

TEST_F(DatasetTest, WrongTypesNameDatasetExpectedAndFound) {
  std::vector<double> as_double(ca.targets.begin(), ca.targets.end());
  auto cols = columns_of(ca, false);
  cols[1] = {"/targets", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, cols[1].dims, as_double.data()};
  write_h5(a, cols);
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
            a + ": /targets must be int32, found float64");

  cols = columns_of(ca, false);
  cols[2] = {"/loss_weights", H5T_STD_I32LE, H5T_NATIVE_INT32, cols[2].dims, ca.inputs.data()};
  write_h5(a, cols);
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
            a + ": /loss_weights must be float32, found int32");

  std::vector<int64_t> wide(ca.inputs.begin(), ca.inputs.end());
  cols = columns_of(ca, true);
  cols[0] = {"/inputs", H5T_STD_I64LE, H5T_NATIVE_INT64, cols[0].dims, wide.data()};
  write_h5(a, cols);
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
            a + ": /inputs must be int32, found int64");

  cols = columns_of(ca, true);
  cols[3] = {"/segment_ids", H5T_STD_U32LE, H5T_NATIVE_INT32, cols[3].dims, ca.segments.data()};
  write_h5(a, cols);
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
            a + ": /segment_ids must be int32, found uint32");
}

TEST_F(DatasetTest, WrongRankAndDisagreeingShapes) {
  auto cols = columns_of(ca, false);
  cols[2].dims = {hsize_t(ca.N * ca.T)};
  write_h5(a, cols);
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
            a + ": /loss_weights must have rank 2 [N, T], found rank 1");

  cols = columns_of(ca, true);
  cols[4].dims = {hsize_t(ca.N - 1), hsize_t(ca.T)};
  write_h5(a, cols);
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
            a + ": /positions has shape [4, 6] but /inputs has [5, 6]");
}

TEST_F(DatasetTest, RowLengthMustEqualMaxTargetLength) {
  write_h5(a, columns_of(ca, false));
  write_h5(b, columns_of(make_content(3, 8, 2), false));
  EXPECT_EQ(user_error_of([&] {
              Dataset ds({a, b}, 6, kVocab, 16);
            }),
            b + ": rows have T=8 but max_target_length is 6");
}

TEST_F(DatasetTest, VocabSizeAttributeMissingOrLargerThanModel) {
  write_h5(a, columns_of(ca, false), std::nullopt);
  EXPECT_CONTAINS(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
                  a + ": root attribute vocab_size missing");
  write_h5(a, columns_of(ca, false), 50257);
  EXPECT_CONTAINS(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }),
                  a + ": vocab_size 50257 is larger than the model's vocab_size 264");
}

TEST_F(DatasetTest, EmptyFileIsAnError) {
  write_h5(a, columns_of(make_content(0, 6, 1), false));
  EXPECT_EQ(user_error_of([&] { Dataset ds({a}, 6, kVocab, 16); }), a + ": /inputs has no rows");
}

TEST_F(DatasetTest, EachBadValueNamesFileDatasetRowAndPosition) {
  write_h5(a, columns_of(ca, true));
  struct Case {
    std::function<void(Content&)> damage;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](Content& c) { c.inputs[3 * 6 + 2] = 300; },
       ": /inputs row 3 position 2: token id 300 outside [0, 264)"},
      {[](Content& c) { c.targets[1 * 6 + 0] = -1; },
       ": /targets row 1 position 0: token id -1 outside [0, 264)"},
      {[](Content& c) { c.weights[4 * 6 + 5] = -0.5f; },
       ": /loss_weights row 4 position 5: loss weight -0.5 must be finite and >= 0"},
      {[](Content& c) { c.weights[0 * 6 + 1] = std::nanf(""); },
       ": /loss_weights row 0 position 1: loss weight nan must be finite and >= 0"},
      {[](Content& c) { c.segments[2 * 6 + 3] = -2; },
       ": /segment_ids row 2 position 3: segment id -2 is negative"},
      {[](Content& c) { c.positions[2 * 6 + 4] = 16; },
       ": /positions row 2 position 4: position 16 outside [0, 16)"},
  };
  for (const auto& k : cases) {
    Content bad = make_content(5, 6, 2);
    k.damage(bad);
    write_h5(b, columns_of(bad, true));
    Dataset ds({a, b}, 6, kVocab, 16);  // opening does not read values
    Batch batch;
    EXPECT_EQ(user_error_of([&] { ds.read_rows({0, 9, 8, 7, 6, 5}, batch); }), b + k.message);
  }
}

TEST_F(DatasetTest, TokenIdsAreCheckedAgainstTheFilesVocabSize) {
  write_h5(a, columns_of(ca, false), 60);  // smaller than the model's 264: ids must be < 60
  Dataset ds({a}, 6, kVocab, 16);
  Batch batch;
  EXPECT_EQ(user_error_of([&] { ds.read_rows({4}, batch); }),
            a + ": /inputs row 4 position 0: token id 78 outside [0, 60)");
}

TEST_F(DatasetTest, BadValueIsOnlySeenWhenItsRowIsRead) {
  Content bad = make_content(5, 6, 1);
  bad.inputs[3 * 6 + 1] = 9999;
  write_h5(a, columns_of(bad, false));
  Dataset ds({a}, 6, kVocab, 16);
  Batch batch;
  ds.read_rows({0, 1, 2, 4}, batch);  // row 3 is never read from disk
  expect_row(batch, 3, bad, 4, false);
  EXPECT_CONTAINS(user_error_of([&] {
                    ds.read_rows({4, 3}, batch);
                  }),
                  ": /inputs row 3 position 1");
}

}  // namespace
