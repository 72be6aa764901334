// cudasim/memory.h — the simulator's device memory (compute-sanitizer's memcheck, where cheap).
// Every cudaMalloc is its own mapping: a PROT_NONE guard page on each side, the data's end against
// the trailing guard (rounded up to CUDA's 256-byte alignment), the rest of its pages "slack" filled
// with 0xff and, under ASan, poisoned. The data starts as 0xff bytes too (NaN for floats and bf16,
// -1 for integers), so reading memory nobody wrote shows. Freed memory stays mapped PROT_NONE in a
// bounded quarantine, so a use after cudaFree faults instead of reading a later allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace sftdp::sim {

struct Allocation {
  uint64_t id = 0;          // 1, 2, ... in cudaMalloc order (per process)
  int device = 0;           // visible ordinal it was allocated on
  uintptr_t begin = 0;      // what cudaMalloc returned (256-byte aligned)
  size_t size = 0;          // bytes asked for
  uintptr_t map_begin = 0;  // the whole mapping, guard pages included
  size_t map_size = 0;
  bool live = true;  // false once freed (kept in the quarantine)
  uintptr_t end() const { return begin + size; }
};

constexpr unsigned char kFreshByte = 0xff;  // new allocations, slack and shared memory

class Memory {
 public:
  // nullptr when the mapping fails; the budget is the caller's (runtime_api.cpp).
  void* allocate(size_t bytes, int device);
  // false when p is not the start of a live allocation. Freed memory goes to the quarantine.
  bool release(void* p, size_t* bytes_freed, int* device);
  // The allocation holding [p, p + bytes) (bytes 0: p may be one past the end), live or freed.
  std::optional<Allocation> find(const void* p, size_t bytes = 1) const;
  // The allocation p falls in or nearest to, for a message ("24 bytes after the end of #7 (1024 bytes)").
  std::string describe(const void* p) const;
  // First slack byte of a live allocation that is no longer kFreshByte: an out-of-bounds write.
  std::optional<uintptr_t> damaged_slack(uint64_t id) const;
  // Re-fill an allocation's slack (after a reported overflow, so it is reported once).
  void refill_slack(uint64_t id);
  // Whether `p` lies in a guard page or the quarantine (the SIGSEGV handler asks).
  bool in_guard_or_quarantine(const void* p) const;

 private:
  const Allocation* locate(uintptr_t p) const;  // callers hold mu_
  mutable std::mutex mu_;
  std::map<uintptr_t, Allocation> by_map_begin_;  // live and quarantined
  std::deque<uintptr_t> quarantine_;              // freed mappings, oldest first
  uint64_t next_id_ = 1;
  size_t quarantined_bytes_ = 0;
};

Memory& memory();

}  // namespace sftdp::sim
