// src/comm/collective.cpp — see collective.h: the collective deadline, the polling wait and the
// arrival side channel. Cost per collective on the hot path: one 8-byte MPI_Isend per watcher
// (two at most), an MPI_Test per poll (what a blocking MPI call does inside anyway) and, on the
// two watchers, receiving the other ranks' 8-byte messages (bench/bench_allreduce measures it).
#include "comm/collective.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "comm/rank_list.h"
#include "sftdp/check_mpi.h"
#include "sftdp/comm.h"

namespace sftdp::comm {
namespace {

double g_timeout_s = 600;  // collective_timeout_s' default (configs/reference.yml)
std::string g_context;     // appended to a collective's name: "of step 7"
int64_t g_seq = 0;         // collectives this rank has entered

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kWatchers = 2;  // ranks 0 and 1: either can name the other when one is stuck
constexpr int kTag = 7;       // the only tag on the channel's private communicator

struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, world = 1;
  std::vector<int> watchers;        // the watchers this rank reports to (not itself)
  std::vector<std::string> hosts;   // by rank
  std::vector<int64_t> last_seen;   // watchers only: the newest count each rank announced
  std::vector<double> last_heard;   // watchers only: when its latest message was taken in (now_s)
  int64_t incoming = 0;             // watchers only: the posted receive's buffer
  MPI_Request recv = MPI_REQUEST_NULL;
  struct Sent {
    int64_t seq;
    MPI_Request request;
  };
  std::deque<Sent> sent;  // in flight; a deque keeps each element's address while it grows

  bool open() const { return comm != MPI_COMM_NULL; }
  bool watching() const { return !last_seen.empty(); }

  void post_recv() {
    CHECK_MPI(MPI_Irecv(&incoming, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTag, comm, &recv));
  }
  // Takes in every arrival message already here (watchers), so none piles up between steps.
  void drain() {
    for (int flag = 1; flag;) {
      MPI_Status status;
      CHECK_MPI(MPI_Test(&recv, &flag, &status));
      if (!flag) break;
      int64_t& seen = last_seen[status.MPI_SOURCE];
      seen = std::max(seen, incoming);
      last_heard[status.MPI_SOURCE] = now_s();
      post_recv();
    }
  }
  void announce(int64_t seq) {
    while (!sent.empty()) {  // eager 8-byte sends: complete by the next collective, in practice
      int flag = 0;
      CHECK_MPI(MPI_Test(&sent.front().request, &flag, MPI_STATUS_IGNORE));
      if (!flag) break;
      sent.pop_front();
    }
    for (int w : watchers) {
      sent.push_back({seq, MPI_REQUEST_NULL});
      CHECK_MPI(MPI_Isend(&sent.back().seq, 1, MPI_INT64_T, w, kTag, comm, &sent.back().request));
    }
  }
};

Channel g_channel;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

void set_collective_timeout(double seconds) { g_timeout_s = seconds; }
double collective_timeout() { return g_timeout_s; }
void set_collective_context(const std::string& where) { g_context = where; }

namespace detail {

double beat_period_s(double timeout_s) { return std::clamp(timeout_s / 10, 0.1, 10.0); }

double deadline_after_s(double timeout_s, int rank, int world) {
  if (timeout_s <= 0) return 0;
  if (world <= 1) return timeout_s;
  const double grace = std::clamp(timeout_s / 10, 1.0, 10.0);
  return timeout_s + std::min(rank, kWatchers) * grace;
}

void open_arrival_channel() {
  Channel& ch = g_channel;
  if (ch.open()) return;
  CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &ch.comm));
  CHECK_MPI(MPI_Comm_rank(ch.comm, &ch.rank));
  CHECK_MPI(MPI_Comm_size(ch.comm, &ch.world));
  std::vector<char> names(static_cast<size_t>(ch.world) * MPI_MAX_PROCESSOR_NAME, '\0');
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0');
  int len = 0;
  CHECK_MPI(MPI_Get_processor_name(mine.data(), &len));
  CHECK_MPI(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, ch.comm));
  ch.hosts.clear();
  for (int r = 0; r < ch.world; ++r) {
    const char* p = names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    ch.hosts.emplace_back(p, strnlen(p, MPI_MAX_PROCESSOR_NAME));
  }
  const int watchers = std::min(ch.world, kWatchers);
  ch.watchers.clear();
  for (int w = 0; w < watchers; ++w)
    if (w != ch.rank) ch.watchers.push_back(w);
  // Counts restart with the channel: every rank opens it at the same point of the same sequence.
  g_seq = 0;
  if (ch.rank < watchers && ch.world > 1) {
    ch.last_seen.assign(ch.world, 0);
    ch.last_heard.assign(ch.world, now_s());
    ch.post_recv();
  }
}

const std::vector<std::string>& rank_hosts() { return g_channel.hosts; }

void close_arrival_channel() {
  Channel& ch = g_channel;
  if (!ch.open()) return;
  if (ch.watching()) {
    ch.drain();
    CHECK_MPI(MPI_Cancel(&ch.recv));
    CHECK_MPI(MPI_Wait(&ch.recv, MPI_STATUS_IGNORE));
  }
  // A send still in flight completes on its own; freeing its request is allowed (MPI 3.1 §3.7.3).
  for (auto& s : ch.sent)
    if (s.request != MPI_REQUEST_NULL) CHECK_MPI(MPI_Request_free(&s.request));
  ch.sent.clear();
  CHECK_MPI(MPI_Comm_free(&ch.comm));
  ch = Channel{};
}

Collective::Collective(const char* what) : what_(what), seq_(++g_seq), start_s_(now_s()) {
  if (g_channel.open()) g_channel.announce(seq_);
}

void Collective::wait() {
  wait_until([this] {
    int flag = 0;
    CHECK_MPI(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  });
}

void Collective::wait_until(const std::function<bool()>& done, const std::function<void()>& on_expiry) {
  const Channel& ch = g_channel;
  int rank = ch.rank, world = ch.world;
  if (!ch.open()) {
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  }
  const double limit = deadline_after_s(g_timeout_s, rank, world);
  const double period = beat_period_s(g_timeout_s);
  double next_beat = start_s_ + period;
  // Reading the clock costs ~20 ns; every 64th poll is plenty for a deadline in seconds. A wait
  // longer than one beat period re-announces this rank every period ("still here, waiting"), so
  // a watcher can tell a rank stopped inside the collective from one that is waiting for others.
  for (unsigned polls = 1; !done(); ++polls) {
    if (limit > 0 && polls % 64 == 0) {
      const double now = now_s();
      if (now >= next_beat) {
        if (g_channel.open()) g_channel.announce(seq_);
        if (g_channel.watching()) g_channel.drain();
        next_beat = now + period;
      }
      if (now - start_s_ >= limit) expire(now - start_s_, on_expiry);
    }
  }
  if (g_channel.watching()) g_channel.drain();
}

void Collective::expire(double waited_s, const std::function<void()>& on_expiry) {
  Channel& ch = g_channel;
  const std::string name = std::string(what_) + (g_context.empty() ? "" : " " + g_context);
  const std::string limit = " (collective_timeout_s: " + number(g_timeout_s) + ")";
  std::string msg;
  if (ch.watching()) {
    // Messages sent before the deadline may still be on their way in: keep receiving briefly.
    for (const double until = now_s() + 0.05; now_s() < until;) ch.drain();
    // Missing: never announced this collective. Silent: announced it, then stopped sending the
    // "still waiting" beats that every rank inside a collective sends (stopped or hung inside).
    std::vector<int> missing, silent;
    const double now = now_s(), silence = 3 * beat_period_s(g_timeout_s);
    for (int r = 0; r < ch.world; ++r) {
      if (r == ch.rank) continue;
      if (ch.last_seen[r] < seq_) missing.push_back(r);
      else if (now - ch.last_heard[r] > silence) silent.push_back(r);
    }
    // "ranks 2-3 (node2)": grouped by host, so a host that went away reads as one.
    auto list = [&](const std::vector<int>& ranks) { return ranks_with_hosts(ranks, ch.hosts); };
    if (!missing.empty())
      msg = list(missing) + (missing.size() == 1 ? " has" : " have") + " not reached " + name +
            " after " + number(waited_s) + " s";
    if (!silent.empty()) {
      double quiet = 0;
      for (int r : silent) quiet = std::max(quiet, now - ch.last_heard[r]);
      msg += (msg.empty() ? "" : "; ") + list(silent) + " reached " + name + " but " +
             (silent.size() == 1 ? "has" : "have") + " given no sign of life for " + number(quiet) +
             " s (stopped or hung inside it)";
    }
    if (msg.empty())
      msg = "every rank reached " + name + " and is still waiting after " + number(waited_s) +
            " s (an MPI or network failure?)";
    // Hosts none of whose ranks answers (this one's aside): a node or its link is down, not a rank.
    std::vector<int> quiet_ranks = missing;
    quiet_ranks.insert(quiet_ranks.end(), silent.begin(), silent.end());
    std::sort(quiet_ranks.begin(), quiet_ranks.end());
    std::string gone;
    int gone_hosts = 0;
    for (const auto& g : group_by_host(quiet_ranks, ch.hosts)) {
      if (g.host == ch.hosts[ch.rank]) continue;
      const auto on_host = std::count(ch.hosts.begin(), ch.hosts.end(), g.host);
      if (static_cast<size_t>(on_host) != g.ranks.size()) continue;
      gone += (gone_hosts++ ? ", " : "") + g.host;
    }
    if (gone_hosts > 0)
      msg += "; no rank on " + std::string(gone_hosts == 1 ? "host " : "hosts ") + gone +
             " answers (the host or its network is down?)";
    msg += "; ending the job" + limit;
  } else if (ch.open() && ch.world > 1) {
    msg = name + " has not completed after " + number(waited_s) + " s on rank " +
          std::to_string(ch.rank) + ", and neither rank 0 nor rank 1 (which track arrivals) has "
          "ended the job: they may be stuck too; ending the job" + limit;
  } else {
    msg = name + " has not completed after " + number(waited_s) + " s; ending the job" + limit;
  }
  std::fprintf(stderr, "%s error: %s\n", rank_tag().c_str(), msg.c_str());
  std::fflush(stderr);
  if (on_expiry) on_expiry();
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace detail
}  // namespace sftdp::comm
