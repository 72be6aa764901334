// src/train/gpu_plan.h — may every rank have a CUDA device of its own? Two ranks on one device make
// NCCL's set-up fail ("duplicate GPU"), so hardware=auto falls back to the CPU and hardware=gpu is a
// user error. plan_gpus is pure (tests feed it hand-made nodes); gather_gpu_facts is the collective
// that hands every rank the same facts, so every rank reaches the same decision.
#pragma once
#include <string>
#include <vector>

#include "sftdp/comm.h"

namespace sftdp::train {

struct RankGpuFacts {
  std::string host;                  // ranks with the same host share its devices
  int local_rank = 0;                // as cuda_select_device gets it (mpi.local_rank())
  std::vector<std::string> devices;  // PCI bus ids of the CUDA devices this rank sees, in CUDA order
};

struct GpuPlan {
  bool ok = false;          // every rank can take a device that no other rank of its node takes
  bool any_device = false;  // some rank sees a device (else "no GPU" is the normal CPU case)
  std::string why;          // when !ok: the first node that falls short, its local ranks and devices
};

// [in] ranks: one entry per rank of the job (index = rank). Each rank takes the device that
// cuda_select_device picks: the only one it sees, else devices[local_rank % devices.size()].
// A device counts once however many ranks see it (CUDA_VISIBLE_DEVICES narrowed to one device per
// task gives each task one device, told apart by bus id).
GpuPlan plan_gpus(const std::vector<RankGpuFacts>& ranks);

// Collective over MPI_COMM_WORLD: every rank's facts (this rank's from the CUDA runtime; no devices
// in a build without CUDA), in rank order.
std::vector<RankGpuFacts> gather_gpu_facts(const comm::MpiSession& mpi);

// The PCI bus id of this process's CUDA device `device` ("" in a build without CUDA).
std::string device_bus_id(int device);

}  // namespace sftdp::train
