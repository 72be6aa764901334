// src/data/data_file.cpp — opens one SPEC §4 file read-only and validates its layout: required
// datasets, int32/float32 types, rank 2, equal shapes, T == max_target_length, vocab_size.
#include "data/data_file.h"

#include <filesystem>
#include <string>

#include "sftdp/check_h5.h"

namespace sftdp::data {
namespace {

enum class Kind { kInt32, kFloat32 };

bool type_matches(hid_t type, Kind kind) {
  if (H5Tget_size(type) != 4) return false;
  if (kind == Kind::kFloat32) return H5Tget_class(type) == H5T_FLOAT;
  return H5Tget_class(type) == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_2;
}

std::string shape_text(const hsize_t dims[2]) {
  std::string s = "[";  // appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) on that
  s += std::to_string(dims[0]);
  s += ", ";
  s += std::to_string(dims[1]);
  s += "]";
  return s;
}

// Opens dataset `name` and checks type and rank. Returns an invalid handle when an optional
// dataset is absent. dims receives [rows, T].
h5::Handle open_column(const std::string& path, hid_t file, const char* name, Kind kind,
                     bool required, hsize_t dims[2]) {
  const htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
  if (exists <= 0) {
    if (!required) return {};
    h5::bad_file(path, std::string("missing dataset ") + name +
                    " (SPEC §4 needs /inputs, /targets, /loss_weights; run sft_prepare?)");
  }
  h5::Handle dataset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) h5::bad_file(path, std::string(name) + " is not a dataset");
  h5::Handle type(CHECK_H5(H5Dget_type(dataset.get())), H5Tclose);
  if (!type_matches(type.get(), kind))
    h5::bad_file(path, std::string(name) + " must be " +
                    (kind == Kind::kInt32 ? "int32" : "float32") + ", found " +
                    h5::type_name(type.get()));
  h5::Handle space(CHECK_H5(H5Dget_space(dataset.get())), H5Sclose);
  const int rank = H5Sget_simple_extent_type(space.get()) == H5S_SIMPLE
                       ? CHECK_H5(H5Sget_simple_extent_ndims(space.get()))
                       : 0;
  if (rank != 2)
    h5::bad_file(path, std::string(name) + " must have rank 2 [N, T], found rank " +
                    std::to_string(rank));
  CHECK_H5(H5Sget_simple_extent_dims(space.get(), dims, nullptr));
  return dataset;
}

int64_t read_vocab_size(const std::string& path, hid_t file) {
  if (H5Aexists_by_name(file, "/", "vocab_size", H5P_DEFAULT) <= 0)
    h5::bad_file(path, "root attribute vocab_size missing (files from sft_prepare have it)");
  h5::Handle attr(CHECK_H5(H5Aopen_by_name(file, "/", "vocab_size", H5P_DEFAULT, H5P_DEFAULT)),
                H5Aclose);
  h5::Handle type(CHECK_H5(H5Aget_type(attr.get())), H5Tclose);
  h5::Handle space(CHECK_H5(H5Aget_space(attr.get())), H5Sclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Sget_simple_extent_npoints(space.get()) != 1)
    h5::bad_file(path, "root attribute vocab_size must be one integer, found " +
                    h5::type_name(type.get()));
  int64_t vocab = 0;
  CHECK_H5(H5Aread(attr.get(), H5T_NATIVE_INT64, &vocab));
  return vocab;
}

}  // namespace

DataFile open_data_file(const std::string& path, int T, int64_t model_vocab_size) {
  const h5::QuietErrors quiet;  // a bad file is one error line, not an HDF5 stack dump
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    h5::bad_file(path, "not found (run sft_prepare first?)");
  if (std::filesystem::is_directory(path, ec))
    h5::bad_file(path, "is a directory, expected an HDF5 data file");
  if (H5Fis_hdf5(path.c_str()) <= 0)
    h5::bad_file(path, "not an HDF5 file (make data files with sft_prepare)");

  DataFile f;
  f.path = path;
  f.file = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.file.valid()) h5::bad_file(path, "cannot be opened (permissions? damaged file?)");
  const hid_t file = f.file.get();

  hsize_t in_dims[2], dims[2];
  f.inputs = open_column(path, file, "/inputs", Kind::kInt32, true, in_dims);
  const auto same_shape = [&](const h5::Handle& column, const char* name) {
    if (column.valid() && (dims[0] != in_dims[0] || dims[1] != in_dims[1]))
      h5::bad_file(path, std::string(name) + " has shape " + shape_text(dims) + " but /inputs has " +
                      shape_text(in_dims));
  };
  f.targets = open_column(path, file, "/targets", Kind::kInt32, true, dims);
  same_shape(f.targets, "/targets");
  f.loss_weights = open_column(path, file, "/loss_weights", Kind::kFloat32, true, dims);
  same_shape(f.loss_weights, "/loss_weights");
  f.segment_ids = open_column(path, file, "/segment_ids", Kind::kInt32, false, dims);
  same_shape(f.segment_ids, "/segment_ids");
  f.positions = open_column(path, file, "/positions", Kind::kInt32, false, dims);
  same_shape(f.positions, "/positions");

  if (in_dims[1] != static_cast<hsize_t>(T))
    h5::bad_file(path, "rows have T=" + std::to_string(in_dims[1]) +
                    " but max_target_length is " + std::to_string(T));
  if (in_dims[0] == 0) h5::bad_file(path, "/inputs has no rows");
  f.rows = static_cast<int64_t>(in_dims[0]);
  f.T = T;

  f.vocab_size = read_vocab_size(path, file);
  if (f.vocab_size < 1)
    h5::bad_file(path, "vocab_size must be >= 1, found " + std::to_string(f.vocab_size));
  if (f.vocab_size > model_vocab_size)
    h5::bad_file(path, "vocab_size " + std::to_string(f.vocab_size) +
                    " is larger than the model's vocab_size " + std::to_string(model_vocab_size) +
                    " (data and model use different tokenizers?)");
  return f;
}

}  // namespace sftdp::data
