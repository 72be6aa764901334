#!/usr/bin/env bash
# Configures and builds sft-dp (Release) into ${SFTDP_BUILD_DIR:-build}. CUDA sources are compiled
# whenever nvcc is found. Extra arguments go to cmake's configure step.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
