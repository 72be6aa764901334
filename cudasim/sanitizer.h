// cudasim/sanitizer.h — the AddressSanitizer hooks the simulator uses when it is built with ASan
// (the sanitized CI build): poisoning of device-memory slack, and the fiber-switch annotations that
// let ASan follow a simulated thread's stack. Without ASan every hook is a no-op.
#pragma once
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define SFTDP_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SFTDP_SIM_ASAN 1
#endif
#endif

#ifdef SFTDP_SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SFTDP_SIM_NO_ASAN __attribute__((no_sanitize("address")))
#else
#define SFTDP_SIM_NO_ASAN
#endif

namespace sftdp::sim::asan {
inline void poison(const void* p, size_t n) {
#ifdef SFTDP_SIM_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}
inline void unpoison(const void* p, size_t n) {
#ifdef SFTDP_SIM_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}
// Around every switch to a fiber's stack (or back): ASan must know which stack is current.
inline void start_switch(void** fake_stack_save, const void* bottom, size_t size) {
#ifdef SFTDP_SIM_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}
inline void finish_switch(void* fake_stack_save, const void** old_bottom, size_t* old_size) {
#ifdef SFTDP_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, old_bottom, old_size);
#else
  (void)fake_stack_save, (void)old_bottom, (void)old_size;
#endif
}
}  // namespace sftdp::sim::asan
