// src/comm/rank_list.h — ranks as people read them in an error line or the placement log: runs of
// consecutive ranks as ranges ("0-3,6"), and a set of ranks grouped by the host each runs on, in
// rank order ("2-3" on node2). Pure functions; the host of each rank is the caller's to give.
#pragma once
#include <string>
#include <vector>

namespace sftdp::comm {

// "0-3,6" for {0, 1, 2, 3, 6}; the input is sorted and without repeats.
std::string rank_ranges(const std::vector<int>& ranks);

struct HostRanks {
  std::string host;
  std::vector<int> ranks;  // sorted
};

// The given ranks (sorted) grouped by hosts[rank], hosts in order of their lowest rank; a rank
// without an entry in hosts goes under host "".
std::vector<HostRanks> group_by_host(const std::vector<int>& ranks, const std::vector<std::string>& hosts);

// "rank 2 (node2)", "ranks 2-3 (node2)", "ranks 0 (node1), 2-3 (node2)"; at most max_hosts hosts
// are named, then "and N more on K other hosts". Ranks of host "" are listed without one.
// HostStyle::kOn writes "ranks 2-3 on node2" (for text already in parentheses).
enum class HostStyle { kParens, kOn };
std::string ranks_with_hosts(const std::vector<int>& ranks, const std::vector<std::string>& hosts, size_t max_hosts = 8,
                             HostStyle style = HostStyle::kParens);

}  // namespace sftdp::comm
