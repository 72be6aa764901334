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

// The warning rank 0 logs when srun launched the ranks with mpi/pmix on more than one host and the
// step's PMIx fences may run on Slurm's tree (SLURM_PMIX_FENCE unset or not "ring"): on Slurm 22.05
// that tree released ranks from Open MPI's end-of-MPI_Init barrier early, and a rank then crashed in
// MPI_Init (slurm/README.md, "Start-up"). "" when there is nothing to say. Arguments: the values of
// SLURM_STEP_ID, PMIX_RANK and SLURM_PMIX_FENCE (nullptr where unset), and the number of hosts.
std::string pmix_fence_warning(const char* slurm_step_id, const char* pmix_rank, const char* pmix_fence, int hosts);

// Gathers every rank's place (this rank's: mpi.host(), mpi.local_rank(), device) and logs the line.
void log_placement(const comm::MpiSession& mpi, const std::string& device);

}  // namespace sftdp::train
