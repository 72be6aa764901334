// src/comm/rank_list.cpp — see rank_list.h.
#include "comm/rank_list.h"

#include <algorithm>

namespace sftdp::comm {

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    // Appends, not "," + string: gcc 12's -Wrestrict misfires on operator+(const char*, string&&).
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-', out += std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::vector<HostRanks> group_by_host(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::vector<HostRanks> groups;
  for (int r : ranks) {
    const std::string host = r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[r] : std::string();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const HostRanks& g) { return g.host == host; });
    if (it == groups.end()) it = groups.insert(groups.end(), HostRanks{host, {}});
    it->ranks.push_back(r);
  }
  return groups;
}

std::string ranks_with_hosts(const std::vector<int>& ranks, const std::vector<std::string>& hosts, size_t max_hosts,
                             HostStyle style) {
  const auto groups = group_by_host(ranks, hosts);
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  size_t shown = 0, hidden_ranks = 0;
  for (const auto& g : groups) {
    if (shown == max_hosts) {
      hidden_ranks += g.ranks.size();
      continue;
    }
    if (shown++) out += ", ";
    out += rank_ranges(g.ranks);
    if (!g.host.empty()) out += style == HostStyle::kOn ? " on " + g.host : " (" + g.host + ")";
  }
  if (shown < groups.size())
    out += " and " + std::to_string(hidden_ranks) + " more on " + std::to_string(groups.size() - shown) +
           " other host" + (groups.size() - shown == 1 ? "" : "s");
  return out;
}

}  // namespace sftdp::comm
