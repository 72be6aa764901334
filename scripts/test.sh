#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing, builds, runs CTest; then the
# same suite under ASan + UBSan (scripts/test_sanitizers.sh) and a bounded fuzz run of every
# parser of user input (scripts/fuzz.sh). Extra arguments go to both ctest runs (e.g. -L mpi).
# Measured on the 2-core CI machine: ~5 min normal suite, 7 min sanitizer build + suite, 3 min fuzz.
#   SFTDP_SANITIZERS=0      skip the sanitizer suite
#   SFTDP_FUZZ_SECONDS=N    seconds per fuzz target (default 30; 0 skips fuzzing)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/install_deps.sh"
bash "$ROOT/scripts/setup_pyref.sh"
bash "$ROOT/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "$BUILD" && ctest --output-on-failure -j "${SFTDP_TEST_JOBS:-2}" "$@")
if [ "${SFTDP_SANITIZERS:-1}" != 0 ]; then
  # The real-Slurm test (2 min under ASan) runs the same sft_train paths as the mpirun tests.
  bash "$ROOT/scripts/test_sanitizers.sh" -E '^integration_test_slurm$' "$@"
fi
if [ "${SFTDP_FUZZ_SECONDS:-30}" != 0 ]; then
  bash "$ROOT/scripts/fuzz.sh" "${SFTDP_FUZZ_SECONDS:-30}"
fi
