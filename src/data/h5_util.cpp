// src/data/h5_util.cpp — H5Handle, h5_quiet and h5_type_name (see h5_util.h).
#include "data/h5_util.h"

#include "sftdp/check.h"

namespace sftdp::data {

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = std::exchange(other.id_, H5I_INVALID_HID);
    closer_ = other.closer_;
  }
  return *this;
}

void H5Handle::reset() {
  if (id_ >= 0 && closer_) CHECK_H5(closer_(id_));
  id_ = H5I_INVALID_HID;
}

void h5_quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string h5_type_name(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_FLOAT:
      return "float" + std::to_string(bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_REFERENCE:
      return "reference";
    case H5T_VLEN:
      return "variable-length";
    case H5T_TIME:
      return "time";
    default:
      return "an unknown type";
  }
}

}  // namespace sftdp::data
