#!/usr/bin/env bash
# bench/multinode.sh — one host against two: the gradient allreduce (bench_allreduce: the trainer's
# against a raw MPI_Allreduce, bus bandwidth) and a whole training step (slurm/cpu.sbatch, median
# step time and tokens/s from metrics.jsonl), on a private 2-node Slurm cluster of network-namespace
# hosts (scripts/slurm_cluster.sh --nodes 2; Open MPI: shared memory within a host, TCP over a veth
# pair and a bridge between hosts). Prints markdown tables. Run as root, alone on the machine.
# Usage: bench/multinode.sh [BUILD_DIR]   (default build/; needs build/bench/bench_allreduce)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
TMP="$(mktemp -d)"
chmod 755 "$TMP"  # munged must enter the cluster's state dir below it
export SFTDP_SLURM_DIR="$TMP/cluster"
trap 'bash "$ROOT/scripts/slurm_cluster.sh" stop >/dev/null; rm -rf "$TMP"' EXIT
bash "$ROOT/scripts/slurm_cluster.sh" start --nodes 2 >/dev/null
# shellcheck disable=SC1091
source "$SFTDP_SLURM_DIR/env"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

echo "## Gradient allreduce (bench_allreduce under srun --mpi=pmix)"
for layout in "1 2" "2 1" "2 2"; do
  set -- $layout
  echo
  echo "### $1 node(s) x $2 task(s)"
  timeout 600 srun --mpi=pmix --nodes="$1" --ntasks-per-node="$2" "$BUILD/bench/bench_allreduce" | grep -v "^check"
done

/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$ROOT/tests/integration')
from harness import make_data
make_data('$TMP/train.h5', 512, T=64, vocab=50257, seed=1)"
printf 'run_name: x\n' >"$TMP/c.yml"
CFG=(model_name=gpt2-tiny num_decoder_layers=4 num_heads=4 emb_dim=256 mlp_dim=1024 vocab_size=50257
     max_position_embeddings=1024 max_target_length=64 global_batch_size=16 steps=12 hardware=cpu
     train_files="$TMP/train.h5" base_output_directory="$TMP/out" checkpoint_period=0 eval_interval=0
     enable_data_shuffling=false)
echo
echo "## Training step (slurm/cpu.sbatch; 4-layer C=256 V=50257 model, 16 rows x T=64 per step)"
echo
echo "| layout | median step ms (steps 3-12) | tokens/s |"
echo "|---|---|---|"
for layout in "1 2" "2 1" "1 4" "2 2"; do
  set -- $layout
  name="n$1x$2"
  job="$(SFTDP_TRAIN="$BUILD/sft_train" sbatch --parsable --wait --chdir="$TMP" --nodes="$1" --ntasks-per-node="$2" \
         --ntasks=$(($1 * $2)) "$ROOT/slurm/cpu.sbatch" "$TMP/c.yml" "${CFG[@]}" run_name="$name")" \
    || { echo "job for $name failed:"; cat "$TMP"/sftdp-cpu-*.out; exit 1; }
  /usr/bin/python3 -c "
import json, statistics
m = [json.loads(l) for l in open('$TMP/out/$name/metrics.jsonl') if '\"loss\"' in l][2:]
t = statistics.median(x['step_time_s'] for x in m)
print(f'| $1 node(s) x $2 task(s) | {t*1e3:.1f} | {16*64/t:.0f} |')"
  : "$job"
done
