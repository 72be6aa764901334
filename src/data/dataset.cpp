// src/data/dataset.cpp — sftdp::data::Dataset: SPEC §4 files concatenated by rows. Reads only the
// requested rows (hyperslab unions of at most 32 contiguous runs per H5Dread) and checks every
// value read; errors name the file, the dataset and the row within that file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "data/data_file.h"
#include "h5/h5.h"
#include "sftdp/check_h5.h"
#include "sftdp/data.h"

namespace sftdp::data {

struct Dataset::Impl {
  std::vector<DataFile> files;
  std::vector<int64_t> first_row;  // global index of each file's row 0
  int64_t total_rows = 0;
  int T = 0;
  int max_positions = 0;
  bool any_segments = false, any_positions = false;
};

namespace {

// Rows of one file to read: sorted, unique local indices, and where each lands in the batch.
struct FileRequest {
  std::vector<std::pair<int64_t, int64_t>> wanted;  // (local row, batch row)
  std::vector<int64_t> rows;                        // sorted unique local rows = buffer order
};

// HDF5 1.10 merges each hyperslab OR'ed into a selection with all earlier ones (quadratic in the
// number of runs: 4096 scattered rows took ~1 s in one union), so each read takes at most this
// many contiguous runs: a few dozen H5Dread calls instead, each with a small union.
constexpr size_t kRunsPerRead = 32;

// Reads the given sorted unique rows of `dataset` into buf [rows.size(), T] (elements of
// elem_size bytes). The file selection is a union of contiguous runs; HDF5 returns a union in
// file order, which is rows' order, so each read fills the next rows of buf. Returns false when
// HDF5 cannot read the data: the file is damaged (truncated, unreadable chunk or external storage).
bool read_sorted_rows(hid_t dataset, hid_t mem_type, size_t elem_size,
                      const std::vector<int64_t>& rows, int T, void* buf) {
  h5::Handle file_space(CHECK_H5(H5Dget_space(dataset)), H5Sclose);
  size_t i = 0;
  while (i < rows.size()) {
    const size_t first = i;
    H5S_seloper_t op = H5S_SELECT_SET;
    for (size_t runs = 0; runs < kRunsPerRead && i < rows.size(); ++runs) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
      const hsize_t offset[2] = {static_cast<hsize_t>(rows[i]), 0};
      const hsize_t extent[2] = {static_cast<hsize_t>(j - i), static_cast<hsize_t>(T)};
      CHECK_H5(H5Sselect_hyperslab(file_space.get(), op, offset, nullptr, extent, nullptr));
      op = H5S_SELECT_OR;
      i = j;
    }
    const hsize_t mem_dims[2] = {i - first, static_cast<hsize_t>(T)};
    h5::Handle mem_space(CHECK_H5(H5Screate_simple(2, mem_dims, nullptr)), H5Sclose);
    char* dst = static_cast<char*>(buf) + first * static_cast<size_t>(T) * elem_size;
    if (H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, dst) < 0)
      return false;
  }
  return true;
}

[[noreturn]] void bad_value(const DataFile& f, const char* dataset, int64_t row, int pos,
                            const std::string& what) {
  throw UserError(f.path + ": " + dataset + " row " + std::to_string(row) + " position " +
                  std::to_string(pos) + ": " + what);
}

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// Every check of a value read, in file order, so the first bad value in the file is reported.
void check_values(const DataFile& f, const std::vector<int64_t>& rows, int T, int max_positions,
                  const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                  const std::vector<float>& weights, const std::vector<int32_t>& segments,
                  const std::vector<int32_t>& positions) {
  const std::string vocab_range = ", " + std::to_string(f.vocab_size) + ")";
  const auto check_tokens = [&](const std::vector<int32_t>& ids, const char* name) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= f.vocab_size)
        bad_value(f, name, rows[i / T], static_cast<int>(i % T),
                  "token id " + std::to_string(ids[i]) + " outside [0" + vocab_range);
  };
  check_tokens(inputs, "/inputs");
  check_tokens(targets, "/targets");
  for (size_t i = 0; i < weights.size(); ++i)
    if (!std::isfinite(weights[i]) || weights[i] < 0.f)
      bad_value(f, "/loss_weights", rows[i / T], static_cast<int>(i % T),
                "loss weight " + float_text(weights[i]) + " must be finite and >= 0");
  for (size_t i = 0; i < segments.size(); ++i)
    if (segments[i] < 0)
      bad_value(f, "/segment_ids", rows[i / T], static_cast<int>(i % T),
                "segment id " + std::to_string(segments[i]) + " is negative");
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] < 0 || positions[i] >= max_positions)
      bad_value(f, "/positions", rows[i / T], static_cast<int>(i % T),
                "position " + std::to_string(positions[i]) + " outside [0, " +
                    std::to_string(max_positions) + ")");
}

}  // namespace

Dataset::Dataset(const std::vector<std::string>& paths, int T, int vocab_size, int max_positions)
    : impl_(std::make_unique<Impl>()) {
  if (paths.empty()) throw UserError("data files: none given");
  SFTDP_ASSERT(T >= 1 && vocab_size >= 1 && max_positions >= T,
               "Dataset needs T, vocab_size >= 1 and max_positions >= T (a file without /positions means 0..T-1)");
  impl_->T = T;
  impl_->max_positions = max_positions;
  for (const auto& path : paths) {
    impl_->files.push_back(open_data_file(path, T, vocab_size));
    const DataFile& f = impl_->files.back();
    impl_->first_row.push_back(impl_->total_rows);
    impl_->total_rows += f.rows;
    impl_->any_segments |= f.segment_ids.valid();
    impl_->any_positions |= f.positions.valid();
  }
}

Dataset::~Dataset() = default;

int64_t Dataset::rows() const { return impl_->total_rows; }
int Dataset::T() const { return impl_->T; }

void Dataset::read_rows(const std::vector<int64_t>& rows, Batch& out) const {
  const Impl& d = *impl_;
  const int T = d.T;
  const size_t row_size = static_cast<size_t>(T);
  out.B = static_cast<int>(rows.size());
  out.T = T;
  const size_t n = rows.size() * row_size;
  out.inputs.assign(n, 0);
  out.targets.assign(n, 0);
  out.loss_weights.assign(n, 0.f);
  out.segment_ids.assign(d.any_segments ? n : 0, 0);
  out.positions.assign(d.any_positions ? n : 0, 0);
  out.row_ids = rows;

  std::vector<FileRequest> requests(d.files.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t row = rows[b];
    SFTDP_ASSERT(row >= 0 && row < d.total_rows, "requested row outside the dataset");
    const size_t file =
        std::upper_bound(d.first_row.begin(), d.first_row.end(), row) - d.first_row.begin() - 1;
    requests[file].wanted.emplace_back(row - d.first_row[file], static_cast<int64_t>(b));
  }

  // HDF5 prints nothing: a damaged file is one UserError line naming file and dataset.
  const h5::QuietErrors quiet;
  std::vector<int32_t> inputs, targets, segments, positions;
  std::vector<float> weights;
  for (size_t fi = 0; fi < d.files.size(); ++fi) {
    FileRequest& req = requests[fi];
    if (req.wanted.empty()) continue;
    const DataFile& f = d.files[fi];
    std::sort(req.wanted.begin(), req.wanted.end());
    for (const auto& w : req.wanted)
      if (req.rows.empty() || req.rows.back() != w.first) req.rows.push_back(w.first);

    const size_t m = req.rows.size() * row_size;
    inputs.resize(m);
    targets.resize(m);
    weights.resize(m);
    segments.resize(f.segment_ids.valid() ? m : 0);
    positions.resize(f.positions.valid() ? m : 0);
    const auto read = [&](const h5::Handle& dataset, const char* name, hid_t type,
                          size_t elem_size, void* buf) {
      if (!read_sorted_rows(dataset.get(), type, elem_size, req.rows, T, buf))
        throw UserError(f.path + ": " + name + " cannot be read (damaged or truncated file?)");
    };
    read(f.inputs, "/inputs", H5T_NATIVE_INT32, sizeof(int32_t), inputs.data());
    read(f.targets, "/targets", H5T_NATIVE_INT32, sizeof(int32_t), targets.data());
    read(f.loss_weights, "/loss_weights", H5T_NATIVE_FLOAT, sizeof(float), weights.data());
    if (f.segment_ids.valid())
      read(f.segment_ids, "/segment_ids", H5T_NATIVE_INT32, sizeof(int32_t), segments.data());
    if (f.positions.valid())
      read(f.positions, "/positions", H5T_NATIVE_INT32, sizeof(int32_t), positions.data());
    check_values(f, req.rows, T, d.max_positions, inputs, targets, weights, segments, positions);

    size_t src_row = 0;
    for (const auto& [local, b] : req.wanted) {
      while (req.rows[src_row] != local) ++src_row;
      const size_t src = src_row * row_size, dst = static_cast<size_t>(b) * row_size;
      std::copy_n(inputs.begin() + src, T, out.inputs.begin() + dst);
      std::copy_n(targets.begin() + src, T, out.targets.begin() + dst);
      std::copy_n(weights.begin() + src, T, out.loss_weights.begin() + dst);
      // Files without the optional datasets mean one segment per row and positions 0..T-1.
      if (d.any_segments) {
        if (f.segment_ids.valid())
          std::copy_n(segments.begin() + src, T, out.segment_ids.begin() + dst);
        else
          std::fill_n(out.segment_ids.begin() + dst, T, 1);
      }
      if (d.any_positions) {
        for (int t = 0; t < T; ++t)
          out.positions[dst + t] = f.positions.valid() ? positions[src + t] : t;
      }
    }
  }
}

}  // namespace sftdp::data
