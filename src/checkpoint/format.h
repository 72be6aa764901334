// src/checkpoint/format.h — private to src/checkpoint: what the writer and the reader agree on
// (SPEC §5 group names, the format version, file access and dataset creation properties) and the
// layout check both make. HDF5 handles and error silencing come from src/h5.
#pragma once
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "h5/h5.h"
#include "sftdp/check_h5.h"
#include "sftdp/model.h"

namespace sftdp::checkpoint::detail {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kParamsGroup = "params";
inline constexpr const char* kMomentGroups[2] = {"m", "v"};  // under /opt

// File access properties for checkpoint files. HDF5 file locking is off: checkpoints are written
// under a private temporary name and only read afterwards, so locks protect nothing, and on
// parallel file systems without flock (Lustre, some NFS) they make every open fail. Files are
// written in the HDF5 1.8 format (readable by HDF5 >= 1.8, h5py included), whose superblock and
// object headers carry checksums: damaged metadata is refused on load instead of misread.
inline h5::Handle checkpoint_file_access(bool for_writing) {
  h5::Handle fapl(CHECK_H5(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  CHECK_H5(H5Pset_file_locking(fapl.get(), false, true));
#endif
  if (for_writing) CHECK_H5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18));
  return fapl;
}

// Dataset creation properties for one tensor of shape `dims`: chunked (at most ~64 MiB a chunk,
// split along the first dimension into near-equal parts, so edge chunks waste little) with the
// Fletcher-32 checksum filter, so that damaged tensor data fail to read rather than load as
// wrong but finite numbers. Needs no external filter plugin: Fletcher-32 is built into HDF5.
inline h5::Handle tensor_creation(const std::vector<hsize_t>& dims) {
  constexpr hsize_t kMaxChunkFloats = hsize_t{16} << 20;  // 64 MiB of float32
  h5::Handle dcpl(CHECK_H5(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  // A scalar or an empty tensor cannot be chunked (none of SPEC §5 is either): stored plain.
  if (dims.empty() || std::find(dims.begin(), dims.end(), 0) != dims.end()) return dcpl;
  std::vector<hsize_t> chunk = dims;
  const hsize_t row = std::accumulate(dims.begin() + 1, dims.end(), hsize_t{1},
                                      [](hsize_t a, hsize_t b) { return a * b; });
  const hsize_t rows_per_chunk = std::max<hsize_t>(1, kMaxChunkFloats / row);
  const hsize_t parts = (dims[0] + rows_per_chunk - 1) / rows_per_chunk;  // >= 1
  chunk[0] = (dims[0] + parts - 1) / parts;
  CHECK_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()));
  CHECK_H5(H5Pset_fletcher32(dcpl.get()));
  return dcpl;
}

// "[256,64]": shapes in error messages.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// The layout must describe `floats` floats: every tensor inside the buffer, numel = prod(shape),
// and a name that is one HDF5 link (no '/'). A violation is a bug in the caller, not the user's.
inline void check_layout(const model::ParamLayout& layout, size_t floats) {
  SFTDP_ASSERT(floats == layout.total, "buffer size differs from layout.total");
  for (const auto& t : layout.tensors) {
    const int64_t n = std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1},
                                      [](int64_t a, int64_t b) { return a * b; });
    SFTDP_ASSERT(static_cast<size_t>(n) == t.numel, ("numel != prod(shape) for " + t.name));
    SFTDP_ASSERT(t.offset + t.numel <= layout.total, ("tensor past the buffer: " + t.name));
    SFTDP_ASSERT(!t.name.empty() && t.name.find('/') == std::string::npos,
                 ("tensor name is not one HDF5 link: " + t.name));
  }
}

}  // namespace sftdp::checkpoint::detail
