#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing, builds, runs CTest.
# Extra arguments go to ctest (e.g. -L mpi, -R Sampler).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/install_deps.sh"
bash "$ROOT/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD"
ctest --output-on-failure -j "${SFTDP_TEST_JOBS:-2}" "$@"
