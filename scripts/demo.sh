#!/usr/bin/env bash
# The embedded default: installs what is missing (install_deps.sh --demo), builds the three programs
# it runs, generates the demo SFT data (reversing strings of 3-8 letters, prompt masked; eval prompts
# never in the training set) and fine-tunes gpt2-tiny, widened to 128 channels, on it with
# configs/demo.yml from scratch (out/demo is replaced), then shows the eval loss before -> after and
# the model's greedy answers to 12 held-out prompts. Extra arguments are key=value overrides
# (e.g. steps=50). Set NP=2 to run on 2 MPI ranks. 96 s on a fresh clone on 2 quiet cores with the
# packages installed, about 2 minutes with the install (bench/results/demo_2026-12-04.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
CONFIG=configs/demo.yml
bash "$ROOT/scripts/install_deps.sh" --demo
# Only the programs the demo runs (the whole tree, tests and benchmarks, is what scripts/test.sh
# builds); configured as scripts/build.sh does, so build/ stays the one build of the project.
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target sft_train sft_prepare sft_generate >/dev/null
cd "$ROOT"
# The run directory and row length after the overrides: the data is made for this T, the run starts
# from step 0 every time.
RESOLVED="$(/usr/bin/python3 - "$CONFIG" "$@" <<'PY'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
for a in sys.argv[2:]:
    k, _, v = a.partition("=")
    cfg[k] = yaml.safe_load(v)
if not isinstance(cfg["run_name"], str) or cfg["run_name"] in ("", ".", "..") or "/" in cfg["run_name"]:
    sys.exit(f"demo.sh: error: run_name: a plain directory name, got {cfg['run_name']!r}")
print(f"{cfg['base_output_directory']}/{cfg['run_name']}", cfg["max_target_length"])
PY
)"
read -r RUN_DIR T <<< "$RESOLVED"
DATA="$ROOT/data/generated"
mkdir -p "$DATA"
/usr/bin/python3 scripts/make_demo_data.py --out "$DATA"
for split in train eval; do
  "$BUILD/sft_prepare" --input "$DATA/$split.jsonl" --output "$DATA/demo_$split.h5" --max-length "$T"
  # The same examples at T=64 for configs/tiny.yml, the plain gpt2-tiny example of the README's
  # mpirun, Slurm and simulator lines.
  "$BUILD/sft_prepare" --input "$DATA/$split.jsonl" --output "$DATA/$split.h5" --max-length 64 >/dev/null
done
rm -rf "$RUN_DIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${NP:-1}" -gt 1 ]; then
  mpirun -np "$NP" --oversubscribe -x OMP_NUM_THREADS=1 "$BUILD/sft_train" "$CONFIG" "$@"
else
  "$BUILD/sft_train" "$CONFIG" "$@"
fi
# The verdict a person wants: eval loss at the start vs the end.
/usr/bin/python3 - "$RUN_DIR" <<'PY'
import json, os, sys
run = sys.argv[1]
ev = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if "eval_loss" in l]
if len(ev) >= 2:
    print(f"eval loss: {ev[0]['eval_loss']:.4f} at step {ev[0]['step']} -> "
          f"{ev[-1]['eval_loss']:.4f} at step {ev[-1]['step']} ({run}/metrics.jsonl)")
ckpts = f"{run}/checkpoints"
newest = max((f for f in os.listdir(ckpts) if f.startswith("step_") and os.path.isfile(f"{ckpts}/{f}/index.h5")),
             key=lambda f: int(f[5:]))  # sharded step_<S>/ directories (SPEC §5)
open(".demo_checkpoint", "w").write(f"{ckpts}/{newest}")
PY
# What the model answers now, greedy, on the first eval prompts (not seen in training).
echo "greedy completions on held-out prompts:"
SFTDP_BUILD_DIR="$BUILD" /usr/bin/python3 scripts/sample.py "$(cat .demo_checkpoint)" "$DATA/eval.jsonl" 12  # sft_generate
rm -f .demo_checkpoint
