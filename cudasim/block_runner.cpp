// cudasim/block_runner.cpp — blocks, threads as fibers, barriers, warp exchanges and the
// schedule comparison (see block_runner.h). A simulated thread runs until it reaches a sync point
// (__syncthreads, a shuffle/vote/__syncwarp) or returns; the scheduler resumes runnable threads in
// the schedule's order, completes a warp operation once every lane of its mask has arrived, and
// releases the barrier once every thread has. A state from which no thread can proceed (a deadlock
// on a GPU) is an error naming the kernel, as are a barrier that some thread exited without
// reaching, lanes that meet at different warp operations, and a lane outside its own mask.
#include "cudasim/block_runner.h"

#include <sys/mman.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>

#include "cudasim/runtime.h"
#include "cudasim/sanitizer.h"
#include "cudasim/stream_order.h"
#include "cudasim/tensor_core.h"

// Bounds of the section every __shared__ variable lives in (device.h); weak: null when no kernel
// declares one.
extern "C" __attribute__((weak)) char __start_sftdp_sim_shared[];
extern "C" __attribute__((weak)) char __stop_sftdp_sim_shared[];

namespace sftdp::sim {

__thread Builtins t_builtins;

namespace {

namespace fc = boost::context::detail;

constexpr int kWarp = 32;
#ifdef SFTDP_SIM_ASAN
constexpr size_t kStackBytes = size_t{512} << 10;  // ASan's frames are several times larger
#else
constexpr size_t kStackBytes = size_t{128} << 10;
#endif

enum class State : uint8_t { kRunnable, kAtBarrier, kAtWarp, kExited };
enum class Schedule { kForward, kReverse, kShuffled };

struct SimThread {
  fc::fcontext_t fiber = nullptr;  // where it resumes
  State state = State::kRunnable;
  uint3 idx{};
  // where it waits, and for a warp operation what it posted
  const char* file = nullptr;
  int line = 0;
  WarpOp op = WarpOp::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0, width = kWarp;
  uint64_t result = 0;
  void* fake_stack = nullptr;  // ASan's, while switched away
  // cp.async (tensor_core.h): the copies not yet landed, in issue order; the committed groups are a
  // prefix of them, group g ending at group_ends[g] (oldest first), the rest is the open group. A
  // copy's 16 bytes were read at issue; they land at its group's wait. Both keep their capacity from
  // block to block: the simulator allocates nothing per copy.
  struct PendingCopy {
    void* dst;
    unsigned char bytes[16];
  };
  std::vector<PendingCopy> copies;
  std::vector<size_t> group_ends;

  // A fresh thread at idx, keeping the buffers' capacity.
  void reset(uint3 at) {
    fiber = nullptr;
    state = State::kRunnable;
    idx = at;
    file = nullptr;
    line = 0;
    op = WarpOp::kSyncWarp;
    mask = 0;
    value = result = 0;
    arg = 0;
    width = kWarp;
    fake_stack = nullptr;
    copies.clear();
    group_ends.clear();
  }
};

// Fiber stacks, each with a PROT_NONE page below it (an overflow faults), kept for the process.
// Used under the execution lock only.
class StackPool {
 public:
  void* bottom(size_t i) {
    while (bottoms_.size() <= i) {
      const size_t page = 4096;
      void* p =
          mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        report("internal", "cannot map a fiber stack");
        std::abort();
      }
      mprotect(p, page, PROT_NONE);
      bottoms_.push_back(static_cast<char*>(p) + page);
    }
    return bottoms_[i];
  }
  // Stack tops staggered by up to 16 KiB in 64-byte steps: 256 tops 128 KiB apart would all fall in
  // the same cache sets, and every fiber switch would miss.
  void* top(size_t i) { return static_cast<char*>(bottom(i)) + kStackBytes - (i * 2654435761u) % 256 * 64; }

 private:
  std::vector<void*> bottoms_;
};
StackPool& stacks() {
  static auto* pool = new StackPool;
  return *pool;
}

struct BlockRun {
  const KernelLaunch* launch = nullptr;
  uint3 block_idx{};
  dim3 block_dim, grid_dim;
  std::vector<SimThread> threads;
  SimThread* current = nullptr;
  fc::fcontext_t scheduler = nullptr;
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
  std::vector<size_t> warp_order, lane_order;  // run_block's, kept from block to block
  std::string error;     // the first failed check of the block
  // and how it ends the launch: synccheck's cudaErrorLaunchFailure unless the check says otherwise
  const char* error_check = "synccheck";
  cudaError_t error_code = cudaErrorLaunchFailure;
  uint64_t resumes = 0;  // fiber switches into simulated threads (SFTDP_SIM_PROFILE)
  unsigned char* dynamic_shared = nullptr;  // the launch's dynamic_smem bytes, refilled per block
  size_t dynamic_shared_bytes = 0;
};

// SFTDP_SIM_PROFILE=1: per kernel, launches, blocks, thread resumes and seconds (every schedule
// included), printed to stderr at exit: where the simulator's time goes.
struct ProfileEntry {
  uint64_t launches = 0, blocks = 0, threads = 0, resumes = 0;
  double seconds = 0;
};
std::map<std::string, ProfileEntry>* profile() {
  static std::map<std::string, ProfileEntry>* table = [] {
    const char* v = std::getenv("SFTDP_SIM_PROFILE");
    if (!v || !*v || std::strcmp(v, "0") == 0) return static_cast<std::map<std::string, ProfileEntry>*>(nullptr);
    auto* t = new std::map<std::string, ProfileEntry>;
    std::atexit([] {
      std::lock_guard<std::mutex> lock(execution_lock());
      std::vector<std::pair<std::string, ProfileEntry>> rows(profile()->begin(), profile()->end());
      std::sort(rows.begin(), rows.end(),
                [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
      std::fprintf(stderr, "sftdp-cudasim profile: %-40s %9s %10s %12s %13s %9s\n", "kernel", "launches", "blocks",
                   "threads", "resumes", "seconds");
      for (const auto& [name, e] : rows)
        std::fprintf(stderr, "sftdp-cudasim profile: %-40s %9llu %10llu %12llu %13llu %9.3f\n", name.c_str(),
                     static_cast<unsigned long long>(e.launches), static_cast<unsigned long long>(e.blocks),
                     static_cast<unsigned long long>(e.threads), static_cast<unsigned long long>(e.resumes), e.seconds);
    });
    return t;
  }();
  return table;
}

__thread BlockRun* t_run = nullptr;

std::string xyz(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}
std::string xyz(const dim3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}
std::string hex(unsigned v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}
std::string site(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  return std::string(slash ? slash + 1 : file) + ":" + std::to_string(line);
}

void switch_to_scheduler(BlockRun* run, bool exiting) {
  SimThread* self = run->current;
  asan::start_switch(exiting ? nullptr : &self->fake_stack, run->scheduler_stack, run->scheduler_stack_size);
  const fc::transfer_t back = fc::jump_fcontext(run->scheduler, nullptr);
  asan::finish_switch(self->fake_stack, nullptr, nullptr);
  run->scheduler = back.fctx;
}

void thread_main(fc::transfer_t from) {
  BlockRun* run = t_run;
  run->scheduler = from.fctx;
  asan::finish_switch(nullptr, &run->scheduler_stack, &run->scheduler_stack_size);
  run->launch->thread_body();
  const SimThread& self = *run->current;
  if (!self.copies.empty() && run->error.empty())
    run->error = "thread " + xyz(self.idx) + " exited with " + std::to_string(self.copies.size()) +
                 " cp.async copies never waited for (no cp.async.wait_group/wait_all completed them)";
  run->current->state = State::kExited;
  switch_to_scheduler(run, /*exiting=*/true);  // never returns
}

void resume(BlockRun& run, size_t i) {
  SimThread& th = run.threads[i];
  run.current = &th;
  t_builtins.thread_idx = &th.idx;
  asan::start_switch(&run.scheduler_fake_stack, stacks().bottom(i), kStackBytes);
  const fc::transfer_t t = fc::jump_fcontext(th.fiber, nullptr);
  asan::finish_switch(run.scheduler_fake_stack, nullptr, nullptr);
  th.fiber = t.fctx;
  run.current = nullptr;
  t_builtins.thread_idx = nullptr;
}

SimThread* calling_thread(const char* what) {
  BlockRun* run = t_run;
  if (!run || !run->current) {
    report("synccheck", std::string(what) + " called outside a kernel");
    std::abort();
  }
  return run->current;
}

std::string sync_point(const SimThread& th) {
  if (th.state == State::kAtBarrier) return "__syncthreads (" + site(th.file, th.line) + ")";
  std::string s = std::string(warp_op_name(th.op)) + " (" + site(th.file, th.line) + ", mask " + hex(th.mask);
  return s + ")";
}

// mma.sync / ldmatrix.sync (tensor_core.h): .aligned, so all 32 lanes of a full warp, mask
// 0xffffffff, none exited ("undefined if any thread in the warp has exited"). Once all have arrived,
// the instruction runs on their operands (each lane's `value` points at them) and releases them.
bool resolve_matrix_op(BlockRun& run, size_t w, const SimThread& first) {
  const size_t base = w * kWarp, lanes = std::min<size_t>(kWarp, run.threads.size() - base);
  const auto what = [&first] { return sync_point(first); };  // built only for an error: no allocation per op
  if (first.mask != 0xffffffffu || lanes != kWarp) {
    run.error = what() + ": a warp-collective matrix instruction needs all 32 lanes of a full warp (mask 0xffffffff)";
    return false;
  }
  for (size_t l = 0; l < lanes; ++l) {
    const SimThread& th = run.threads[base + l];
    if (th.state == State::kExited) {
      run.error = what() + ": lane " + std::to_string(l) + " (thread " + xyz(th.idx) +
                  ") has exited: every lane of the warp must execute it";
      return false;
    }
    if (th.state != State::kAtWarp) return false;  // yet to arrive
  }
  if (first.op == WarpOp::kMma) {
    const MmaLane* ops[kWarp];
    for (size_t l = 0; l < kWarp; ++l) ops[l] = reinterpret_cast<const MmaLane*>(run.threads[base + l].value);
    mma_bf16_warp(ops);
  } else {
    const LdmatrixLane* ops[kWarp];
    for (size_t l = 0; l < kWarp; ++l) ops[l] = reinterpret_cast<const LdmatrixLane*>(run.threads[base + l].value);
    const std::string error = ldmatrix_warp(first.arg & 0xff, (first.arg >> 8) != 0, ops, in_shared_memory);
    if (!error.empty()) {
      run.error = what() + ": " + error;
      return false;
    }
  }
  for (size_t l = 0; l < kWarp; ++l) {
    run.threads[base + l].result = 0;
    run.threads[base + l].state = State::kRunnable;
  }
  return true;
}

// Completes warp w's pending operation if every lane of its mask that has not exited is there.
// Returns whether lanes were released; sets run.error on a mismatch.
bool resolve_warp(BlockRun& run, size_t w) {
  const size_t base = w * kWarp, lanes = std::min<size_t>(kWarp, run.threads.size() - base);
  const SimThread* first = nullptr;
  for (size_t l = 0; l < lanes; ++l) {
    const SimThread& th = run.threads[base + l];
    if (th.state != State::kAtWarp) continue;
    if (!first) {
      first = &th;
    } else if (th.op != first->op || th.mask != first->mask || th.file != first->file || th.line != first->line ||
               th.width != first->width || (th.op >= WarpOp::kMma && th.arg != first->arg)) {
      run.error = "lanes of warp " + std::to_string(w) + " meet at different warp operations: thread " +
                  xyz(first->idx) + " at " + sync_point(*first) + ", thread " + xyz(th.idx) + " at " + sync_point(th);
      return false;
    }
  }
  if (!first) return false;
  if (first->op >= WarpOp::kMma) return resolve_matrix_op(run, w, *first);
  const unsigned mask = first->mask;
  const int width = first->width;
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0) {
    run.error = std::string(warp_op_name(first->op)) + " (" + site(first->file, first->line) + "): width " +
                std::to_string(width) + " is not a power of two from 1 to 32";
    return false;
  }
  unsigned arrived = 0;
  for (size_t l = 0; l < lanes; ++l) {
    const SimThread& th = run.threads[base + l];
    const unsigned bit = 1u << l;
    if (th.state == State::kAtWarp) {
      if (!(mask & bit)) {
        run.error = "thread " + xyz(th.idx) + " (lane " + std::to_string(l) + ") calls " + sync_point(th) +
                    " with a mask that leaves out its own lane";
        return false;
      }
      arrived |= bit;
    } else if ((mask & bit) && th.state != State::kExited) {
      return false;  // a lane of the mask is yet to arrive (a deadlock if it never can)
    }
  }
  // Lanes of the mask that exited (or do not exist) are inactive. A shuffle may read only lanes that
  // take part ("If the target thread is inactive, the retrieved value is undefined"): an error here.
  for (size_t l = 0; l < lanes; ++l) {
    if (!((arrived >> l) & 1u) || first->op > WarpOp::kShflUp) continue;
    const SimThread& th = run.threads[base + l];
    const int li = static_cast<int>(l), start = li / width * width, end = start + width;
    int src = li;
    switch (th.op) {
      case WarpOp::kShflIdx:
        src = start + ((th.arg % width) + width) % width;
        break;
      case WarpOp::kShflXor:
        src = li ^ th.arg;
        src = (src >= end || src < 0) ? li : src;
        break;
      case WarpOp::kShflDown:
        src = li + th.arg;
        src = src >= end ? li : src;
        break;
      case WarpOp::kShflUp:
        src = li - th.arg;
        src = src < start ? li : src;
        break;
      default:
        break;
    }
    run.threads[base + l].result = static_cast<uint64_t>(src);
    if (!((arrived >> src) & 1u)) {
      run.error =
          "thread " + xyz(th.idx) + " (lane " + std::to_string(l) + ") at " + sync_point(th) + " reads lane " +
          std::to_string(src) + ", which does not take part (" +
          (static_cast<size_t>(src) < lanes && run.threads[base + static_cast<size_t>(src)].state == State::kExited
               ? "it has exited"
               : "not in the mask or not in the block") +
          "): the value is undefined on a GPU";
      return false;
    }
  }
  uint64_t ballot = 0;
  bool all = true, any = false;
  for (size_t l = 0; l < lanes; ++l) {
    if (!((arrived >> l) & 1u)) continue;
    const bool pred = run.threads[base + l].value != 0;
    ballot |= pred ? (uint64_t{1} << l) : 0;
    all &= pred;
    any |= pred;
  }
  uint64_t values[kWarp];  // read all before any result overwrites a lane's slot
  for (size_t l = 0; l < lanes; ++l) values[l] = run.threads[base + l].value;
  for (size_t l = 0; l < lanes; ++l) {
    if (!((arrived >> l) & 1u)) continue;
    SimThread& th = run.threads[base + l];
    switch (th.op) {
      case WarpOp::kBallot:
        th.result = ballot;
        break;
      case WarpOp::kAll:
        th.result = all;
        break;
      case WarpOp::kAny:
        th.result = any;
        break;
      case WarpOp::kSyncWarp:
        th.result = 0;
        break;
      default:
        th.result = values[th.result];
        break;  // th.result holds the source lane (above)
    }
    th.state = State::kRunnable;
  }
  return true;
}

// Why no thread can proceed: each distinct sync point with its thread count and first thread.
std::string deadlock(const BlockRun& run) {
  std::map<std::tuple<int, const char*, int, unsigned>, std::pair<int, const SimThread*>> points;
  int exited = 0;
  for (const SimThread& th : run.threads) {
    if (th.state == State::kExited) {
      ++exited;
      continue;
    }
    const int kind = th.state == State::kAtBarrier ? -1 : static_cast<int>(th.op);
    auto& [count, example] = points[{kind, th.file, th.line, th.state == State::kAtBarrier ? 0u : th.mask}];
    if (count++ == 0) example = &th;
  }
  std::string s = "no thread of the block can proceed (a deadlock on a GPU):";
  for (const auto& [key, entry] : points)
    s += " " + std::to_string(entry.first) + " thread(s) wait at " + sync_point(*entry.second) + ", first " +
         xyz(entry.second->idx) + ";";
  return s + " " + std::to_string(exited) + " thread(s) have exited";
}

// Runs the current block of `run` to the end; false (run.error set) on a failed check. Warp by warp
// (in the schedule's warp order): a warp's lanes run (in the schedule's lane order) until each waits
// or has exited, its warp operation completes, and so on until the warp waits at the barrier; once
// every warp does, the barrier opens. Only 32 fiber stacks are hot at a time.
bool run_block(BlockRun& run, Schedule schedule, std::mt19937_64& rng) {
  const dim3 d = run.block_dim;
  const size_t n = static_cast<size_t>(d.x) * d.y * d.z, warps = (n + kWarp - 1) / kWarp;
  run.threads.resize(n);  // kept from block to block, with the threads' buffers
  std::vector<size_t>& warp_order = run.warp_order;
  std::vector<size_t>& lane_order = run.lane_order;
  warp_order.resize(warps);
  lane_order.resize(kWarp);
  std::iota(warp_order.begin(), warp_order.end(), size_t{0});
  std::iota(lane_order.begin(), lane_order.end(), size_t{0});
  if (schedule == Schedule::kReverse) {
    std::reverse(warp_order.begin(), warp_order.end());
    std::reverse(lane_order.begin(), lane_order.end());
  }
  for (size_t i = 0; i < n; ++i) {
    SimThread& th = run.threads[i];
    th.reset(uint3{static_cast<unsigned>(i % d.x), static_cast<unsigned>(i / d.x % d.y),
                   static_cast<unsigned>(i / (static_cast<size_t>(d.x) * d.y))});
    th.fiber = fc::make_fcontext(stacks().top(i), kStackBytes, thread_main);
  }
  for (;;) {
    if (schedule == Schedule::kShuffled) std::shuffle(warp_order.begin(), warp_order.end(), rng);
    for (size_t w : warp_order) {
      const size_t base = w * kWarp, lanes = std::min<size_t>(kWarp, n - base);
      do {
        if (schedule == Schedule::kShuffled) std::shuffle(lane_order.begin(), lane_order.end(), rng);
        for (size_t l : lane_order) {
          if (l >= lanes || run.threads[base + l].state != State::kRunnable) continue;
          resume(run, base + l);
          ++run.resumes;
        }
      } while (resolve_warp(run, w));
      if (!run.error.empty()) return false;
    }
    size_t exited = 0, at_barrier = 0;
    for (const SimThread& th : run.threads) {
      exited += th.state == State::kExited;
      at_barrier += th.state == State::kAtBarrier;
    }
    if (exited == n) return true;
    if (at_barrier > 0 && at_barrier + exited == n) {
      const SimThread* first = nullptr;
      for (const SimThread& th : run.threads) {
        if (th.state != State::kAtBarrier) continue;
        if (!first) first = &th;
        if (th.file != first->file || th.line != first->line) {
          run.error = "threads wait at different __syncthreads: thread " + xyz(first->idx) + " at " +
                      site(first->file, first->line) + ", thread " + xyz(th.idx) + " at " + site(th.file, th.line);
          return false;
        }
      }
      if (exited > 0) {
        const auto gone = std::find_if(run.threads.begin(), run.threads.end(),
                                       [](const SimThread& th) { return th.state == State::kExited; });
        run.error = "__syncthreads (" + site(first->file, first->line) +
                    ") is not reached by every thread of the block: " + std::to_string(exited) +
                    " thread(s) exited before it, first " + xyz(gone->idx);
        return false;
      }
      for (SimThread& th : run.threads) th.state = State::kRunnable;
      continue;
    }
    run.error = deadlock(run);
    return false;
  }
}

// Every block of the launch in the schedule's block order.
// A failed block: what went wrong, the check that saw it and the sticky error it leaves.
struct Failure {
  std::string text;
  const char* check = "synccheck";
  cudaError_t code = cudaErrorLaunchFailure;
};

bool run_grid(const KernelLaunch& l, Schedule schedule, uint64_t seed, Failure& failure) {
  BlockRun run;
  run.launch = &l;
  run.block_dim = l.block;
  run.grid_dim = l.grid;
  t_run = &run;
  t_builtins = Builtins{nullptr, &run.block_idx, &run.block_dim, &run.grid_dim};
  const uint64_t gx = l.grid.x, gy = l.grid.y, total = gx * gy * l.grid.z;
  std::mt19937_64 rng(seed);
  uint64_t stride = 1;  // a block permutation for the shuffled schedule: k -> k·stride mod total
  if (schedule == Schedule::kShuffled && total > 1) {
    stride = rng() % total;
    while (std::gcd(stride, total) != 1) stride = (stride + 1) % total;
  }
  const size_t shared_bytes = static_cast<size_t>(__stop_sftdp_sim_shared - __start_sftdp_sim_shared);
  // Dynamic shared memory (extern __shared__): its own buffer for the launch, refilled per block.
  struct FreeBuffer {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, FreeBuffer> dynamic;
  if (l.dynamic_smem) {
    dynamic.reset(static_cast<unsigned char*>(std::aligned_alloc(256, (l.dynamic_smem + 255) / 256 * 256)));
    if (!dynamic) {
      report("internal", "cannot allocate " + std::to_string(l.dynamic_smem) + " bytes of dynamic shared memory");
      std::abort();
    }
  }
  run.dynamic_shared = dynamic.get();
  run.dynamic_shared_bytes = l.dynamic_smem;
  bool ok = true;
  for (uint64_t k = 0; k < total && ok; ++k) {
    const uint64_t b = schedule == Schedule::kForward   ? k
                       : schedule == Schedule::kReverse ? total - 1 - k
                                                        : (k * stride) % total;
    run.block_idx =
        uint3{static_cast<unsigned>(b % gx), static_cast<unsigned>(b / gx % gy), static_cast<unsigned>(b / (gx * gy))};
    if (shared_bytes) std::memset(__start_sftdp_sim_shared, kFreshByte, shared_bytes);  // fresh per block
    if (run.dynamic_shared) std::memset(run.dynamic_shared, kFreshByte, run.dynamic_shared_bytes);
    ok = run_block(run, schedule, rng);
    if (!ok) failure = Failure{"block " + xyz(run.block_idx) + ": " + run.error, run.error_check, run.error_code};
  }
  if (!ok)  // abandoned fibers leave their frames' ASan poison behind on stacks that are reused
    for (size_t i = 0; i < run.threads.size(); ++i) asan::unpoison(stacks().bottom(i), kStackBytes);
  if (auto* table = profile()) {
    ProfileEntry& e = (*table)[l.kernel];
    e.blocks += total;
    e.threads += total * l.block.x * l.block.y * l.block.z;
    e.resumes += run.resumes;
  }
  t_run = nullptr;
  t_builtins = Builtins{};
  return ok;
}

std::string describe_launch(const KernelLaunch& l) {
  return "kernel " + std::string(l.kernel) + " (launched at " + site(l.file, l.line) + ", grid " + xyz(l.grid) +
         ", block " + xyz(l.block) + ")";
}

std::string word_at(const unsigned char* p, size_t offset, size_t size) {
  const size_t at = offset / 4 * 4;
  uint32_t w = 0;
  std::memcpy(&w, p + at, std::min<size_t>(4, size - at));
  float f;
  std::memcpy(&f, &w, 4);
  return hex(w) + " (" + std::to_string(f) + " as float)";
}

}  // namespace

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kShflIdx:
      return "__shfl_sync";
    case WarpOp::kShflXor:
      return "__shfl_xor_sync";
    case WarpOp::kShflDown:
      return "__shfl_down_sync";
    case WarpOp::kShflUp:
      return "__shfl_up_sync";
    case WarpOp::kSyncWarp:
      return "__syncwarp";
    case WarpOp::kBallot:
      return "__ballot_sync";
    case WarpOp::kAll:
      return "__all_sync";
    case WarpOp::kAny:
      return "__any_sync";
    case WarpOp::kMma:
      return "mma.sync.m16n8k16";
    case WarpOp::kLdmatrix:
      return "ldmatrix.sync";
  }
  return "?";
}

void syncthreads(const char* file, int line) {
  SimThread* self = calling_thread("__syncthreads");
  self->state = State::kAtBarrier;
  self->file = file;
  self->line = line;
  switch_to_scheduler(t_run, false);
}

uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
  SimThread* self = calling_thread(warp_op_name(op));
  self->state = State::kAtWarp;
  self->op = op;
  self->mask = mask;
  self->value = value;
  self->arg = arg;
  self->width = width;
  self->file = file;
  self->line = line;
  switch_to_scheduler(t_run, false);
  return self->result;
}

void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c, const char* file, int line) {
  const MmaLane lane{a, b, c, d};
  (void)warp_exchange(WarpOp::kMma, 0xffffffffu, reinterpret_cast<uint64_t>(&lane), 0, kWarp, file, line);
}

void ldmatrix(int num, bool trans, uint32_t* out, const void* row, const char* file, int line) {
  const LdmatrixLane lane{row, out};
  (void)warp_exchange(WarpOp::kLdmatrix, 0xffffffffu, reinterpret_cast<uint64_t>(&lane), num | (trans ? 256 : 0), kWarp,
                      file, line);
}

bool in_shared_memory(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  const auto inside = [c, bytes](const unsigned char* begin, size_t size) {
    return begin && c >= begin && bytes <= size && static_cast<size_t>(c - begin) <= size - bytes;
  };
  const BlockRun* run = t_run;
  return inside(reinterpret_cast<const unsigned char*>(__start_sftdp_sim_shared),
                static_cast<size_t>(__stop_sftdp_sim_shared - __start_sftdp_sim_shared)) ||
         (run && inside(run->dynamic_shared, run->dynamic_shared_bytes));
}

void* dynamic_shared() {
  (void)calling_thread("dynamic shared memory");
  return t_run->dynamic_shared;
}

void cp_async(void* dst, const void* src, int src_bytes, const char* file, int line) {
  SimThread* self = calling_thread("cp.async");
  BlockRun& run = *t_run;
  const auto fail = [&](const std::string& why) {
    if (run.error.empty()) run.error = "cp.async (" + site(file, line) + ") by thread " + xyz(self->idx) + ": " + why;
  };
  if (src_bytes < 0 || src_bytes > 16) return fail("src-size " + std::to_string(src_bytes) + " is not 0..16");
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || !in_shared_memory(dst, 16))
    return fail("the destination is not 16 aligned bytes of shared memory");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % 16 != 0)
    return fail("the source is not 16-byte aligned");
  SimThread::PendingCopy& copy = self->copies.emplace_back();
  copy.dst = dst;
  std::memset(copy.bytes, 0, sizeof copy.bytes);                                     // src-size < 16: zero-filled
  if (src_bytes > 0) std::memcpy(copy.bytes, src, static_cast<size_t>(src_bytes));  // a bad src faults here
}

bool check_vector_access(const void* p, size_t bytes, bool store, const char* file, int line) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return true;
  SimThread* self = calling_thread("a vector access");
  BlockRun& run = *t_run;
  if (run.error.empty()) {
    run.error = "misaligned address: a " + std::to_string(bytes) + "-byte vector " + (store ? "store" : "load") +
                " (" + site(file, line) + ") by thread " + xyz(self->idx) + " at " +
                (in_shared_memory(p, 1) ? std::string("an address in shared memory") : memory().describe(p)) +
                ", not a multiple of " + std::to_string(bytes);
    run.error_check = "memcheck";
    run.error_code = cudaErrorMisalignedAddress;
  }
  return false;
}

void cp_async_commit() {
  SimThread* self = calling_thread("cp.async.commit_group");
  self->group_ends.push_back(self->copies.size());  // an empty group is a group too
}

void cp_async_wait(int n, const char* /*file*/, int /*line*/) {
  SimThread* self = calling_thread("cp.async.wait_group");
  if (n < 0) {  // wait_all: commit, then wait for every group
    cp_async_commit();
    n = 0;
  }
  const size_t groups = self->group_ends.size();
  if (groups <= static_cast<size_t>(n)) return;
  const size_t landing = groups - static_cast<size_t>(n);  // the oldest groups, complete now
  const size_t copies = self->group_ends[landing - 1];
  for (size_t i = 0; i < copies; ++i) std::memcpy(self->copies[i].dst, self->copies[i].bytes, 16);
  self->copies.erase(self->copies.begin(), self->copies.begin() + static_cast<std::ptrdiff_t>(copies));
  self->group_ends.erase(self->group_ends.begin(), self->group_ends.begin() + static_cast<std::ptrdiff_t>(landing));
  for (size_t& end : self->group_ends) end -= copies;
}

void run_kernel(const KernelLaunch& l, const std::vector<Allocation>& regions, int device) {
  const int schedules = settings().schedules;
  using Bytes = std::vector<unsigned char>;
  const auto bytes_of = [](const Allocation& a) { return reinterpret_cast<unsigned char*>(a.begin); };
  std::vector<Bytes> start, first;
  const auto save = [&](std::vector<Bytes>& to) {
    to.resize(regions.size());
    for (size_t i = 0; i < regions.size(); ++i)
      to[i].assign(bytes_of(regions[i]), bytes_of(regions[i]) + regions[i].size);
  };
  if (schedules > 1 || order::enabled()) save(start);
  // streamcheck: the element each pointer argument points at is read (a kernel's other reads are unknown here;
  // a pointer inside a by-value struct: its first 4 bytes); the bytes it changes are its writes (below, once
  // its schedules agree).
  for (size_t i = 0; i < l.args.size(); ++i) {
    const ArgView& arg = l.args[i];
    const std::string operand = "argument " + std::to_string(i + 1);
    for (size_t at = 0; at + sizeof(void*) <= arg.size; at += sizeof(void*)) {
      const void* p = nullptr;
      std::memcpy(&p, static_cast<const char*>(arg.bytes) + at, sizeof p);
      if (!p) continue;
      const auto a = memory().find(p, 0);
      if (!a || !a->live) continue;  // not device memory (a word of a struct that only looks like a pointer)
      const size_t element = arg.is_pointer ? std::max<size_t>(arg.pointee, 1) : 4;
      order::access(p, std::min<size_t>(element, a->end() - reinterpret_cast<uintptr_t>(p)), false, operand.c_str());
      if (arg.is_pointer) break;
    }
  }
  static const char* const kNames[] = {"in-order", "reversed", "shuffled"};
  const auto started = std::chrono::steady_clock::now();
  struct Timer {  // adds this launch's time to the profile however run_kernel returns
    const KernelLaunch& l;
    std::chrono::steady_clock::time_point t0;
    ~Timer() {
      if (auto* table = profile()) {
        ProfileEntry& e = (*table)[l.kernel];
        ++e.launches;
        e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
  } timer{l, started};
  for (int s = 0; s < schedules; ++s) {
    if (s == 1) save(first);
    if (s >= 1)
      for (size_t i = 0; i < regions.size(); ++i) std::memcpy(bytes_of(regions[i]), start[i].data(), start[i].size());
    const Schedule schedule = s == 0 ? Schedule::kForward : s == 1 ? Schedule::kReverse : Schedule::kShuffled;
    Failure failure;
    if (!run_grid(l, schedule, 0x5eed0000u + static_cast<uint64_t>(s), failure)) {
      fault(device, failure.code, failure.check,
            describe_launch(l) + ", " + kNames[std::min(s, 2)] + " schedule, " + failure.text);
      return;
    }
    for (const Allocation& a : regions) {
      if (const auto bad = memory().damaged_slack(a.id)) {
        memory().refill_slack(a.id);
        fault(device, cudaErrorIllegalAddress, "memcheck",
              describe_launch(l) + " wrote out of bounds: " + memory().describe(reinterpret_cast<void*>(*bad)));
        return;
      }
    }
    if (s == 0) continue;
    for (size_t i = 0; i < regions.size(); ++i) {
      const unsigned char* now = bytes_of(regions[i]);
      const Bytes& ref = first[i];
      if (ref.empty() || std::memcmp(ref.data(), now, ref.size()) == 0) continue;  // the common case, fast
      const auto diff = std::mismatch(ref.begin(), ref.end(), now);
      const size_t at = static_cast<size_t>(diff.first - ref.begin());
      fault(device, cudaErrorLaunchFailure, "racecheck",
            describe_launch(l) + ": the result depends on the thread schedule (a missing __syncthreads, a " +
                "shared-memory race, or blocks writing the same element): " +
                memory().describe(reinterpret_cast<void*>(regions[i].begin + at)) + " is " +
                word_at(ref.data(), at, ref.size()) + " under the in-order schedule, " + word_at(now, at, ref.size()) +
                " under the " + kNames[std::min(s, 2)] + " one");
      return;
    }
  }
  if (order::enabled())
    for (size_t i = 0; i < regions.size(); ++i) order::kernel_writes(regions[i], start[i].data());
}

std::string running_thread_description() {
  const BlockRun* run = t_run;
  if (!run || !run->launch) return "";
  std::string s = describe_launch(*run->launch) + ", block " + xyz(run->block_idx);
  if (run->current) s += ", thread " + xyz(run->current->idx);
  return s;
}

}  // namespace sftdp::sim
