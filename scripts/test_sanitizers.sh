#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer: configures and builds
# ${SFTDP_ASAN_BUILD_DIR:-build-asan} (clang, SFTDP_FUZZ=ON, which implies SFTDP_SANITIZE=ON; the
# CUDA simulator, SFTDP_CUDA_SIM=ON, so the GPU tests run too and ASan watches device memory; no
# bench), then runs CTest there. The same build holds the libFuzzer
# binaries that scripts/fuzz.sh runs, so CI compiles the sources twice (Release + this), not three
# times. Any ASan/UBSan report or leak in our code fails the test it happens in; leaks inside
# Open MPI and the libraries below it are suppressed by tests/sanitizers/lsan.supp. Extra
# arguments go to ctest (e.g. -L unit, -E slurm).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_ASAN_BUILD_DIR:-$ROOT/build-asan}"
# tests/sanitizers/lsan.supp suppresses leaks of vasprintf's strings (Open MPI's, seen through the
# fast unwinder): true only while no source of ours allocates with asprintf/vasprintf.
if grep -rnwE 'v?asprintf' "$ROOT"/src "$ROOT"/include "$ROOT"/kernels "$ROOT"/cudasim "$ROOT"/tests --include='*.[ch]*' --include='*.cu*'; then
  echo "error: the lines above call asprintf/vasprintf, whose leaks tests/sanitizers/lsan.supp suppresses" >&2
  exit 2
fi
# -O1 -g1: readable stack traces at a fraction of -O2's compile time; asserts stay on.
# Keep this configure line identical to scripts/fuzz.sh's: any difference reconfigures the shared
# build and recompiles everything. The compilers are named (not only CC/CXX) so that an older
# gcc-configured build-asan is reconfigured for clang instead of failing.
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DSFTDP_FUZZ=ON -DSFTDP_CUDA_SIM=ON -DSFTDP_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j "${SFTDP_BUILD_JOBS:-$(nproc)}"

# Inherited by every test process, including ranks under mpiexec and the sft_train runs of the
# Python integration tests (they use the binaries of SFTDP_BUILD_DIR = this build).
# LD_PRELOAD: dlclose keeps libraries loaded (tests/sanitizers/keep_libraries_loaded.c), so Open
# MPI's plugins are still mapped when LeakSanitizer reports at exit and the suppressions, which
# name libraries, match a plugin's leak by its first frame; the fast frame-pointer unwinder
# (ASan's default) then suffices, where the slow DWARF one (fast_unwind_on_malloc=0) cost 0.6 s of
# every sft_train start-up. A test that needs a deep allocation stack (a frame under a library
# without frame pointers) asks for the slow unwinder itself (tests/common/hdf5_damaged_file_leaks.h).
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export LD_PRELOAD="$BUILD/libsftdp_keep_libraries_loaded.so${LD_PRELOAD:+:$LD_PRELOAD}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD"
ctest --output-on-failure -j "${SFTDP_TEST_JOBS:-2}" "$@"
