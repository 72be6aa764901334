// cudasim/memory.cpp — device allocations of the simulator (see memory.h): one mapping each,
// guard pages, 0xff fill, ASan-poisoned slack, a PROT_NONE quarantine for freed memory. Record-only mode
// (record.h) fills the slack only: the data stays the OS's untouched zero pages until written.
#include "cudasim/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "cudasim/record.h"
#include "cudasim/sanitizer.h"

namespace sftdp::sim {
namespace {

constexpr size_t kAlign = 256;                        // cudaMalloc's alignment
constexpr size_t kQuarantineBytes = size_t{4} << 30;  // virtual; freed pages are released at once
constexpr size_t kQuarantineEntries = 4096;

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Data pages of a mapping: everything but the two guard pages.
uintptr_t data_pages_begin(const Allocation& a) { return a.map_begin + page_size(); }
uintptr_t data_pages_end(const Allocation& a) { return a.map_begin + a.map_size - page_size(); }

// Not instrumented: the slack is poisoned under ASan, and reading it here is the point.
SFTDP_SIM_NO_ASAN const unsigned char* first_changed(const unsigned char* p, const unsigned char* end) {
  for (; p < end; ++p)
    if (*p != kFreshByte) return p;
  return nullptr;
}
SFTDP_SIM_NO_ASAN void fill(unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = kFreshByte;
}

}  // namespace

Memory& memory() {
  static Memory* m = new Memory;  // never destroyed: static destructors elsewhere still free memory
  return *m;
}

void* Memory::allocate(size_t bytes, int device) {
  const size_t page = page_size();
  const size_t data_bytes = round_up(bytes == 0 ? 1 : bytes, kAlign);
  const size_t data_pages = round_up(data_bytes, page);
  const size_t map_size = data_pages + 2 * page;
  void* base = mmap(nullptr, map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  auto* data = static_cast<unsigned char*>(base) + page;
  if (mprotect(data, data_pages, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, map_size);
    return nullptr;
  }
  Allocation a;
  a.device = device;
  a.map_begin = reinterpret_cast<uintptr_t>(base);
  a.map_size = map_size;
  a.begin = reinterpret_cast<uintptr_t>(data) + data_pages - data_bytes;  // the end meets the guard page
  a.size = bytes;
  if (record_only()) {  // nothing runs that would read it: leave the pages untouched, fill the slack only
    std::memset(data, kFreshByte, a.begin - reinterpret_cast<uintptr_t>(data));
    std::memset(reinterpret_cast<void*>(a.end()), kFreshByte, data_pages_end(a) - a.end());
  } else {
    std::memset(data, kFreshByte, data_pages);
  }
  asan::poison(data, a.begin - reinterpret_cast<uintptr_t>(data));
  asan::poison(reinterpret_cast<void*>(a.end()), data_pages_end(a) - a.end());
  std::lock_guard<std::mutex> lock(mu_);
  a.id = next_id_++;
  by_map_begin_.emplace(a.map_begin, a);
  return reinterpret_cast<void*>(a.begin);
}

bool Memory::release(void* p, size_t* bytes_freed, int* device) {
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* found = locate(reinterpret_cast<uintptr_t>(p));
  if (!found || !found->live || found->begin != reinterpret_cast<uintptr_t>(p)) return false;
  Allocation& a = by_map_begin_.at(found->map_begin);
  a.live = false;
  *bytes_freed = a.size;
  *device = a.device;
  const auto data = reinterpret_cast<void*>(data_pages_begin(a));
  const size_t data_size = data_pages_end(a) - data_pages_begin(a);
  asan::unpoison(data, data_size);          // ASan's shadow stays clean for the mapping's next user
  madvise(data, data_size, MADV_DONTNEED);  // the pages go back to the OS; the addresses stay reserved
  mprotect(reinterpret_cast<void*>(a.map_begin), a.map_size, PROT_NONE);
  quarantine_.push_back(a.map_begin);
  quarantined_bytes_ += a.map_size;
  while (quarantined_bytes_ > kQuarantineBytes || quarantine_.size() > kQuarantineEntries) {
    const auto oldest = by_map_begin_.find(quarantine_.front());
    quarantine_.pop_front();
    quarantined_bytes_ -= oldest->second.map_size;
    munmap(reinterpret_cast<void*>(oldest->second.map_begin), oldest->second.map_size);
    by_map_begin_.erase(oldest);
  }
  return true;
}

const Allocation* Memory::locate(uintptr_t p) const {
  auto it = by_map_begin_.upper_bound(p);
  if (it == by_map_begin_.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  return p < a.map_begin + a.map_size ? &a : nullptr;
}

std::optional<Allocation> Memory::find(const void* p, size_t bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* a = locate(address);
  if (!a || address < a->begin) return std::nullopt;
  if (bytes == 0 ? address > a->end() : address + bytes > a->end() || address + bytes < address) return std::nullopt;
  return *a;
}

std::string Memory::describe(const void* p) const {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* a = locate(address);
  if (!a) return "not device memory (no cudaMalloc allocation there: a host address?)";
  const std::string what = "allocation #" + std::to_string(a->id) + " (" + std::to_string(a->size) + " bytes" +
                           (a->live ? "" : ", freed") + ")";
  if (address < a->begin) return std::to_string(a->begin - address) + " bytes before the start of " + what;
  if (address >= a->end()) return std::to_string(address - a->end()) + " bytes after the end of " + what;
  return "byte " + std::to_string(address - a->begin) + " of " + what;
}

std::optional<uintptr_t> Memory::damaged_slack(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [begin, a] : by_map_begin_) {
    if (a.id != id) continue;
    if (!a.live) return std::nullopt;
    const auto* head = reinterpret_cast<const unsigned char*>(data_pages_begin(a));
    const auto* start = reinterpret_cast<const unsigned char*>(a.begin);
    if (const auto* bad = first_changed(head, start)) return reinterpret_cast<uintptr_t>(bad);
    const auto* tail = reinterpret_cast<const unsigned char*>(a.end());
    if (const auto* bad = first_changed(tail, reinterpret_cast<const unsigned char*>(data_pages_end(a))))
      return reinterpret_cast<uintptr_t>(bad);
    return std::nullopt;
  }
  return std::nullopt;
}

void Memory::refill_slack(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [begin, a] : by_map_begin_) {
    if (a.id != id || !a.live) continue;
    fill(reinterpret_cast<unsigned char*>(data_pages_begin(a)), a.begin - data_pages_begin(a));
    fill(reinterpret_cast<unsigned char*>(a.end()), data_pages_end(a) - a.end());
  }
}

bool Memory::in_guard_or_quarantine(const void* p) const {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  const Allocation* a = locate(address);
  if (!a) return false;
  return !a->live || address < data_pages_begin(*a) || address >= data_pages_end(*a);
}

}  // namespace sftdp::sim
