// src/train/param_check.cpp — see param_check.h. Host-side, over MPI: one broadcast of rank 0's
// hash, one sum of mismatch flags.
#include "train/param_check.h"

#include <cstring>

namespace sftdp::train {

uint64_t hash_floats(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0, n = v.size() * sizeof(float); i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

int ranks_differing_from_rank0(const std::vector<float>& params, comm::Communicator& comm) {
  const uint64_t mine = hash_floats(params);
  uint64_t root = mine;
  comm.broadcast_host(&root, sizeof root, 0);
  double differing = mine == root ? 0.0 : 1.0;
  comm.allreduce_sum_host(&differing, 1);
  return static_cast<int>(differing);
}

}  // namespace sftdp::train
