#!/usr/bin/env bash
# scripts/gpu_check.sh — the one-GPU check of sft-dp on a fresh machine of the device tool: builds
# with CUDA, runs the CUDA-vs-CPU kernel tests, end-to-end checks on the tiny model (GPU vs CPU loss,
# GA 1 vs GA 4, two GPU runs bitwise equal, a bf16 run), and the GPU benchmark when it is built;
# everything lands in bench/results/gpu_check_<UTC time>/ (and is copied to $OUT when set).
# STATUS: written and reviewed without a GPU — none was lent to the task that wrote it — so it has
# NEVER RUN. Budget its first run for fixing paths; the sections below are ordered so that an early
# failure still leaves the logs of what ran.
#
# That machine has nvcc, CMake and Python but no MPI, HDF5, OpenBLAS, yaml-cpp or GoogleTest and no
# package registry, so their Debian 12 packages travel with the call:
#   here (Debian 12, apt works):  bash scripts/gpu_check.sh fetch   # .debs/*.deb (~32 MB), git-ignored
#   device tool:  run(command="bash scripts/gpu_check.sh run", carry=[".debs"], timeout_s=540)
# `run` unpacks them with dpkg -x into .debs/root (never into /), points absolute symlinks into that
# root, and points CMake (CMAKE_PREFIX_PATH, explicit MPI/HDF5/BLAS paths, -rpath-link),
# LD_LIBRARY_PATH (for our binaries only) and Open MPI's and PMIx's relocation variables
# (OPAL_PREFIX, PMIX_PREFIX, ...) at it. NCCL comes from the CUDA toolkit or, failing that, from
# python3's nvidia-nccl package there. Tried here on a root copied from the installed packages: the
# configure step resolves every library into the root, and a relocated MPI singleton runs.
# `configure` does the unpacking and the CMake configure step only (for debugging the paths).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBS="$ROOT/.debs"
R="$DEBS/root"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build-gpu}"
ARCH=x86_64-linux-gnu

# Packages to carry: the -dev packages themselves, plus the runtime dependency closure of the
# libraries, pruned (during the walk, so their own dependencies stay out too) of what must come from
# the machine's own toolchain (libc, libstdc++, libgcc, libgomp: newer there, backward compatible),
# installer-only packages, the rsh launcher (one node here) and hwloc's optional plugins (X11, ICU).
# Everything else travels even if the image may have it: Debian's sonames can differ from the
# image's (libldap-2.5 vs 2.6), and LD_LIBRARY_PATH is set for our binaries only.
DEV_PKGS=(libopenmpi-dev libhdf5-dev libopenblas-dev libopenblas-pthread-dev libyaml-cpp-dev
          nlohmann-json3-dev libgtest-dev)
RUNTIME_PKGS=(libopenmpi3 openmpi-bin openmpi-common libhdf5-103-1 libhdf5-cpp-103-1 libopenblas0-pthread
              libyaml-cpp0.7)
PRUNE_RE='^(libc6|libstdc\+\+6|libgcc-s1|libgomp1|gcc-[0-9]+-base|debconf.*|cdebconf.*|install-info|dpkg|tar'
PRUNE_RE+='|coreutils|perl.*|libperl.*|adduser|passwd|login|init-system-helpers|lsb-base|sysvinit-utils'
PRUNE_RE+='|openssh-client|libhwloc-plugins|<.*>)$'

log() { printf '[gpu_check] %s\n' "$*" >&2; }

# Breadth-first over Depends (first alternative of each), skipping PRUNE_RE; prints the closure.
runtime_closure() {
  local -A seen=()
  local queue=("${RUNTIME_PKGS[@]}") pkg dep
  while ((${#queue[@]})); do
    pkg="${queue[0]}"; queue=("${queue[@]:1}")
    [[ -n "${seen[$pkg]:-}" || "$pkg" =~ $PRUNE_RE ]] && continue
    seen[$pkg]=1
    echo "$pkg"
    while read -r dep; do queue+=("$dep"); done < <(apt-cache depends --no-recommends --no-suggests \
      --no-conflicts --no-breaks --no-replaces --no-enhances --no-pre-depends "$pkg" |
      awk '$1 == "|Depends:" { if (!alt) print $2; alt = 1 }  # an OR group: its first member
           $1 == "Depends:"  { if (!alt) print $2; alt = 0 }')
  done
}

fetch() {
  command -v apt-get >/dev/null || { log "fetch needs apt-get (run it on the Debian 12 machine)"; exit 2; }
  mkdir -p "$DEBS"
  grep -qxF '/.debs/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.debs/' >>"$ROOT/.git/info/exclude"
  local closure
  mapfile -t closure < <(runtime_closure)
  (cd "$DEBS" && apt-get download "${DEV_PKGS[@]}" "${closure[@]}") || exit 1
  log "carried packages: $(find "$DEBS" -maxdepth 1 -name '*.deb' | wc -l), $(du -sh "$DEBS" | cut -f1)"
}

# dpkg -x every carried package into $R (dpkg -x runs no maintainer scripts), then repair_links.
unpack() {
  find "$DEBS" -maxdepth 1 -name '*.deb' | grep -q . ||
    { log "no .debs/*.deb: run 'bash scripts/gpu_check.sh fetch' on the dev machine first"; exit 2; }
  rm -rf "$R" && mkdir -p "$R"
  for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$R" || { log "dpkg -x failed: $deb"; exit 1; }; done
  repair_links
}

# Absolute links of the packages point into $R; /etc/alternatives/<x> links (made by postinst
# scripts, so normally absent after dpkg -x) go to the openblas-pthread, .openmpi or .serial file
# beside them. configure names the real files (openblas-pthread/, mpiexec.openmpi) anyway.
repair_links() {
  local link target dir name cand
  while read -r link; do
    target=$(readlink "$link"); dir=$(dirname "$link"); name=$(basename "$link")
    case "$target" in
      /etc/alternatives/*)
        for cand in "$dir/openblas-pthread/$name" "$dir/$name.openmpi" "$dir/$name.serial"; do
          if [ -e "$cand" ]; then ln -sfn "$cand" "$link"; break; fi
        done ;;
      /*) if [ -e "$R$target" ]; then ln -sfn "$R$target" "$link"; fi ;;
    esac
  done < <(find "$R" -type l)
}

# Paths and variables for the carried libraries; LD_LIBRARY_PATH itself only through with_libs.
setup_env() {
  local mpi="$R/usr/lib/$ARCH/openmpi"
  LIBDIRS="$R/usr/lib/$ARCH:$mpi/lib:$R/usr/lib/$ARCH/hdf5/serial:$R/usr/lib/$ARCH/openblas-pthread"
  LIBDIRS="$LIBDIRS:$R/usr/lib/$ARCH/pmix2/lib:$R/lib/$ARCH"
  NCCL_ARGS=()
  if [ ! -f /usr/local/cuda/include/nccl.h ] && [ ! -f /usr/include/nccl.h ]; then
    local nccl
    nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) || nccl=""
    if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ]; then
      NCCL_ARGS=(-DNCCL_INCLUDE_DIR="$nccl/include"
                 -DNCCL_LIBRARY="$(find "$nccl/lib" -name 'libnccl.so*' | sort | head -1)")
      LIBDIRS="$LIBDIRS:$nccl/lib"
    else
      log "NCCL not found in the CUDA toolkit nor in python3's nvidia.nccl: the CUDA build will fail"
    fi
  fi
  # Open MPI and PMIx, relocated from /usr into $R.
  export OPAL_PREFIX="$R/usr" OPAL_EXEC_PREFIX="$R/usr" OPAL_BINDIR="$R/usr/bin" OPAL_LIBDIR="$mpi/lib"
  export OPAL_PKGLIBDIR="$mpi/lib/openmpi3" OPAL_INCLUDEDIR="$mpi/include" OPAL_DATADIR="$R/usr/share"
  export OPAL_PKGDATADIR="$R/usr/share/openmpi" OPAL_SYSCONFDIR="$R/etc/openmpi"
  export OMPI_MCA_mca_base_component_path="$mpi/lib/openmpi3"
  local pmix="$R/usr/lib/$ARCH/pmix2"
  export PMIX_PREFIX="$pmix" PMIX_EXEC_PREFIX="$pmix" PMIX_LIBDIR="$pmix/lib" PMIX_PKGLIBDIR="$pmix/lib/pmix"
  export PMIX_DATADIR="$pmix/share" PMIX_SYSCONFDIR="$pmix/share"
  export PMIX_MCA_mca_base_component_path="$pmix/lib/pmix"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}" OPENBLAS_NUM_THREADS=1
  export PATH="/usr/local/cuda/bin:$PATH:$R/usr/bin"  # carried tools last: the image's own win
}
with_libs() { LD_LIBRARY_PATH="$LIBDIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

configure() {
  local mpi="$R/usr/lib/$ARCH/openmpi" h5="$R/usr/lib/$ARCH/hdf5/serial"
  # No LD_LIBRARY_PATH while building (the compiler must keep the image's own zstd, gmp, ...):
  # the linker finds the carried libraries' own dependencies through -rpath-link instead.
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSFTDP_NATIVE=ON -DCMAKE_PREFIX_PATH="$R/usr" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$LIBDIRS" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$LIBDIRS" \
    -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_HEADER_DIR="$mpi/include" \
    -DMPI_CXX_ADDITIONAL_INCLUDE_DIRS="$mpi/include/openmpi" -DMPI_CXX_LIB_NAMES="mpi_cxx;mpi" \
    -DMPI_mpi_LIBRARY="$mpi/lib/libmpi.so" -DMPI_mpi_cxx_LIBRARY="$mpi/lib/libmpi_cxx.so" \
    -DMPIEXEC_EXECUTABLE="$R/usr/bin/mpiexec.openmpi" \
    -DHDF5_C_INCLUDE_DIR="$R/usr/include/hdf5/serial" -DHDF5_CXX_INCLUDE_DIR="$R/usr/include/hdf5/serial" \
    -DHDF5_hdf5_LIBRARY_RELEASE="$h5/libhdf5.so" -DHDF5_hdf5_cpp_LIBRARY_RELEASE="$h5/libhdf5_cpp.so" \
    -DBLAS_openblas_LIBRARY="$R/usr/lib/$ARCH/openblas-pthread/libopenblas.so" \
    -DCBLAS_INCLUDE_DIR="$R/usr/include/$ARCH/openblas-pthread" "${NCCL_ARGS[@]}"
}

# One named step: its output goes to $RESULTS/<name>.log; its status joins the summary.
SUMMARY=()
FAILED=0
step() {
  local name="$1"; shift
  local start=$SECONDS
  log "step $name"
  local status=0
  "$@" >"$RESULTS/$name.log" 2>&1 || status=$?
  if [ $status = 0 ]; then
    SUMMARY+=("ok    $name ($((SECONDS - start)) s)")
  else
    SUMMARY+=("FAIL  $name ($((SECONDS - start)) s): see $name.log")
    FAILED=1
  fi
  tail -3 "$RESULTS/$name.log" >&2
  return $status
}

build() {
  local targets=(sft_train sft_prepare)
  local t
  for t in $(cd "$ROOT/tests" && ls -- */test_cuda*.cpp 2>/dev/null); do
    targets+=("$(dirname "$t")_$(basename "$t" .cpp)")
  done
  for t in "$ROOT"/bench/bench_gpu*.cpp; do [ -e "$t" ] && targets+=("$(basename "$t" .cpp)"); done
  cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
}

cuda_tests() {
  local rc=0 bin
  for bin in "$BUILD"/tests/*_test_cuda*; do
    [ -x "$bin" ] || continue
    echo "== $bin"
    with_libs "$bin" --gtest_brief=1 || rc=1
  done
  return $rc
}

make_data() {
  local data="$RESULTS/data"
  mkdir -p "$data"
  python3 "$ROOT/scripts/make_demo_data.py" --out "$data" &&
    with_libs "$BUILD/sft_prepare" --input "$data/train.jsonl" --output "$data/train.h5" --max-length 64 &&
    with_libs "$BUILD/sft_prepare" --input "$data/eval.jsonl" --output "$data/eval.h5" --max-length 64
}

train() {  # train <run_name> key=value...
  local name="$1"; shift
  with_libs "$BUILD/sft_train" "$ROOT/configs/tiny.yml" run_name="$name" base_output_directory="$RESULTS/runs" \
    train_files="$RESULTS/data/train.h5" eval_files="$RESULTS/data/eval.h5" eval_interval=0 seed=1 \
    checkpoint_period=0 enable_data_shuffling=false "$@"
}

# Compares two runs' per-step losses: max relative difference <= tolerance (0 = bitwise).
compare_losses() {  # compare_losses <run_a> <run_b> <tolerance>
  python3 - "$RESULTS/runs/$1/metrics.jsonl" "$RESULTS/runs/$2/metrics.jsonl" "$3" <<'PY'
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and "eval_loss" not in l]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert a and len(a) == len(b), f"step counts differ: {len(a)} vs {len(b)}"
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
print(f"{sys.argv[1]} vs {sys.argv[2]}: {len(a)} steps, first loss {a[0]:.6f} / {b[0]:.6f}, "
      f"last {a[-1]:.6f} / {b[-1]:.6f}, max rel diff {worst:.3e} (tolerance {tol:g})")
sys.exit(0 if (worst <= tol if tol > 0 else a == b) else 1)
PY
}

e2e() {
  local steps=30
  step data make_data || return
  step train_gpu_fp32 train gpu_fp32 hardware=gpu steps=$steps
  step train_gpu_fp32_again train gpu_fp32_again hardware=gpu steps=$steps
  step train_cpu_fp32 train cpu_fp32 hardware=cpu steps=$steps
  step train_gpu_ga4 train gpu_ga4 hardware=gpu steps=$steps gradient_accumulation_steps=4
  step train_gpu_bf16 train gpu_bf16 hardware=gpu steps=$steps dtype=bfloat16
  # Same data, weights and config: loss per step. Differences grow over steps, hence 1e-3.
  step gpu_runs_bitwise_equal compare_losses gpu_fp32 gpu_fp32_again 0
  step gpu_matches_cpu compare_losses gpu_fp32 cpu_fp32 1e-3
  step ga1_matches_ga4 compare_losses gpu_ga4 gpu_fp32 1e-3
  step bf16_tracks_fp32 compare_losses gpu_bf16 gpu_fp32 5e-2
}

bench() {
  local found=0 bin
  for bin in "$BUILD"/bench/bench_gpu*; do
    [ -x "$bin" ] || continue
    found=1
    SFTDP_BENCH_OUT="$RESULTS" step "$(basename "$bin")" with_libs "$bin"  # + $RESULTS/gpu_step_<UTC>.md
  done
  [ $found = 1 ] || SUMMARY+=("skip  benchmark: no bench/bench_gpu*.cpp target in this tree")
}

# The summary table, and a copy of the logs and metrics under $OUT (all the device tool returns).
finish() {
  printf '%s\n' "${SUMMARY[@]}" | tee "$RESULTS/summary.txt"
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT/gpu_check" && cp "$RESULTS"/*.txt "$RESULTS"/*.log "$RESULTS"/*.md "$OUT/gpu_check/" 2>/dev/null
  [ -d "$RESULTS/runs" ] && find "$RESULTS/runs" -name metrics.jsonl -exec sh -c \
    'd="$1/gpu_check/$(basename "$(dirname "$2")")"; mkdir -p "$d" && cp "$2" "$d/"' _ "$OUT" {} \;
  return 0
}

run() {
  RESULTS="$ROOT/bench/results/gpu_check_$(date -u +%Y%m%dT%H%M%SZ)"
  mkdir -p "$RESULTS"
  log "results: $RESULTS"
  { nvidia-smi; nvcc --version; cmake --version; g++ --version; } >"$RESULTS/machine.txt" 2>&1
  unpack
  setup_env
  if step configure configure && step build build; then
    step cuda_kernel_tests cuda_tests
    e2e
    bench
  fi
  finish
  return $FAILED
}

case "${1:-}" in
  fetch) fetch ;;
  run) run ;;
  configure) RESULTS=$(mktemp -d); unpack; setup_env; configure ;;
  *) echo "usage: bash scripts/gpu_check.sh fetch|run|configure   (see the header of this file)" >&2; exit 2 ;;
esac
