// tests/common/hdf5_damaged_file_leaks.h — included once by each test program that opens damaged
// HDF5 files (a header that fails its checksum, a shard with a dataset missing). HDF5 1.10 leaks
// what it had decoded of such a header; tests/sanitizers/lsan.supp names the frame that allocates
// it (H5C_protect), several frames down in a library built without frame pointers, which only
// ASan's slow DWARF unwinder reaches. The sanitized suite runs the fast unwinder
// (scripts/test_sanitizers.sh: 3x faster); such a program asks for the slow one here (an
// ASAN_OPTIONS that names the flag still decides). Leaks of our own stay reported either way.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
extern "C" const char* __asan_default_options() { return "fast_unwind_on_malloc=0"; }
#endif
#endif
