#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] — runs the libFuzzer targets of tests/fuzz
# (clang, ASan + UBSan, the CUDA simulator build) for a bounded time each. They live in the sanitized build that
# scripts/test_sanitizers.sh configures (${SFTDP_FUZZ_BUILD_DIR:-${SFTDP_ASAN_BUILD_DIR:-build-asan}}):
# after the sanitizer suite (scripts/test.sh) they are already built; run alone, this configures
# that build the same way and builds only the fuzz targets. The committed seeds
# (tests/fuzz/corpus, regressions) are read, never written: new inputs go to
# <build>/fuzz-work/<target>/corpus. Exits 1 on any crash, leak, timeout or sanitizer report and
# prints the reproducer; save it under tests/fuzz/regressions/<target>/ once fixed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_FUZZ_BUILD_DIR:-${SFTDP_ASAN_BUILD_DIR:-$ROOT/build-asan}}"
SECONDS_PER_TARGET="${1:-60}"
TARGETS=(config data_file checkpoint safetensors)

# Identical to scripts/test_sanitizers.sh's configure line (a difference would rebuild everything).
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DSFTDP_FUZZ=ON -DSFTDP_CUDA_SIM=ON -DSFTDP_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j "${SFTDP_BUILD_JOBS:-$(nproc)}" --target "${TARGETS[@]/#/fuzz_}"

export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
status=0
for t in "${TARGETS[@]}"; do
  work="$BUILD/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds=("$ROOT/tests/fuzz/corpus/$t")
  [ -d "$ROOT/tests/fuzz/regressions/$t" ] && seeds+=("$ROOT/tests/fuzz/regressions/$t")
  echo "fuzz_$t: ${SECONDS_PER_TARGET}s (log: $work/log)"
  if ! "$BUILD/tests/fuzz/fuzz_$t" "$work/corpus" "${seeds[@]}" -max_total_time="$SECONDS_PER_TARGET" \
       -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
       -artifact_prefix="$work/artifacts/" >"$work/log" 2>&1; then
    status=1
    tail -n 40 "$work/log"
    for crash in "$work"/artifacts/*; do
      [ -e "$crash" ] || continue
      echo "fuzz_$t: reproducer $crash"
      echo "  replay: $BUILD/tests/fuzz/fuzz_$t $crash"
      echo "  keep:   cp $crash $ROOT/tests/fuzz/regressions/$t/"
    done
  else
    grep -E "^stat::number_of_executed_units|^Done " "$work/log" | tr '\n' ' '; echo
  fi
done
exit "$status"
