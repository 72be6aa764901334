#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing, builds, runs CTest; then the
# same suite under ASan + UBSan (scripts/test_sanitizers.sh) and a bounded fuzz run of every
# parser of user input (scripts/fuzz.sh). Extra arguments go to both ctest runs (e.g. -L mpi).
# Measured on the 2-core CI machine: ~5 min normal suite, 7 min sanitizer build + suite, 3 min fuzz.
#   SFTDP_SANITIZERS=0      skip the sanitizer suite
#   SFTDP_FUZZ_SECONDS=N    seconds per fuzz target (default 20; 0 skips fuzzing)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/install_deps.sh"
bash "$ROOT/scripts/setup_pyref.sh"
bash "$ROOT/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "$BUILD" && ctest --output-on-failure -j "${SFTDP_TEST_JOBS:-2}" "$@")
if [ "${SFTDP_SANITIZERS:-1}" != 0 ]; then
  # Left out: the real-Slurm test (2 min under ASan; it runs the same sft_train paths as the
  # mpirun tests) and tests that run no sanitized code (gpu_check's dry run, the SPEC/doc check,
  # the Python-only tokenizer preparer).
  bash "$ROOT/scripts/test_sanitizers.sh" \
    -E '^integration_test_(slurm|gpu_check_script|spec_docs|prepare_hf)$' "$@"
fi
if [ "${SFTDP_FUZZ_SECONDS:-20}" != 0 ]; then
  bash "$ROOT/scripts/fuzz.sh" "${SFTDP_FUZZ_SECONDS:-20}"
fi
