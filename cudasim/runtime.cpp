// cudasim/runtime.cpp — settings, devices, errors, stream handles and reports (runtime.h).
#include "cudasim/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cudasim/record.h"
#include "cudasim/sim.h"

namespace sftdp::sim {
namespace {

[[noreturn]] void bad_setting(const char* name, const char* value, const char* want) {
  std::fprintf(stderr, "error: %s=%s: %s (CUDA simulator)\n", name, value, want);
  std::exit(2);
}

long long env_number(const char* name, long long fallback, long long lo, long long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (end == v || errno != 0) bad_setting(name, v, "expected a whole number");
  if (*end == 'K' || *end == 'k')
    x <<= 10, ++end;
  else if (*end == 'M' || *end == 'm')
    x <<= 20, ++end;
  else if (*end == 'G' || *end == 'g')
    x <<= 30, ++end;
  if (*end != '\0') bad_setting(name, v, "expected a whole number (K, M or G may follow)");
  if (x < lo || x > hi) bad_setting(name, v, ("expected " + std::to_string(lo) + " to " + std::to_string(hi)).c_str());
  return x;
}

Settings read_settings() {
  Settings s;
  s.physical_devices = static_cast<int>(env_number("SFTDP_SIM_DEVICES", 1, 0, 64));
  s.device_memory = static_cast<size_t>(env_number("SFTDP_SIM_DEVICE_MEMORY", 16ll << 30, 1ll << 20, 1ll << 40));
  s.schedules = static_cast<int>(env_number("SFTDP_SIM_SCHEDULES", 2, 1, 16));
  if (const char* mode = std::getenv("SFTDP_SIM_STREAMS"); mode && *mode) {
    if (std::strcmp(mode, "lazy") == 0)
      s.lazy_streams = true;
    else if (std::strcmp(mode, "eager") == 0)
      s.lazy_streams = false;
    else
      bad_setting("SFTDP_SIM_STREAMS", mode, "expected lazy or eager");
  }
  if (const char* path = std::getenv("SFTDP_SIM_RECORD"); path && *path) s.record_path = path;
  if (const char* only = std::getenv("SFTDP_SIM_RECORD_ONLY"); only && *only) {
    if (std::strcmp(only, "1") == 0)
      s.record_only = true;
    else if (std::strcmp(only, "0") != 0)
      bad_setting("SFTDP_SIM_RECORD_ONLY", only, "expected 0 or 1");
    if (s.record_only && s.record_path.empty())
      bad_setting("SFTDP_SIM_RECORD_ONLY", only,
                  "needs SFTDP_SIM_RECORD=<path> (nothing would run, nothing be recorded)");
  }
  // CUDA's rule: the listed indices in order, up to the first entry that is not a device index.
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible) {
    for (int i = 0; i < s.physical_devices; ++i) s.visible.push_back(i);
  } else {
    std::string list(visible);
    size_t at = 0;
    while (at <= list.size() && !list.empty()) {
      const size_t comma = std::min(list.find(',', at), list.size());
      const std::string item = list.substr(at, comma - at);
      char* end = nullptr;
      const long x = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || x < 0 || x >= s.physical_devices ||
          std::find(s.visible.begin(), s.visible.end(), static_cast<int>(x)) != s.visible.end())
        break;
      s.visible.push_back(static_cast<int>(x));
      at = comma + 1;
    }
  }
  return s;
}

Settings& mutable_settings() {
  static Settings* s = new Settings(read_settings());
  return *s;
}

std::mutex& reports_mu() {
  static std::mutex* m = new std::mutex;
  return *m;
}
std::vector<std::string>& report_log() {
  static auto* v = new std::vector<std::string>;
  return *v;
}

}  // namespace

const Settings& settings() { return mutable_settings(); }
void set_schedules(int n) { mutable_settings().schedules = std::max(1, n); }
int schedules() { return settings().schedules; }

std::vector<Device*>& devices() {
  static auto* list = [] {
    install_fault_handlers();
    open_record_from_settings();  // a bad SFTDP_SIM_RECORD path ends the process here, exit 2
    auto* v = new std::vector<Device*>;
    const Settings& s = settings();
    for (size_t i = 0; i < s.visible.size(); ++i) {
      auto* d = new Device;
      d->ordinal = static_cast<int>(i);
      d->physical = s.visible[i];
      char id[32];
      std::snprintf(id, sizeof id, "0000:%02X:00.0", 0x18 + 0x10 * d->physical);
      d->bus_id = id;
      d->budget = s.device_memory;
      v->push_back(d);
    }
    return v;
  }();
  return *list;
}

Device& device(int ordinal) { return *devices().at(static_cast<size_t>(ordinal)); }

int& current_device() {
  static thread_local int current = 0;
  return current;
}

cudaError_t sticky_error(int ordinal) {
  auto& all = devices();
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= all.size()) return cudaSuccess;
  return static_cast<cudaError_t>(all[static_cast<size_t>(ordinal)]->sticky.load());
}

void set_sticky_error(int ordinal, cudaError_t e) {
  int expected = cudaSuccess;
  device(ordinal).sticky.compare_exchange_strong(expected, e);  // the first fault is the one reported
}

void clear_sticky_error() {
  if (!devices().empty()) device(current_device()).sticky = cudaSuccess;
}

cudaError_t& last_error() {
  static thread_local cudaError_t e = cudaSuccess;
  return e;
}

namespace {
std::mutex& streams_mu() {
  static std::mutex* m = new std::mutex;
  return *m;
}
std::vector<Stream*>& live_streams() {
  static auto* v = new std::vector<Stream*>;
  return *v;
}
}  // namespace

void register_stream(Stream* s) {
  {
    std::lock_guard<std::mutex> lock(streams_mu());
    live_streams().push_back(s);
  }
  Device& d = device(s->device());
  std::lock_guard<std::mutex> lock(d.mu);
  d.streams.push_back(s);
}

void unregister_stream(Stream* s) {
  {
    std::lock_guard<std::mutex> lock(streams_mu());
    auto& v = live_streams();
    v.erase(std::remove(v.begin(), v.end(), s), v.end());
  }
  Device& d = device(s->device());
  std::lock_guard<std::mutex> lock(d.mu);
  d.streams.erase(std::remove(d.streams.begin(), d.streams.end(), s), d.streams.end());
}

bool is_live(const Stream* s) {  // s may be dangling: compared, never dereferenced
  for (Device* d : devices()) {
    std::lock_guard<std::mutex> lock(d->mu);
    if (d->legacy == s) return true;
  }
  std::lock_guard<std::mutex> lock(streams_mu());
  const auto& v = live_streams();
  return std::find(v.begin(), v.end(), s) != v.end();
}

Stream* resolve(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy) {
    if (devices().empty()) return nullptr;
    Device& d = device(current_device());
    std::lock_guard<std::mutex> lock(d.mu);
    if (!d.legacy) {
      d.legacy = new Stream(d.ordinal, Stream::Kind::kLegacy);
      d.streams.push_back(d.legacy);
    }
    return d.legacy;
  }
  auto* s = reinterpret_cast<Stream*>(handle);
  std::lock_guard<std::mutex> lock(streams_mu());
  const auto& v = live_streams();
  return std::find(v.begin(), v.end(), s) != v.end() ? s : nullptr;
}

uint64_t enqueue(Stream& s, std::string what, std::function<void()> fn, bool exec) {
  if (s.kind() != Stream::Kind::kNonBlocking) {
    Device& d = device(s.device());
    std::vector<std::pair<Stream*, uint64_t>> waits;
    {
      std::lock_guard<std::mutex> lock(d.mu);
      for (Stream* other : d.streams) {
        if (other == &s || other->kind() == Stream::Kind::kNonBlocking) continue;
        // legacy waits for every blocking stream; a blocking stream waits for legacy only
        if (s.kind() == Stream::Kind::kBlocking && other->kind() != Stream::Kind::kLegacy) continue;
        const uint64_t t = other->tail();
        if (t > 0 && !other->finished(t)) waits.emplace_back(other, t);
      }
    }
    for (const auto& w : waits) {  // (init-captures: clang 14 cannot capture structured bindings)
      s.order_after(w.first->clock());
      s.enqueue(
          "implicit legacy-stream wait", [other = w.first, t = w.second] { other->wait(t); }, false);
    }
  }
  apply_pending_wait(s, what);
  return s.enqueue(std::move(what), std::move(fn), exec);
}

// SFTDP_SIM_PLANT=drop-wait-before:<op> (tests only): a cudaStreamWaitEvent whose stream's next op's name
// starts with <op> is dropped, as if the line that called it were deleted. Waits are held back until then.
namespace {
struct PendingWait {
  Stream* on;
  uint64_t seq;
  order::Clock clock;
};
std::mutex& pending_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<Stream*, std::vector<PendingWait>>& pending_waits() {
  static auto* m = new std::map<Stream*, std::vector<PendingWait>>;
  return *m;
}
}  // namespace

const std::string& planted_wait_drop() {
  static const std::string op = [] {
    const char* v = std::getenv("SFTDP_SIM_PLANT");
    const std::string prefix = "drop-wait-before:";
    if (!v || !*v) return std::string();
    const std::string plant(v);
    if (plant.rfind(prefix, 0) != 0 || plant.size() == prefix.size())
      bad_setting("SFTDP_SIM_PLANT", v, "expected drop-wait-before:<op name>");
    return plant.substr(prefix.size());
  }();
  return op;
}

void queue_event_wait(Stream& s, Stream* on, uint64_t seq, const order::Clock& clock) {
  if (!planted_wait_drop().empty()) {
    std::lock_guard<std::mutex> lock(pending_mu());
    pending_waits()[&s].push_back(PendingWait{on, seq, clock});
    return;
  }
  s.order_after(clock);
  enqueue(
      s, "cudaStreamWaitEvent", [on, seq] { on->wait(seq); }, /*exec=*/false);
}

void apply_pending_wait(Stream& s, const std::string& next_op) {
  if (planted_wait_drop().empty()) return;
  std::vector<PendingWait> waits;
  {
    std::lock_guard<std::mutex> lock(pending_mu());
    const auto it = pending_waits().find(&s);
    if (it == pending_waits().end()) return;
    waits = std::move(it->second);
    pending_waits().erase(it);
  }
  if (next_op.rfind(planted_wait_drop(), 0) == 0) {
    report("plant", "dropped the cudaStreamWaitEvent before " + next_op + " (SFTDP_SIM_PLANT)");
    return;
  }
  for (const PendingWait& w : waits) {
    s.order_after(w.clock);
    s.enqueue(
        "cudaStreamWaitEvent", [on = w.on, seq = w.seq] { on->wait(seq); }, /*exec=*/false);
  }
}

void synchronize_device(int ordinal) {
  Device& d = device(ordinal);
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    all = d.streams;
  }
  for (Stream* s : all) {
    s->wait(s->tail());
    order::host_observes(s->clock());
  }
}

void report(const char* check, const std::string& text) {
  const std::string line = "sftdp-cudasim: " + std::string(check) + ": " + text + "\n";
  {
    std::lock_guard<std::mutex> lock(reports_mu());
    report_log().push_back(line);
  }
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());  // one write: lines of ranks do not mix
  (void)ignored;
}

void fault(int ordinal, cudaError_t sticky, const char* check, const std::string& text) {
  report(check, text);
  set_sticky_error(ordinal, sticky);
}

std::vector<std::string> reports() {
  std::lock_guard<std::mutex> lock(reports_mu());
  return report_log();
}

void clear_reports() {
  std::lock_guard<std::mutex> lock(reports_mu());
  report_log().clear();
}

}  // namespace sftdp::sim
