// sftdp/check_mpi.h — CHECK_MPI: an MPI call that does not return MPI_SUCCESS is an internal
// error (sftdp/check.h), reported with MPI_Error_string's text. Implemented in src/comm.
#pragma once
#include <mpi.h>

#include <string>

#include "sftdp/check.h"

namespace sftdp {
std::string mpi_error_string(int code);
}  // namespace sftdp

#define CHECK_MPI(e) SFTDP_CHECK_LIB("MPI", e, MPI_SUCCESS, ::sftdp::mpi_error_string)
