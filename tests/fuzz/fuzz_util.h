// tests/fuzz/fuzz_util.h — shared by the fuzz targets: internal errors turned into aborts, a
// reader that turns fuzz bytes into choices (past the end it answers zeros, so every input is a
// complete, deterministic recipe), small HDF5 writing helpers for the structured file generators,
// a per-process scratch path on tmpfs, and the no-leaked-HDF5-ids check run after each input.
#pragma once
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "sftdp/check.h"

namespace sftdp::fuzz {

// die_internal (exit 1) on user input is a finding too: it aborts instead, so libFuzzer saves the
// input as it does for a crash. Call first in every target.
inline void internal_errors_abort() {
  static const bool installed = (set_job_abort([](int) { std::abort(); }, -1), true);
  (void)installed;
}

// Generators order their choices so that a zero byte picks the valid one: the empty input
// makes a valid file, and each further byte makes one thing hostile.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag() { return byte() & 1; }
  // A value in [0, n), n >= 1.
  uint32_t pick(uint32_t n) {
    const uint32_t v = byte() | (static_cast<uint32_t>(byte()) << 8);
    return v % n;
  }
  // A value in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return lo + pick(static_cast<uint32_t>(hi - lo + 1)); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return v;
  }
  // Mostly small in-range-ish integers, sometimes the edges of int64.
  int64_t interesting_int(int64_t typical_hi) {
    switch (pick(8)) {
      case 0: return -1 - static_cast<int64_t>(pick(3));
      case 1: return typical_hi + static_cast<int64_t>(pick(3));
      case 2: return std::numeric_limits<int32_t>::max();
      case 3: return std::numeric_limits<int64_t>::min();
      case 4: return static_cast<int64_t>(u64());
      default: return static_cast<int64_t>(pick(static_cast<uint32_t>(typical_hi + 1)));
    }
  }
  // Mostly ordinary floats, sometimes NaN, +-Inf, -0, negative or huge.
  double interesting_float() {
    switch (pick(10)) {
      case 0: return std::numeric_limits<double>::quiet_NaN();
      case 1: return std::numeric_limits<double>::infinity();
      case 2: return -std::numeric_limits<double>::infinity();
      case 3: return -0.0;
      case 4: return -static_cast<double>(pick(100)) / 10;
      case 5: return 1e300;
      default: return static_cast<double>(pick(1000)) / 100;
    }
  }
  bool exhausted() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Aborts (a fuzz finding) when a generator's own HDF5 call fails: the recipe is always valid
// HDF5, only its contents are hostile.
inline hid_t h5_ok(hid_t id, const char* what) {
  if (id < 0) {
    std::fprintf(stderr, "fuzz generator: %s failed\n", what);
    std::abort();
  }
  return id;
}

// Mostly `wanted` (the type SPEC §4/§5 asks for), sometimes another numeric type.
inline hid_t pick_type(ByteReader& in, hid_t wanted) {
  const hid_t choices[] = {H5T_STD_I8LE,     H5T_STD_U8LE,     H5T_STD_I16LE, H5T_STD_I32LE,
                           H5T_STD_U32LE,    H5T_STD_I32BE,    H5T_STD_I64LE, H5T_STD_U64LE,
                           H5T_IEEE_F32LE,   H5T_IEEE_F32BE,   H5T_IEEE_F64LE};
  if (in.pick(4) != 3) return wanted;
  return choices[in.pick(sizeof choices / sizeof choices[0])];
}

// Writes `values` (one double per element, converted by HDF5 to file_type: out-of-range values
// are clamped, NaN into an integer type becomes 0) as dataset `name` of the given shape.
// chunked: chunked layout instead of contiguous; missing_external: contiguous storage in an
// external file that does not exist (opening works, reading fails: a damaged file).
inline void write_dataset(hid_t loc, const char* name, hid_t file_type,
                          const std::vector<hsize_t>& dims, const std::vector<double>& values,
                          bool chunked, bool missing_external) {
  const hid_t space = dims.empty() ? h5_ok(H5Screate(H5S_SCALAR), "H5Screate")
                                   : h5_ok(H5Screate_simple(static_cast<int>(dims.size()),
                                                            dims.data(), nullptr),
                                           "H5Screate_simple");
  const hid_t dcpl = h5_ok(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  if (chunked && !dims.empty() && n > 0) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = 1;
    h5_ok(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk");
  } else if (missing_external) {
    h5_ok(H5Pset_external(dcpl, "sftdp_fuzz_missing_external.bin", 0, H5F_UNLIMITED),
          "H5Pset_external");
  }
  const hid_t dset =
      h5_ok(H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), name);
  if (!missing_external && n > 0 && values.size() == n)
    h5_ok(H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
          "H5Dwrite");
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
}

// A root (or object) attribute of any numeric type and 0 (scalar), 1 or 2 values.
inline void write_numeric_attr(hid_t loc, const char* name, hid_t file_type,
                               const std::vector<double>& values) {
  const hsize_t n = values.size();
  const hid_t space = n == 1 ? h5_ok(H5Screate(H5S_SCALAR), "H5Screate")
                             : h5_ok(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
  const hid_t attr = h5_ok(H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT), name);
  if (n > 0) h5_ok(H5Awrite(attr, H5T_NATIVE_DOUBLE, values.data()), "H5Awrite");
  H5Aclose(attr);
  H5Sclose(space);
}

// A scalar string attribute, variable- or fixed-length (fixed: no terminating null).
inline void write_string_attr(hid_t loc, const char* name, const std::string& value,
                              bool variable) {
  const hid_t type = h5_ok(H5Tcopy(H5T_C_S1), "H5Tcopy");
  H5Tset_size(type, variable ? H5T_VARIABLE : std::max<size_t>(value.size(), 1));
  const hid_t space = h5_ok(H5Screate(H5S_SCALAR), "H5Screate");
  const hid_t attr = h5_ok(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), name);
  const char* text = value.c_str();
  std::string padded = value;
  padded.resize(std::max<size_t>(value.size(), 1), '\0');
  h5_ok(H5Awrite(attr, type, variable ? static_cast<const void*>(&text)
                                      : static_cast<const void*>(padded.data())),
        "H5Awrite");
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

// Creates `path` through the core (in-memory) driver, written to its backing file once at close:
// one write(2) per file, on tmpfs where available.
inline hid_t create_file(const std::string& path) {
  const hid_t fapl = h5_ok(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  h5_ok(H5Pset_fapl_core(fapl, 64 * 1024, /*backing_store=*/1), "H5Pset_fapl_core");
  const hid_t file = h5_ok(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "H5Fcreate");
  H5Pclose(fapl);
  return file;
}

// "<dir>/sftdp_fuzz_<pid>_<tag>.h5" with dir = /dev/shm when present, else $TMPDIR or /tmp.
inline std::string scratch_path(const char* tag) {
  static const std::string dir = [] {
    if (access("/dev/shm", W_OK) == 0) return std::string("/dev/shm");
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp");
  }();
  return dir + "/sftdp_fuzz_" + std::to_string(getpid()) + "_" + tag + ".h5";
}

// Every HDF5 id our reader opened must be closed again, on success and on UserError alike.
inline void require_no_open_h5_objects(const char* target) {
  // Files, groups, datasets and attributes (datatype ids include HDF5's own predefined ones).
  const ssize_t open = H5Fget_obj_count(
      H5F_OBJ_ALL, H5F_OBJ_FILE | H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_ATTR);
  if (open != 0) {
    std::fprintf(stderr, "%s: %zd HDF5 objects left open after the reader returned\n", target,
                 open);
    std::abort();
  }
}

}  // namespace sftdp::fuzz
