#!/usr/bin/env bash
# The embedded default: installs what is missing, builds, generates the demo SFT data (3-digit
# addition and string reversal, prompt masked) and fine-tunes gpt2-tiny on it with configs/tiny.yml.
# Extra arguments are key=value overrides (e.g. steps=50). Set NP=2 to run on 2 MPI ranks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/install_deps.sh"
bash "$ROOT/scripts/build.sh" >/dev/null
cd "$ROOT"
DATA="$ROOT/data/generated"
if [ ! -f "$DATA/train.h5" ] || [ ! -f "$DATA/eval.h5" ]; then
  mkdir -p "$DATA"
  /usr/bin/python3 scripts/make_demo_data.py --out "$DATA"
  "$BUILD/sft_prepare" --input "$DATA/train.jsonl" --output "$DATA/train.h5" --max-length 64
  "$BUILD/sft_prepare" --input "$DATA/eval.jsonl" --output "$DATA/eval.h5" --max-length 64
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${NP:-1}" -gt 1 ]; then
  mpirun -np "$NP" --oversubscribe -x OMP_NUM_THREADS=1 "$BUILD/sft_train" configs/tiny.yml "$@"
else
  "$BUILD/sft_train" configs/tiny.yml "$@"
fi
# The verdict a person wants: eval loss at the start vs the end.
/usr/bin/python3 - "$@" <<'PY'
import json, os, sys, yaml
cfg = yaml.safe_load(open("configs/tiny.yml"))
for a in sys.argv[1:]:
    k, _, v = a.partition("=")
    cfg[k] = yaml.safe_load(v)
path = f"{cfg['base_output_directory']}/{cfg['run_name']}/metrics.jsonl"
ev = [json.loads(l) for l in open(path) if "eval_loss" in l]
if len(ev) >= 2:
    print(f"eval loss: {ev[0]['eval_loss']:.4f} at step {ev[0]['step']} -> "
          f"{ev[-1]['eval_loss']:.4f} at step {ev[-1]['step']} ({path})")
ckpts = f"{cfg['base_output_directory']}/{cfg['run_name']}/checkpoints"

newest = max((f for f in os.listdir(ckpts) if f.startswith("step_")), key=lambda f: int(f[5:-3]))
open(".demo_checkpoint", "w").write(f"{ckpts}/{newest}")
PY
# What the model answers now, greedy, on the first eval prompts (not seen in training).
echo "greedy completions on held-out prompts:"
SFTDP_BUILD_DIR="$BUILD" /usr/bin/python3 scripts/sample.py "$(cat .demo_checkpoint)" "$DATA/eval.jsonl" 12  # sft_generate
rm -f .demo_checkpoint
