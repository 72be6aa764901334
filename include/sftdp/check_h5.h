// sftdp/check_h5.h — CHECK_H5: an HDF5 call returning a negative value (herr_t or hid_t) is an
// internal error (sftdp/check.h), reported with the HDF5 error stack as text. Evaluates to the
// call's value. Implemented in src/h5.
#pragma once
#include <string>

#include "sftdp/check.h"

namespace sftdp {
std::string h5_error_string(long long code);  // the HDF5 error stack, as text
}  // namespace sftdp

#define CHECK_H5(e)                                                                          \
  ([&]() {                                                                                   \
    auto s_ = (e);                                                                           \
    if (s_ < 0) ::sftdp::die_internal("HDF5", #e, ::sftdp::h5_error_string(s_), __FILE__, __LINE__); \
    return s_;                                                                               \
  }())
