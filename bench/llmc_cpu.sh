#!/usr/bin/env bash
# bench/llmc_cpu.sh — sft-dp's CPU trainer beside llm.c's (train_gpt2.c, fp32) on this machine, in one
# run, as a measured ratio. Builds llm.c's train_gpt2 (`make train_gpt2 CC=gcc`) outside the repo,
# writes what it reads without any download (a checkpoint of random GPT-2 weights of the shape, random
# token files at the paths its main() opens; no tokenizer: it runs without one, and it is stopped
# after its last wanted step line, before the text sampling of its step 20), then runs rounds of llm.c
# and build/sft_train in turn (alternating which goes first) at the same model, B, T and OpenMP thread
# count on the same tokens, and prints a markdown table per shape: ms/step min/median/max, tokens/s,
# GFLOP/s (bench::train_flops via bench_flops) and the ratio sft-dp / llm.c (bench/llmc_compare.py).
#   bash bench/llmc_cpu.sh [--out FILE.md] [--shape l4|124m ...] [--rounds 3] [--steps 12] [--skip 2]
#                          [--B 4] [--T 64] [--threads 2]           (llm.c's main() runs B=4, T=64)
# Shapes: l4 = 4 layers, C=256, NH=4, V=50257 (bench_train_step's); 124m = GPT-2 124M. Default both.
# Env: SFTDP_BUILD_DIR (default build/: needs sft_train and bench/bench_flops), SFTDP_LLMC_SRC (default
# .anchors/llm.c if fetched, else ../shared/anchors/llm.c beside the checkout), SFTDP_LLMC_WORK
# (default ${TMPDIR:-/tmp}/sftdp-llmc-cpu: llm.c's build and the scratch files; ~1.5 GB with 124m).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${SFTDP_BUILD_DIR:-build}"
SRC="${SFTDP_LLMC_SRC:-}"
if [[ -z $SRC ]]; then
  for SRC in .anchors/llm.c ../shared/anchors/llm.c; do [[ -f $SRC/train_gpt2.c ]] && break; done
fi
[[ -f $SRC/train_gpt2.c ]] || { echo "llmc_cpu: error: no llm.c source (train_gpt2.c) in $SRC; set SFTDP_LLMC_SRC" >&2; exit 2; }
WORK="${SFTDP_LLMC_WORK:-${TMPDIR:-/tmp}/sftdp-llmc-cpu}"
case "$(readlink -f "$WORK")/" in "$ROOT"/*) echo "llmc_cpu: error: SFTDP_LLMC_WORK must be outside the repo" >&2; exit 2 ;; esac
for b in sft_train bench/bench_flops; do
  [[ -x $BUILD/$b ]] || { echo "llmc_cpu: error: no $BUILD/$b (cmake --build $BUILD --target $(basename $b))" >&2; exit 2; }
done
PY=python3; /usr/bin/python3 -c 'import numpy, h5py' 2>/dev/null && PY=/usr/bin/python3  # Debian's: numpy, h5py

mkdir -p "$WORK/llm.c"
cp -a "$SRC/." "$WORK/llm.c/"
echo "[llmc_cpu] make train_gpt2 CC=gcc in $WORK/llm.c" >&2
make -C "$WORK/llm.c" train_gpt2 CC=gcc >"$WORK/make.log" 2>&1 || { cat "$WORK/make.log" >&2; exit 1; }
rm -rf "$WORK/run"

commit="$(grep -oE 'commit [0-9a-f]{40}' "$SRC/../README.md" 2>/dev/null | head -1 || true)"
[[ -n $commit ]] || commit="$(cat "$SRC.commit" 2>/dev/null || true)"
sftdp="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src kernels include 2>/dev/null || echo ' + uncommitted changes in src/kernels/include')"
facts=(
  "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/^Mem:/ {print $2}') GiB; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
  "sft-dp: $sftdp; $BUILD/sft_train ($(grep -m1 '^CMAKE_BUILD_TYPE' "$BUILD/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || echo '?') build) linked $(date -u -r "$BUILD/sft_train" '+%Y-%m-%d %H:%M UTC'), OpenBLAS $(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo '?') driven one thread per OpenMP block."
  "llm.c: ${commit:-commit unknown} (train_gpt2.c sha256 $(sha256sum "$SRC/train_gpt2.c" | cut -c1-12)), built \`make train_gpt2 CC=gcc\`: $(grep -m1 '^gcc ' "$WORK/make.log" | sed 's/ train_gpt2.c.*//'), $(gcc --version | head -1)."
  "One step, as each trainer times it: llm.c = its data batch + forward + zero_grad + backward + AdamW (no grad norm); sft_train = read rows + forward/backward + global-norm clipping + AdamW (metrics.jsonl step_time_s). Same tokens (llm.c's train file; sft-dp's rows are its stream cut in rows of T, every position weighted)."
)
fact_args=(); for f in "${facts[@]}"; do fact_args+=(--fact "$f"); done
exec "$PY" bench/llmc_compare.py cpu --llmc "$WORK/llm.c/train_gpt2" --sft-train "$BUILD/sft_train" \
  --bench-flops "$BUILD/bench/bench_flops" --work "$WORK/run" "${fact_args[@]}" "$@"
