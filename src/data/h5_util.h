// src/data/h5_util.h — small HDF5 helpers shared by the data reader and writer: an owning handle
// that closes its id exactly once, quieting HDF5's own error printing, and readable type names.
#pragma once
#include <hdf5.h>

#include <string>
#include <utility>

namespace sftdp::data {

// Owns one HDF5 id (file, dataset, dataspace, type, attribute, group). Move-only; closes on
// destruction. A failing close is an internal error (CHECK_H5).
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  H5Handle& operator=(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Turns off HDF5's automatic error-stack printing: user errors get our own one-line message, and
// CHECK_H5 still reads the stack for internal ones.
void h5_quiet();

// "int32", "uint8", "float64", "string", ... for a datatype id.
std::string h5_type_name(hid_t type);

}  // namespace sftdp::data
