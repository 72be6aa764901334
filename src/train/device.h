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

// Throws UserError for impossible requests (gpu without a device, bfloat16 on the CPU).
Device pick_device(const config::Config& cfg, const comm::MpiSession& mpi);

}  // namespace sftdp::train
