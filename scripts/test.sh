#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing, builds, runs CTest; then the
# same suite under ASan + UBSan (scripts/test_sanitizers.sh) and a bounded fuzz run of every
# parser of user input (scripts/fuzz.sh). Both use ONE sanitized build (clang, with the libFuzzer
# targets: ${SFTDP_ASAN_BUILD_DIR:-build-asan}), so the sources are compiled twice, not three times.
# That sanitized build is also the CUDA simulator build (SFTDP_CUDA_SIM, cudasim): its suite
# runs every GPU test on simulated GPUs, none skipped; the first (nvcc) build compiles the CUDA
# sources for real and its GPU tests skip without a device. Extra arguments go to both ctest runs
# (e.g. -L gpu). Fresh clone on a 2-core machine, 2026-12-07 (5194faa, the sanitized suite on ASan's fast
# unwinder): 36 min in all, normal suite 732 s (808 tests), sanitized suite 640 s (915; cuda_e2e 178 s,
# cuda_bf16_tracks_fp32 105 s), the rest the installs, both builds and 80 s of fuzzing. The same on e5cb13f,
# with the slow unwinder on every malloc (fast_unwind_on_malloc=0): 80 min, normal suite 1006 s, sanitized
# suite 2194 s (cuda_e2e 564 s, cuda_bf16_tracks_fp32 281 s, factorisation_mpi 189 s). Fresh clone on a quiet 2-core machine, 2026-12-06 (act16 kernels, graphs; before
# issue 35's tests): about 38 min in all, normal suite 565 s (721 tests), sanitized suite 975 s (833);
# the same on a machine shared with two other builds: 58 min (738 s, 1233 s).
# Fresh clone on a 2-core machine with the packages already installed (2026-12-04,
# with zero_stage 2/3's tests): 25 min 2 s in all, normal suite 468 s (601 tests), sanitized suite
# 517 s (650 tests), fuzzing included. Fresh clone on a quiet 2-core machine (2026-12-03, after the simulator stopped
# allocating per warp operation; with the chaos soak and the tensor-core attention's tests): 37 min
# 5 s in all, install and both builds included: normal suite 570 s, sanitized suite 863 s. The run
# before that fix: 47 min (612 s, 1190 s; the GPU end-to-end test alone 455 s under ASan). On
# 2026-12-02: about 26 min (474 s, 800 s).
# On 2026-12-01, with the packages installed: 860 s
# in all (the same run before the simulator: 683 s): normal suite 158 s, sanitized suite 328 s
# (157 s of it the GPU tests), fuzzing 85 s; the simulator adds <= 53 s to the sanitized build.
# Earlier, on a shared 2-core machine (load 2-10): sanitized build 230 CPU-s (was 333 with gcc,
# plus 95 for a separate fuzz build); sanitized suite 252 s wall (was 352 s with gcc).
#   SFTDP_SANITIZERS=0      skip the sanitizer suite
#   SFTDP_FUZZ_SECONDS=N    seconds per fuzz target (default 20; 0 skips fuzzing)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
export SFTDP_ASAN_BUILD_DIR="${SFTDP_ASAN_BUILD_DIR:-$ROOT/build-asan}"
bash "$ROOT/scripts/install_deps.sh"
bash "$ROOT/scripts/setup_pyref.sh"
bash "$ROOT/scripts/setup_pynew.sh"  # .pynew: the data tools' tests again on the newest transformers/tokenizers
bash "$ROOT/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "$BUILD" && ctest --output-on-failure -j "${SFTDP_TEST_JOBS:-2}" "$@")
if [ "${SFTDP_SANITIZERS:-1}" != 0 ]; then
  # Left out: the real-Slurm tests on CPU ranks, one node and two (2 min under ASan each; they run
  # the same sft_train paths as the mpirun tests; so do the start-up repeat, whose fence probe is
  # preloaded into sft_train, the chaos soak, and the leak run, whose RSS ASan's allocator would set; the multi-node GPU one, test_slurm_multinode_cuda,
  # stays: only the simulator build has GPUs for it) and tests that run no sanitized code (gpu_check's dry run, the SPEC/doc check,
  # the Python-only tokenizer preparer, its dataset formats and templates, their second run on the
  # newest libraries (*_newest), the metrics plotter, nvcc's kernel
  # resource report), and the demo's 600-step
  # training (70 s under ASan; its paths are the ones every sanitized training test runs).
  bash "$ROOT/scripts/test_sanitizers.sh" \
    -E '^integration_test_(slurm|slurm_multinode|startup_repeat|chaos_soak|no_leak|gpu_check_script|spec_docs|prepare_hf|prepare_formats|prepare_templates|prepare_shipped|plot_metrics|kernel_resources|demo_learns)$|_newest$' "$@"
fi
if [ "${SFTDP_FUZZ_SECONDS:-20}" != 0 ]; then
  # The fuzz targets are already built in the sanitized build (only they are, without the suite).
  SFTDP_FUZZ_BUILD_DIR="$SFTDP_ASAN_BUILD_DIR" bash "$ROOT/scripts/fuzz.sh" "${SFTDP_FUZZ_SECONDS:-20}"
fi
