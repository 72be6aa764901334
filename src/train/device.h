// src/train/device.h — picks the kernels (Ops) and the communicator once, from `hardware:`.
// cpu: CPU twins + MPI. gpu: CUDA kernels + NCCL (a clear error when no device is usable).
// auto: the GPU when this build has CUDA and a device is present, else the CPU.
#pragma once
#include <memory>

#include "kernels/ops.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"

namespace sftdp::train {

struct Device {
  const Ops* ops = nullptr;
  std::unique_ptr<comm::Communicator> comm;
  bool gpu = false;
};

// CPU threads per rank when OMP_NUM_THREADS is not set (else OpenMP's own count): the cores this
// process may run on (its affinity mask: Slurm's cpuset, or the whole node), shared among the
// ranks_on_node ranks when the mask is the whole node. The CPU path sets it; the plan counts by it.
int cpu_threads_per_rank(int ranks_on_node);

// The CPU path computes in and keeps float32: any other dtype or weight_dtype is a UserError.
void check_cpu_dtypes(const config::Config& cfg);

// Throws UserError for impossible requests (gpu without a device, bfloat16 on the CPU).
Device pick_device(const config::Config& cfg, const comm::MpiSession& mpi);

}  // namespace sftdp::train
