// src/train/param_check.h — are the parameters still bitwise identical on every rank? Data
// parallelism is only exact if every rank applies the same update to the same weights; this
// compares a 64-bit hash of each rank's parameter bytes with rank 0's.
#pragma once
#include <cstdint>
#include <vector>

#include "sftdp/comm.h"

namespace sftdp::train {

uint64_t hash_floats(const std::vector<float>& v);  // FNV-1a over the bytes
// Number of ranks whose hash differs from rank 0's (the same on every rank; 0 = all identical).
int ranks_differing_from_rank0(const std::vector<float>& params, comm::Communicator& comm);

}  // namespace sftdp::train
