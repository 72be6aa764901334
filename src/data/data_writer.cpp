// src/data/data_writer.cpp — RowSet → SPEC §4 HDF5 file via a temporary name and rename(), so a
// reader never sees a half-written file and a failed run leaves nothing at `path`.
#include "data/data_writer.h"

#include <unistd.h>

#include <filesystem>

#include "h5/h5.h"
#include "sftdp/check_h5.h"

namespace sftdp::data {
namespace {

void write_column(hid_t file, const char* name, hid_t file_type, hid_t mem_type, int64_t rows,
                  int T, const void* data) {
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(T)};
  h5::Handle space(CHECK_H5(H5Screate_simple(2, dims, nullptr)), H5Sclose);
  h5::Handle dataset(CHECK_H5(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                       H5P_DEFAULT)),
                   H5Dclose);
  CHECK_H5(H5Dwrite(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

// A variable-length UTF-8 string, as h5py writes a str attribute.
void write_string_attr(hid_t file, const char* name, const std::string& text) {
  h5::Handle type(CHECK_H5(H5Tcopy(H5T_C_S1)), H5Tclose);
  CHECK_H5(H5Tset_size(type.get(), H5T_VARIABLE));
  CHECK_H5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  h5::Handle space(CHECK_H5(H5Screate(H5S_SCALAR)), H5Sclose);
  h5::Handle attr(CHECK_H5(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)),
                  H5Aclose);
  const char* data = text.c_str();
  CHECK_H5(H5Awrite(attr.get(), type.get(), &data));
}

void write_file(const std::string& path, const RowSet& rows, int vocab_size,
                const TokenizerIdentity& tokenizer) {
  h5::Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) h5::bad_file(path, "cannot create (is the directory writable?)");
  const hid_t f = file.get();
  write_column(f, "/inputs", H5T_STD_I32LE, H5T_NATIVE_INT32, rows.rows, rows.T,
               rows.inputs.data());
  write_column(f, "/targets", H5T_STD_I32LE, H5T_NATIVE_INT32, rows.rows, rows.T,
               rows.targets.data());
  write_column(f, "/loss_weights", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rows.rows, rows.T,
               rows.loss_weights.data());
  if (rows.packed) {
    write_column(f, "/segment_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, rows.rows, rows.T,
                 rows.segment_ids.data());
    write_column(f, "/positions", H5T_STD_I32LE, H5T_NATIVE_INT32, rows.rows, rows.T,
                 rows.positions.data());
  }
  {
    h5::Handle scalar(CHECK_H5(H5Screate(H5S_SCALAR)), H5Sclose);
    h5::Handle attr(CHECK_H5(H5Acreate2(f, "vocab_size", H5T_STD_I64LE, scalar.get(), H5P_DEFAULT,
                                        H5P_DEFAULT)),
                    H5Aclose);
    const int64_t vocab = vocab_size;
    CHECK_H5(H5Awrite(attr.get(), H5T_NATIVE_INT64, &vocab));
  }
  if (!tokenizer.name.empty()) {
    write_string_attr(f, "tokenizer", tokenizer.name);
    write_string_attr(f, "tokenizer_hash", tokenizer.hash);
  }
  // Checked: the last data reach the file here (a full disk shows up now, if not before).
  CHECK_H5(file.close());
}

}  // namespace

void write_data_file(const std::string& path, const RowSet& rows, int vocab_size,
                     const TokenizerIdentity& tokenizer) {
  namespace fs = std::filesystem;
  const size_t n = static_cast<size_t>(rows.rows) * rows.T;
  SFTDP_ASSERT(rows.inputs.size() == n && rows.targets.size() == n &&
                   rows.loss_weights.size() == n &&
                   (!rows.packed || (rows.segment_ids.size() == n && rows.positions.size() == n)),
               "RowSet arrays must hold rows * T values");
  const h5::QuietErrors quiet;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::exists(parent, ec) && !fs::create_directories(parent, ec))
    throw UserError(path + ": cannot create directory " + parent.string() + ": " + ec.message());

  const std::string temp = path + ".partial-" + std::to_string(getpid());
  try {
    write_file(temp, rows, vocab_size, tokenizer);
  } catch (...) {
    fs::remove(temp, ec);
    throw;
  }
  fs::rename(temp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(temp, ec);
    throw UserError(path + ": cannot rename the finished file into place: " + reason);
  }
}

}  // namespace sftdp::data
