// src/checkpoint/h5_handle.h — private to src/checkpoint: an owning HDF5 id (closed on scope
// exit), a guard that silences HDF5's own error printing while user files are read, and the
// names shared by the checkpoint writer and reader (SPEC §5).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::checkpoint::detail {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kParamsGroup = "params";
inline constexpr const char* kMomentGroups[2] = {"m", "v"};  // under /opt

// Owns one HDF5 id; closes it with the matching H5?close when it goes out of scope. Close
// failures on this path are ignored: the writer closes the file itself and checks the result.
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Gives up ownership (the caller closes and checks).
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// While alive, HDF5 prints nothing on failure: a bad user file becomes one UserError line, not
// an HDF5 stack dump. The previous handler is restored on scope exit (exceptions included).
class QuietH5Errors {
 public:
  QuietH5Errors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietH5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietH5Errors(const QuietH5Errors&) = delete;
  QuietH5Errors& operator=(const QuietH5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// File access properties for checkpoint files: HDF5 file locking off. Checkpoints are written
// under a private temporary name and only read afterwards, so locks protect nothing, and on
// parallel file systems without flock (Lustre, some NFS) they make every open fail.
inline H5Handle checkpoint_file_access() {
  H5Handle fapl(CHECK_H5(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  CHECK_H5(H5Pset_file_locking(fapl.get(), false, true));
#endif
  return fapl;
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
