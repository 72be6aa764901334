#!/usr/bin/env bash
# Step time on 1 vs 2 CPU ranks for the same global batch (and the same rows): prints a table of
# the median step_time_s and tokens/s from metrics.jsonl. Usage: bench/scaling.sh [BUILD_DIR]
# --bind-to none: Open MPI binds each of <= 2 ranks to one core by default, which would squeeze a
# 2-thread rank onto a single core.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$ROOT/tests/integration')
from harness import make_data
make_data('$TMP/train.h5', 512, T=64, vocab=50257, seed=1)"
CFG=(model_name=gpt2-tiny num_decoder_layers=4 num_heads=4 emb_dim=256 mlp_dim=1024 vocab_size=50257
     max_position_embeddings=1024 max_target_length=64 global_batch_size=8 steps=8 hardware=cpu
     train_files=$TMP/train.h5 base_output_directory=$TMP/out checkpoint_period=0 enable_data_shuffling=false)
printf 'run_name: x\n' > "$TMP/c.yml"
echo "| ranks x GA x rows | threads/rank | median step ms | tokens/s |"
echo "|---|---|---|---|"
for spec in "1 1 2" "1 2 2" "2 1 1"; do
  set -- $spec; np=$1; ga=$2; thr=$3
  name="np${np}_ga${ga}"
  OMP_NUM_THREADS=$thr OPENBLAS_NUM_THREADS=$thr mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
    "$BUILD/sft_train" "$TMP/c.yml" "${CFG[@]}" run_name=$name gradient_accumulation_steps=$ga >/dev/null
  /usr/bin/python3 -c "
import json, statistics
m = [json.loads(l) for l in open('$TMP/out/$name/metrics.jsonl') if '\"loss\"' in l][1:]
t = statistics.median(x['step_time_s'] for x in m)
print(f'| $np x $ga x {8//($np*$ga)} | $thr | {t*1e3:.1f} | {8*64/t:.0f} |')"
done
