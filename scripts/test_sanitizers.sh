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
# fast_unwind_on_malloc=0: Open MPI and libc have no frame pointers, so the fast unwinder stops one
# frame above malloc and the suppressions (which match library names) never see libmpi; keeping
# Open MPI's plugins loaded at exit lets their frames be named too.
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:${ASAN_OPTIONS:-}"
export OMPI_MCA_mca_base_component_disable_dlclose=1
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD"
ctest --output-on-failure -j "${SFTDP_TEST_JOBS:-2}" "$@"
