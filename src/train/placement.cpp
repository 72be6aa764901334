// src/train/placement.cpp — see placement.h.
#include "train/placement.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "comm/rank_list.h"
#include "sftdp/log.h"

namespace sftdp::train {

std::string describe_placement(const std::vector<RankPlace>& ranks) {
  std::vector<std::string> hosts;
  std::vector<int> all;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) hosts.push_back(ranks[r].host), all.push_back(r);
  const auto groups = comm::group_by_host(all, hosts);
  std::string out = std::to_string(ranks.size()) + (ranks.size() == 1 ? " rank" : " ranks") + " on " +
                    std::to_string(groups.size()) + (groups.size() == 1 ? " host" : " hosts");
  for (const auto& g : groups) {
    std::vector<int> local;
    bool all_cpu = true;
    std::string devices;
    for (int r : g.ranks) {
      local.push_back(ranks[r].local_rank);
      all_cpu &= ranks[r].device == "cpu";
      if (!devices.empty()) devices += ',';  // appends: see rank_list.cpp on gcc 12's -Wrestrict
      devices += ranks[r].device;
    }
    std::vector<int> sorted_local = local;
    std::sort(sorted_local.begin(), sorted_local.end());
    // Local ranks in rank order where they are not simply 0..n-1 in order.
    const bool in_order = local == sorted_local;
    std::string local_text;
    if (in_order) {
      local_text = comm::rank_ranges(local);
    } else {
      for (int l : local) {
        if (!local_text.empty()) local_text += ',';
        local_text += std::to_string(l);
      }
    }
    out += "; " + g.host + ": ";
    out += g.ranks.size() == 1 ? "rank " : "ranks ";
    out += comm::rank_ranges(g.ranks);
    out += local.size() == 1 ? ", local rank " : ", local ranks ";
    out += local_text + ", ";
    if (all_cpu) {
      out += "cpu";
    } else {
      out += g.ranks.size() == 1 ? "GPU " : "GPUs ";
      out += devices;
    }
  }
  return out;
}

std::string pmix_fence_warning(const char* slurm_step_id, const char* pmix_rank, const char* pmix_fence, int hosts) {
  if (!slurm_step_id || !pmix_rank || hosts < 2) return "";  // not srun --mpi=pmix, or one host
  if (pmix_fence && !std::strcmp(pmix_fence, "ring")) return "";
  return std::string("SLURM_PMIX_FENCE is ") + (pmix_fence ? std::string("'") + pmix_fence + "'" : "unset") +
         ": Slurm's mpi/pmix may run the end-of-MPI_Init barrier on its tree fence, which released ranks "
         "early on Slurm 22.05 and crashed about 1 multi-node start-up in 50 (SIGSEGV in MPI_Init); export "
         "SLURM_PMIX_FENCE=ring before srun, as slurm/launch.sh does (or PMIxCollFence=ring in mpi.conf)";
}

void log_placement(const comm::MpiSession& mpi, const std::string& device) {
  const std::string mine = mpi.host() + "\n" + std::to_string(mpi.local_rank()) + "\n" + device;
  const auto all = comm::allgather_strings(mine, "the placement exchange");
  std::vector<RankPlace> ranks;
  ranks.reserve(all.size());
  for (const auto& text : all) {
    std::istringstream in(text);
    RankPlace p;
    std::string local;
    std::getline(in, p.host);
    std::getline(in, local);
    std::getline(in, p.device);
    p.local_rank = std::stoi(local);
    ranks.push_back(std::move(p));
  }
  log::info("placement: %s", describe_placement(ranks).c_str());
  std::set<std::string> hosts;
  for (const auto& p : ranks) hosts.insert(p.host);
  // Ranks that mpirun started (inside an allocation too) have ORTE's PMIx server, not Slurm's.
  const char* step = std::getenv("OMPI_MCA_orte_hnp_uri") ? nullptr : std::getenv("SLURM_STEP_ID");
  const std::string warning = pmix_fence_warning(step, std::getenv("PMIX_RANK"),
                                                 std::getenv("SLURM_PMIX_FENCE"), static_cast<int>(hosts.size()));
  if (!warning.empty() && mpi.rank() == 0) log::warn("%s", warning.c_str());
}

}  // namespace sftdp::train
