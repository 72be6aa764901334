// src/h5/h5.cpp — h5::bad_file and h5::type_name (see h5.h).
#include "h5/h5.h"

#include "sftdp/check.h"

namespace sftdp::h5 {

void bad_file(const std::string& file, const std::string& what) {
  throw UserError(file + ": " + what);
}

std::string type_name(hid_t type) {
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

}  // namespace sftdp::h5
