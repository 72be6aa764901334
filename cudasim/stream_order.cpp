// cudasim/stream_order.cpp — streamcheck (see stream_order.h).
#include "cudasim/stream_order.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "cudasim/memory.h"
#include "cudasim/runtime.h"

namespace sftdp::sim::order {
namespace {

std::mutex& clock_mu() {
  static auto* m = new std::mutex;  // never destroyed: workers may queue during exit
  return *m;
}
Clock& host_clock() {
  static auto* c = new Clock;
  return *c;
}

uint64_t seq_of(const Clock& c, uint64_t stream) {
  const auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(stream, uint64_t{0}));
  return it != c.end() && it->first == stream ? it->second : 0;
}

void join_unlocked(Clock& into, const Clock& from) {
  Clock out;
  out.reserve(into.size() + from.size());
  auto a = into.cbegin();
  auto b = from.cbegin();
  while (a != into.cend() || b != from.cend()) {
    if (b == from.cend() || (a != into.cend() && a->first < b->first)) {
      out.push_back(*a++);
    } else if (a == into.cend() || b->first < a->first) {
      out.push_back(*b++);
    } else {
      out.emplace_back(a->first, std::max(a->second, b->second));
      ++a, ++b;
    }
  }
  into = std::move(out);
}

// One access of an allocation by one op.
struct Access {
  uint64_t stream, seq;
  uintptr_t begin, end;
  bool write;
  std::string what;  // the op and operand, for the report
};
constexpr size_t kKeep = 64;  // accesses kept per allocation: older ones are forgotten (a race may be missed)

std::mutex& table_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<uint64_t, std::deque<Access>>& table() {
  static auto* t = new std::unordered_map<uint64_t, std::deque<Access>>;
  return *t;
}

thread_local std::shared_ptr<const Stamp> t_current;

std::string range_text(uintptr_t begin, uintptr_t end, const Allocation& a) {
  return "bytes " + std::to_string(begin - a.begin) + ".." + std::to_string(end - a.begin) + " of allocation #" +
         std::to_string(a.id) + " (" + std::to_string(a.size) + " bytes)";
}

// Checks [begin, end) of allocation a against the other streams' recent accesses, then remembers it.
void record(const Stamp& op, const Allocation& a, uintptr_t begin, uintptr_t end, bool write,
            const std::string& what) {
  if (begin >= end) return;
  std::string race;
  {
    std::lock_guard<std::mutex> lock(table_mu());
    std::deque<Access>& seen = table()[a.id];
    for (const Access& p : seen) {
      if (p.stream == op.stream || p.end <= begin || end <= p.begin || !(p.write || write)) continue;
      if (seq_of(op.clock, p.stream) >= p.seq) continue;  // ordered: p happened before this op
      race = what + " (stream #" + std::to_string(op.stream) + ", op " + std::to_string(op.seq) + ") " +
             (write ? "writes " : "reads ") + range_text(std::max(begin, p.begin), std::min(end, p.end), a) +
             ", which " + p.what + " (stream #" + std::to_string(p.stream) + ", op " + std::to_string(p.seq) + ") " +
             (p.write ? "writes" : "reads") +
             ", and nothing orders the two (no cudaStreamWaitEvent on an event recorded after the one, no host "
             "synchronisation between them): on a GPU they may run at the same time";
      break;
    }
    seen.push_back(Access{op.stream, op.seq, begin, end, write, what});
    if (seen.size() > kKeep) seen.pop_front();
  }
  if (!race.empty()) fault(op.device, cudaErrorLaunchFailure, "streamcheck", race);
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SFTDP_SIM_STREAMCHECK");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

uint64_t new_stream_id() {
  std::lock_guard<std::mutex> lock(clock_mu());
  static uint64_t next = 1;
  return next++;
}

std::shared_ptr<const Stamp> stamp(uint64_t stream, int device, uint64_t seq, const std::string& what,
                                   Clock& stream_clock) {
  auto s = std::make_shared<Stamp>();
  s->stream = stream, s->seq = seq, s->device = device, s->what = what;
  std::lock_guard<std::mutex> lock(clock_mu());
  join_unlocked(stream_clock, host_clock());
  join_unlocked(stream_clock, Clock{{stream, seq}});
  s->clock = stream_clock;
  return s;
}

void join(Clock& into, const Clock& from) {
  std::lock_guard<std::mutex> lock(clock_mu());
  join_unlocked(into, from);
}

void host_observes(const Clock& c) {
  std::lock_guard<std::mutex> lock(clock_mu());
  join_unlocked(host_clock(), c);
}

Clock copy(const Clock& c) {
  std::lock_guard<std::mutex> lock(clock_mu());
  return c;
}

void set_current(std::shared_ptr<const Stamp> op) { t_current = std::move(op); }

void access(const void* p, size_t bytes, bool write, const char* operand) {
  const Stamp* op = t_current.get();
  if (!op || !p || bytes == 0 || !enabled()) return;
  const auto a = memory().find(p, bytes);
  if (!a || !a->live) return;  // host memory (pinned staging) or a range memcheck reports
  const auto begin = reinterpret_cast<uintptr_t>(p);
  record(*op, *a, begin, begin + bytes, write, op->what + (*operand ? std::string(" (") + operand + ")" : ""));
}

void kernel_writes(const Allocation& a, const unsigned char* before) {
  const Stamp* op = t_current.get();
  if (!op || !enabled()) return;
  const auto* now = reinterpret_cast<const unsigned char*>(a.begin);
  // Blocks of 64 bytes compared with memcmp; a run of changed blocks is one range, trimmed to its first and
  // last changed byte.
  constexpr size_t kBlock = 64;
  const auto changed = [&](size_t at) {
    const size_t n = std::min(kBlock, a.size - at);
    return std::memcmp(before + at, now + at, n) != 0;
  };
  for (size_t at = 0; at < a.size;) {
    if (!changed(at)) {
      at += kBlock;
      continue;
    }
    size_t last = at;  // the last changed block of the run
    while (last + kBlock < a.size && changed(last + kBlock)) last += kBlock;
    size_t begin = at, end = std::min(last + kBlock, a.size);
    while (before[begin] == now[begin]) ++begin;
    while (before[end - 1] == now[end - 1]) --end;
    // Whole 4-byte words: a float whose low bytes kept their value was still written.
    begin &= ~size_t{3};
    end = std::min((end + 3) & ~size_t{3}, a.size);
    record(*op, a, a.begin + begin, a.begin + end, true, op->what);
    at = last + kBlock;
  }
}

}  // namespace sftdp::sim::order
