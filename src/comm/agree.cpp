// src/comm/agree.cpp — agree_on_user_errors, every_rank and allgather_strings (sftdp/comm.h), the
// small whole-world exchanges. agree_on_user_errors: one allreduce (MIN) of the lowest failing
// rank, then that rank broadcasts its message, and the ranks that failed are gathered to be named
// with their hosts. Each collective is non-blocking, waited for under
// the deadline (comm/collective.h).
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/rank_list.h"
#include "sftdp/check_mpi.h"
#include "sftdp/comm.h"

namespace sftdp::comm {
namespace {
constexpr const char* kAgreement = "the agreement on input errors";

int min_over_ranks(int mine, const char* what) {
  detail::Collective c(what);
  CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, c.request()));
  c.wait();
  return mine;
}

void broadcast(void* buf, int count, MPI_Datatype type, int root) {
  detail::Collective c(kAgreement);
  CHECK_MPI(MPI_Ibcast(buf, count, type, root, MPI_COMM_WORLD, c.request()));
  c.wait();
}
}  // namespace

bool every_rank(bool mine, const char* what) { return min_over_ranks(mine ? 1 : 0, what) == 1; }

std::vector<std::string> allgather_strings(const std::string& mine, const char* what) {
  int world = 1;
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::vector<int> sizes(world), offsets(world);
  int size = static_cast<int>(mine.size());
  {
    detail::Collective c(what);
    CHECK_MPI(MPI_Iallgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD, c.request()));
    c.wait();
  }
  int total = 0;
  for (int r = 0; r < world; ++r) offsets[r] = total, total += sizes[r];
  std::string all(static_cast<size_t>(total), '\0');
  {
    detail::Collective c(what);
    CHECK_MPI(MPI_Iallgatherv(mine.data(), size, MPI_CHAR, all.data(), sizes.data(), offsets.data(),
                              MPI_CHAR, MPI_COMM_WORLD, c.request()));
    c.wait();
  }
  std::vector<std::string> out;
  out.reserve(world);
  for (int r = 0; r < world; ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
}

void agree_on_user_errors(const std::function<void()>& fn) {
  int rank = 0, world = 1;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::string error;
  bool failed = false;
  try {
    fn();
  } catch (const UserError& e) {
    error = e.what();
    failed = true;
  }
  if (world == 1) {
    if (failed) throw UserError(error);
    return;
  }
  const int first = min_over_ranks(failed ? rank : world, kAgreement);
  if (first == world) return;
  uint64_t len = error.size();
  broadcast(&len, 1, MPI_UINT64_T, first);
  error.resize(len);
  broadcast(error.data(), static_cast<int>(len), MPI_CHAR, first);
  // Which ranks saw it, by host: a file one node cannot see reads "(seen by ranks 2-3 on node2)".
  std::vector<int> flags(world);
  {
    int mine = failed ? 1 : 0;
    detail::Collective c(kAgreement);
    CHECK_MPI(MPI_Iallgather(&mine, 1, MPI_INT, flags.data(), 1, MPI_INT, MPI_COMM_WORLD, c.request()));
    c.wait();
  }
  std::vector<int> seen;
  for (int r = 0; r < world; ++r)
    if (flags[r]) seen.push_back(r);
  if (static_cast<int>(seen.size()) == world) throw UserError(error);  // every rank: nothing to add
  throw UserError(error + " (seen by " + ranks_with_hosts(seen, detail::rank_hosts(), 8, HostStyle::kOn) + ")");
}

}  // namespace sftdp::comm
