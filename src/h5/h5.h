// src/h5/h5.h — the one HDF5 helper of src/ (data files and checkpoints): an owning id (Handle),
// a scope that silences HDF5's own error printing (QuietErrors), and the text of failures: a bad
// user file is a UserError "<file>: <object> <what is wrong>" (bad_file), an HDF5 call that failed
// is described by sftdp::h5_error_string (sftdp/check_h5.h), which puts the OS reason first.
#pragma once
#include <hdf5.h>

#include <string>
#include <utility>

namespace sftdp::h5 {

// Owns one HDF5 id (file, group, dataset, dataspace, type, attribute, property list) and closes
// it with the matching H5?close. Move-only. Destruction and reset() ignore a failing close
// (nothing can be done about it on that path); a writer whose data must reach the file calls
// close() and checks the status it returns.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns the closer's status (0 when there was nothing to close).
  herr_t close() {
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    return (id >= 0 && closer_) ? closer_(id) : 0;
  }
  void reset() { static_cast<void>(close()); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// While alive, HDF5 prints nothing when a call fails: a bad user file becomes one `error:` line
// and an internal error one die_internal message that carries the stack (h5_error_string), not
// an HDF5 dump as well. The previous handler comes back on scope exit, exceptions included.
// HDF5's setting is per thread (thread-safe build) or per process; scopes nest.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Throws UserError("<file>: <what>"); `what` starts with the object at fault when there is one
// ("/params/wte has shape [8,4], the model needs [16,4]", "/inputs must be int32, found int64").
[[noreturn]] void bad_file(const std::string& file, const std::string& what);

// "int32", "uint8", "float64", "string", "compound", ... for a datatype id: what a user stored.
std::string type_name(hid_t type);

// The OS error number (errno) that HDF5's file driver recorded in the current error stack, e.g.
// 28 (ENOSPC) after a failed write; 0 when the failure was not an OS error. Read it before the
// next HDF5 call, which clears the stack.
int stack_errno();

}  // namespace sftdp::h5
