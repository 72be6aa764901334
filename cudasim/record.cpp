// cudasim/record.cpp — the record file of record mode (record.h): one JSON line per device operation,
// written by the queueing host thread in one write(2) to a file opened O_APPEND (so lines of processes
// sharing one file never mix), numbered by a process-wide sequence. A kernel's argument types come from
// the compiler: the type name of launch()'s thread body (launch.h) names the kernel's parameter types.
#include "cudasim/record.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <typeindex>
#include <vector>

#include "cudasim/launch.h"
#include "cudasim/memory.h"
#include "cudasim/runtime.h"

namespace sftdp::sim {
namespace {

struct RecordState {
  std::mutex mu;  // guards everything below but `only` and `paused`
  int fd = -1;
  std::atomic<bool> only{false};
  std::atomic<bool> paused{false};
  uint64_t seq = 0;
  std::map<const Stream*, int> stream_ids;  // in order of first record
  std::map<std::type_index, std::vector<std::string>> param_types;
};
RecordState& state() {
  static auto* s = new RecordState;  // never destroyed: stream workers may still queue at exit
  return *s;
}

// The MPI rank a launcher gave this process (Open MPI, PMIx, PMI, Slurm), else 0: what %r becomes.
std::string launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "0";
}

std::string expand_path(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'r') {
      out += launcher_rank();
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

void write_all(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      report("record", std::string("writing the record file failed: ") + std::strerror(errno));
      return;
    }
    done += static_cast<size_t>(n);
  }
}

// Opens `path` for appending and writes the process's "start" line; -1 with errno set on failure.
int open_file(const std::string& path, bool only) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  write_all(fd, "{\"op\":\"start\",\"pid\":" + std::to_string(getpid()) +
                    ",\"record_only\":" + (only ? "true" : "false") + ",\"format\":1}\n");
  return fd;
}

// Caller holds state().mu.
int stream_id(const Stream* s) {
  auto& ids = state().stream_ids;
  const auto it = ids.find(s);
  if (it != ids.end()) return it->second;
  int next = 0;
  for (const auto& [stream, id] : ids) next = std::max(next, id + 1);
  ids.emplace(s, next);
  return next;
}

std::string float_text(float x) {
  if (x != x) return "\"nan\"";
  if (x == INFINITY) return "\"inf\"";
  if (x == -INFINITY) return "\"-inf\"";
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {  // the shortest that reads back as the same float
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

// ---- kernel arguments ------------------------------------------------------------------------------
// launch<P..., A...>(const LaunchSite&, void (*)(P...), ...)::{lambda()#1}: the P list, split at its
// top-level commas. Empty when the name does not have that shape (then arguments are given as bytes).
std::vector<std::string> parse_param_types(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  if (status != 0 || !text) return {};
  const std::string name(text.get());
  const size_t at = name.find("void (*)(");
  if (at == std::string::npos) return {};
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  for (size_t i = at + 9; i < name.size(); ++i) {
    const char c = name[i];
    if (depth == 0 && (c == ',' || c == ')')) {
      while (!current.empty() && current.front() == ' ') current.erase(current.begin());
      if (!current.empty()) out.push_back(current);
      current.clear();
      if (c == ')') return out;
      continue;
    }
    if (c == '(' || c == '<' || c == '[') ++depth;
    if (c == ')' || c == '>' || c == ']') --depth;
    current += c;
  }
  return {};
}

struct ScalarType {
  const char* name;
  size_t size;
  char kind;  // 'b' bool, 'i' signed, 'u' unsigned, 'f' float, 'd' double
};
constexpr ScalarType kScalars[] = {
    {"bool", 1, 'b'},  {"char", 1, 'i'},           {"signed char", 1, 'i'}, {"unsigned char", 1, 'u'},
    {"short", 2, 'i'}, {"unsigned short", 2, 'u'}, {"int", 4, 'i'},         {"unsigned int", 4, 'u'},
    {"long", 8, 'i'},  {"unsigned long", 8, 'u'},  {"long long", 8, 'i'},   {"unsigned long long", 8, 'u'},
    {"float", 4, 'f'}, {"double", 8, 'd'},
};

std::string scalar_value(const ScalarType& t, const void* bytes) {
  switch (t.kind) {
    case 'b':
      return *static_cast<const bool*>(bytes) ? "true" : "false";
    case 'f': {
      float f;
      std::memcpy(&f, bytes, 4);
      return float_text(f);
    }
    case 'd': {
      double d;
      std::memcpy(&d, bytes, 8);
      return json_number(d);
    }
    default:
      break;
  }
  uint64_t u = 0;
  std::memcpy(&u, bytes, t.size);  // little-endian: the low bytes
  if (t.kind == 'u') return std::to_string(u);
  const int shift = static_cast<int>(64 - 8 * t.size);
  return std::to_string(static_cast<int64_t>(u << shift) >> shift);  // sign-extended
}

std::string argument(const ArgView& a, const std::string& type) {
  if (a.is_pointer) {
    const void* p = nullptr;
    std::memcpy(&p, a.bytes, sizeof p);
    const std::string where = json_pointer(p);  // {"alloc":...}
    return "{\"type\":" + json_string(type.empty() ? "pointer" : type) + "," + where.substr(1);
  }
  for (const ScalarType& t : kScalars)
    if (type == t.name && a.size == t.size)
      return "{\"type\":" + json_string(type) + ",\"value\":" + scalar_value(t, a.bytes) + "}";
  // Anything else (a functor, a struct): its size, and the allocations its pointer-sized words point into.
  std::string allocs;
  for (size_t at = 0; at + sizeof(void*) <= a.size; at += sizeof(void*)) {
    const void* p = nullptr;
    std::memcpy(&p, static_cast<const char*>(a.bytes) + at, sizeof p);
    if (!p) continue;
    if (const auto al = memory().find(p, 0); al && al->live)
      allocs += (allocs.empty() ? "" : ",") + std::to_string(al->id);
  }
  return "{\"type\":" + json_string(type.empty() ? "?" : type) + ",\"bytes\":" + std::to_string(a.size) +
         ",\"allocs\":[" + allocs + "]}";
}

std::string dim_text(const dim3& d) {
  return "[" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + "]";
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double x) {
  if (x != x) return "\"nan\"";
  if (x == INFINITY) return "\"inf\"";
  if (x == -INFINITY) return "\"-inf\"";
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

std::string json_pointer(const void* p) {
  if (!p) return "{\"alloc\":null}";
  const auto a = memory().find(p, 0);
  if (!a) return "{\"host\":true}";
  return "{\"alloc\":" + std::to_string(a->id) +
         ",\"offset\":" + std::to_string(reinterpret_cast<uintptr_t>(p) - a->begin) + "}";
}

bool recording() {
  RecordState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.fd >= 0;
}

bool record_only() { return state().only.load(); }

void record_pause(bool paused) { state().paused = paused; }

void open_record_from_settings() {
  const Settings& set = settings();
  RecordState& s = state();
  s.only = set.record_only;
  if (set.record_path.empty()) return;
  const std::string path = expand_path(set.record_path);
  const int fd = open_file(path, set.record_only);
  if (fd < 0) {
    std::fprintf(stderr, "error: SFTDP_SIM_RECORD=%s: %s (CUDA simulator)\n", set.record_path.c_str(),
                 std::strerror(errno));
    std::exit(2);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.fd = fd;
}

void set_record(const std::string& path, bool only) {
  RecordState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.fd >= 0) ::close(s.fd);
  s.fd = path.empty() ? -1 : open_file(path, only);
  s.only = only;
  s.stream_ids.clear();
  s.seq = 0;
}

void forget_stream(const Stream* st) {
  RecordState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stream_ids.erase(st);
}

void record_op(const char* op, const Stream* st, const std::string& fields) {
  RecordState& s = state();
  if (s.paused) return;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.fd < 0) return;
  std::string line = "{\"op\":" + json_string(op) + ",\"seq\":" + std::to_string(s.seq++);
  if (st) line += ",\"device\":" + std::to_string(st->device()) + ",\"stream\":" + std::to_string(stream_id(st));
  if (!fields.empty()) line += "," + fields;
  line += "}\n";
  write_all(s.fd, line);
}

void record_mark(const std::string& label, const std::string& fields) {
  record_op("mark", nullptr, "\"label\":" + json_string(label) + (fields.empty() ? "" : "," + fields));
}

void record_kernel(const KernelLaunch& l, const Stream& st, const std::string& extra) {
  RecordState& s = state();
  if (s.paused) return;
  std::vector<std::string> types;
  {
    const std::type_index key(l.thread_body.target_type());
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.fd < 0) return;
    auto it = s.param_types.find(key);
    if (it == s.param_types.end()) it = s.param_types.emplace(key, parse_param_types(key.name())).first;
    types = it->second;
  }
  if (types.size() != l.args.size()) types.assign(l.args.size(), "");  // an unexpected shape: no types
  const char* slash = std::strrchr(l.file, '/');
  std::string args;
  for (size_t i = 0; i < l.args.size(); ++i) args += (i ? "," : "") + argument(l.args[i], types[i]);
  record_op("kernel", &st,
            "\"name\":" + json_string(l.kernel) +
                ",\"site\":" + json_string(std::string(slash ? slash + 1 : l.file) + ":" + std::to_string(l.line)) +
                ",\"grid\":" + dim_text(l.grid) + ",\"block\":" + dim_text(l.block) +
                ",\"smem\":" + std::to_string(l.dynamic_smem) + ",\"args\":[" + args + "]" + extra);
}

}  // namespace sftdp::sim
