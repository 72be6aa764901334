// kernels/cuda/profile.cu — the profile windows of profile.cuh: an event pool, the open window's
// operations (tags, host clocks, their two events), and the JSON lines end() appends to the file.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/profile.cuh"

namespace sftdp::cuda::profile {
namespace {

using Clock = std::chrono::steady_clock;

struct Op {
  const char* op;
  const char* name;
  std::string site, detail;
  cudaStream_t stream;
  cudaEvent_t start, end;
  double enqueue_us, call_us;
};

struct Window {
  bool open = false;
  std::string fields;
  cudaEvent_t reference = nullptr;
  Clock::time_point host_zero;
  std::vector<Op> ops;
  std::vector<cudaEvent_t> pool;  // 2 per operation, kept across windows
};
Window& window() {
  static auto* w = new Window;  // never destroyed: the CUDA runtime may be gone at exit
  return *w;
}

// The MPI rank a launcher gave this process (Open MPI, PMIx, PMI, Slurm), else 0: what %r becomes.
std::string launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "0";
}

const std::string& profile_path() {
  static const std::string path = [] {
    const char* v = std::getenv("SFTDP_GPU_PROFILE");
    std::string out;
    for (const char* p = v ? v : ""; *p; ++p) {
      if (p[0] == '%' && p[1] == 'r') {
        out += launcher_rank();
        ++p;
      } else {
        out += *p;
      }
    }
    return out;
  }();
  return path;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

std::string basename_of(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

void append(const std::string& text) {
  const std::string& path = profile_path();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  SFTDP_ASSERT(fd >= 0, "SFTDP_GPU_PROFILE=" + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    SFTDP_ASSERT(n > 0, "writing SFTDP_GPU_PROFILE=" + path + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

std::string device_fields() {
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  return "\"device\":" + json_string(prop.name) + ",\"sms\":" + std::to_string(prop.multiProcessorCount) +
         ",\"cc\":\"" + std::to_string(prop.major) + "." + std::to_string(prop.minor) + "\"";
}

}  // namespace

bool enabled() { return !profile_path().empty(); }

bool active() { return window().open; }

void begin(const std::string& fields) {
  SFTDP_ASSERT(enabled(), "profile::begin without SFTDP_GPU_PROFILE");
  Window& w = window();
  SFTDP_ASSERT(!w.open, "profile::begin: a window is already open");
  if (!w.reference) CHECK_CUDA(cudaEventCreate(&w.reference));
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaEventRecord(w.reference, stream()));
  CHECK_CUDA(cudaEventSynchronize(w.reference));
  w.host_zero = Clock::now();
  w.fields = fields;
  w.ops.clear();
  w.open = true;
}

void end() {
  Window& w = window();
  SFTDP_ASSERT(w.open, "profile::end without an open window");
  w.open = false;
  const double host_us = us_since(w.host_zero);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::map<cudaStream_t, int> stream_ids;  // in order of first use, as the record numbers streams
  std::string lines = "{\"op\":\"profile\"," + device_fields() + (w.fields.empty() ? "" : "," + w.fields) + "}\n";
  double device_end_us = 0;
  for (size_t i = 0; i < w.ops.size(); ++i) {
    const Op& o = w.ops[i];
    const auto [it, fresh] = stream_ids.emplace(o.stream, static_cast<int>(stream_ids.size()));
    (void)fresh;
    const double start_us = 1e3 * elapsed_ms(w.reference, o.start), end_us = 1e3 * elapsed_ms(w.reference, o.end);
    device_end_us = std::max(device_end_us, end_us);
    lines += "{\"op\":" + json_string(o.op) + ",\"i\":" + std::to_string(i) + ",\"name\":" + json_string(o.name) +
             ",\"site\":" + json_string(o.site) + ",\"stream\":" + std::to_string(it->second) +
             ",\"start_us\":" + number(start_us) + ",\"us\":" + number(end_us - start_us) +
             ",\"enqueue_us\":" + number(o.enqueue_us) + ",\"call_us\":" + number(o.call_us) +
             (o.detail.empty() ? "" : "," + o.detail) + "}\n";
  }
  lines += "{\"op\":\"profile_end\",\"ops\":" + std::to_string(w.ops.size()) + ",\"device_us\":" +
           number(device_end_us) + ",\"host_us\":" + number(host_us) + "}\n";
  append(lines);
  w.ops.clear();
}

Scope::Scope(cudaStream_t stream, const char* op, const char* name, const char* file, int line, std::string detail) {
  Window& w = window();
  if (!w.open) return;
  const auto t0 = Clock::now();
  const size_t i = w.ops.size();
  while (w.pool.size() < 2 * (i + 1)) {
    cudaEvent_t e = nullptr;
    CHECK_CUDA(cudaEventCreate(&e));
    w.pool.push_back(e);
  }
  const double enqueue_us = std::chrono::duration<double, std::micro>(t0 - w.host_zero).count();
  w.ops.push_back(Op{op, name, basename_of(file) + ":" + std::to_string(line), std::move(detail), stream,
                     w.pool[2 * i], w.pool[2 * i + 1], enqueue_us, 0.0});
  CHECK_CUDA(cudaEventRecord(w.ops.back().start, stream));
  index_ = static_cast<int>(i);
}

Scope::~Scope() {
  if (index_ < 0) return;
  Window& w = window();
  if (!w.open || static_cast<size_t>(index_) >= w.ops.size()) return;  // the window closed meanwhile
  Op& o = w.ops[index_];
  // Not CHECK_CUDA: a destructor must not throw; a failed record shows as a failed read in end().
  (void)cudaEventRecord(o.end, o.stream);
  o.call_us = us_since(w.host_zero) - o.enqueue_us;
}

const char* copy_kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return "HtoD";
    case cudaMemcpyDeviceToHost:
      return "DtoH";
    case cudaMemcpyDeviceToDevice:
      return "DtoD";
    case cudaMemcpyHostToHost:
      return "HtoH";
    default:
      return "default";
  }
}

}  // namespace sftdp::cuda::profile

namespace sftdp::cuda {

void memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream, const char* file,
                  int line) {
  const profile::Scope timed(stream, "memcpy", profile::copy_kind_name(kind), file, line,
                             profile::active() ? "\"bytes\":" + std::to_string(bytes) : std::string());
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream));
}

void memset_async(void* p, int value, size_t bytes, cudaStream_t stream, const char* file, int line) {
  const profile::Scope timed(stream, "memset", "cudaMemsetAsync", file, line,
                             profile::active() ? "\"bytes\":" + std::to_string(bytes) : std::string());
  CHECK_CUDA(cudaMemsetAsync(p, value, bytes, stream));
}

}  // namespace sftdp::cuda
