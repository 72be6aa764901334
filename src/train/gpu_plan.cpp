// src/train/gpu_plan.cpp — see gpu_plan.h. plan_gpus works on plain data only; gather_gpu_facts
// asks the CUDA runtime for this rank's devices (bus ids, not indices: tasks narrowed to one device
// each all call it device 0) and shares them over MPI.
#include "train/gpu_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#ifdef SFTDP_WITH_CUDA
#include "kernels/ops.h"
#include "sftdp/check_cuda.h"
#endif

namespace sftdp::train {
namespace {

std::string plural(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// PCI bus ids of the devices this process sees, in CUDA order; none without CUDA or a device.
std::vector<std::string> local_devices() {
  std::vector<std::string> ids;
#ifdef SFTDP_WITH_CUDA
  if (!cuda_device_available()) return ids;
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  for (int i = 0; i < count; ++i) ids.push_back(device_bus_id(i));
#endif
  return ids;
}

// One rank's facts as text: host, local rank, then one device per line (no field holds a newline).
std::string encode(const RankGpuFacts& f) {
  std::string s = f.host + "\n" + std::to_string(f.local_rank);
  for (const auto& d : f.devices) s += "\n" + d;
  return s;
}

RankGpuFacts decode(const std::string& s) {
  RankGpuFacts f;
  std::istringstream in(s);
  std::string line;
  std::getline(in, f.host);
  if (std::getline(in, line)) f.local_rank = std::stoi(line);
  while (std::getline(in, line)) f.devices.push_back(line);
  return f;
}

}  // namespace

GpuPlan plan_gpus(const std::vector<RankGpuFacts>& ranks) {
  GpuPlan plan;
  plan.ok = !ranks.empty();
  for (const auto& r : ranks) plan.any_device |= !r.devices.empty();
  std::vector<std::string> hosts;  // in order of first appearance: the message names the first short node
  for (const auto& r : ranks)
    if (std::find(hosts.begin(), hosts.end(), r.host) == hosts.end()) hosts.push_back(r.host);
  for (const auto& host : hosts) {
    std::vector<int> members;
    std::set<std::string> usable;
    for (int i = 0; i < static_cast<int>(ranks.size()); ++i) {
      if (ranks[i].host != host) continue;
      members.push_back(i);
      usable.insert(ranks[i].devices.begin(), ranks[i].devices.end());
    }
    const std::string node = host + " runs " + plural(members.size(), "local rank") + " but has " +
                             plural(usable.size(), "usable CUDA device");
    std::map<std::string, int> taken_by;  // device -> the first rank taking it
    for (int i : members) {
      const auto& d = ranks[i].devices;
      if (d.empty()) {
        plan.ok = false;
        plan.why = node + " (rank " + std::to_string(i) + " sees none)";
        return plan;
      }
      // cuda_select_device's rule: the only visible device, else local_rank % count.
      const std::string& mine =
          d.size() == 1 ? d[0] : d[static_cast<size_t>(std::max(ranks[i].local_rank, 0)) % d.size()];
      const auto [it, fresh] = taken_by.emplace(mine, i);
      if (!fresh) {
        plan.ok = false;
        plan.why = node + "; ranks " + std::to_string(it->second) + " and " + std::to_string(i) +
                   " would share device " + mine + " (NCCL takes one rank per GPU)";
        return plan;
      }
    }
  }
  return plan;
}

std::string device_bus_id([[maybe_unused]] int device) {
#ifdef SFTDP_WITH_CUDA
  char id[64] = {};
  CHECK_CUDA(cudaDeviceGetPCIBusId(id, sizeof id, device));
  return id;
#else
  return "";
#endif
}

std::vector<RankGpuFacts> gather_gpu_facts(const comm::MpiSession& mpi) {
  // Under the collective deadline, like every collective (comm::allgather_strings).
  const auto all = comm::allgather_strings(encode({mpi.host(), mpi.local_rank(), local_devices()}),
                                           "the GPU check");
  std::vector<RankGpuFacts> facts;
  facts.reserve(all.size());
  for (const auto& text : all) facts.push_back(decode(text));
  return facts;
}

}  // namespace sftdp::train
