// sftdp/check_nccl.h — CHECK_NCCL: a failing NCCL call is an internal error (sftdp/check.h) with
// ncclGetErrorString's text. Only src/comm's NCCL communicator uses it.
#pragma once
#include <nccl.h>

#include "sftdp/check.h"

#define CHECK_NCCL(e) SFTDP_CHECK_LIB("NCCL", e, ncclSuccess, ncclGetErrorString)
