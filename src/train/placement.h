// src/train/placement.h — where each rank runs: its host, node-local rank and device, gathered once
// at set-up and logged by rank 0 as one line grouped by host, e.g.
//   placement: 4 ranks on 2 hosts; node1: ranks 0-1, local ranks 0-1, cpu; node2: ranks 2-3, local ranks 0-1, cpu
// (slurm/README.md says what it should be for each launcher; the multi-node tests read it).
// describe_placement is pure; log_placement is collective over MPI_COMM_WORLD.
#pragma once
#include <string>
#include <vector>

#include "sftdp/comm.h"

namespace sftdp::train {

struct RankPlace {
  std::string host;
  int local_rank = 0;
  std::string device;  // "cpu", or the PCI bus id of the CUDA device the rank took
};

// [in] ranks: one entry per rank (index = rank). Hosts in order of their lowest rank; devices
// listed per rank in rank order, "cpu" once where every rank of the host is on the CPU.
std::string describe_placement(const std::vector<RankPlace>& ranks);

// Gathers every rank's place (this rank's: mpi.host(), mpi.local_rank(), device) and logs the line.
void log_placement(const comm::MpiSession& mpi, const std::string& device);

}  // namespace sftdp::train
