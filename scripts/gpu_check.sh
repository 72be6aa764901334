#!/usr/bin/env bash
# scripts/gpu_check.sh — sft-dp's one-GPU check on a machine of the device tool, in two calls, so
# that a failure still leaves device time to fix and retry on the warm machine:
#   here, once:  bash scripts/gpu_packages.sh fetch     (Debian packages into .debs/, llm.c's source
#                                                       into .anchors/llm.c: both git-ignored)
#   run(command="bash scripts/gpu_check.sh build-test", carry=[".debs"], timeout_s=540)
#   run(command="bash scripts/gpu_check.sh e2e-bench",  carry=[".debs", ".anchors"], timeout_s=420)
# build-test: unpack the packages, configure with CUDA (build-cuda/), build, ctest -L gpu.
# e2e-bench: the same steps first (no-ops on the warm machine: build-cuda/ and build-pkgroot/ are
# git-ignored, so they stay between calls; a fresh machine rebuilds them), then tiny-model runs (GPU
# vs CPU loss, two GPU runs bitwise, GA 1 vs 4, bf16, llama-tiny GPU vs CPU), two ranks on the one GPU
# (auto: CPU, gpu: exit 2), bench_gpu_step (GPT-2 124M step time, markdown report) and, last, the
# same-run ratio against llm.c (issue 23): llmc_build compiles llm.c's train_gpt2cu from the carried
# .anchors/llm.c into build-llmc/ (`make train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 NO_USE_MPI=1
# GPU_COMPUTE_CAPABILITY=90`, with bench/llmc_cuda13.h pre-included for CUDA 13) in the background
# from the start, beside the other steps (~10-30 s of one nvcc), and llmc_vs_sftdp runs llm.c
# (`-e d12`: random GPT-2 124M) and sft_train (gpt2-124m, dtype=bfloat16) in turn, 2 rounds of 30
# steps at B=8, T=1024 on the same random tokens (bench/llmc_compare.py writes llm.c's token files and
# sft-dp's .h5), and writes gpu_vs_llmc_<UTC>.md: ms/step, tokens/s, MFU of both, ratio sft-dp/llm.c.
# If those last steps find no time left (SKIP in the summary), run them alone on the warm machine:
#   run(command="bash scripts/gpu_check.sh llmc-bench", carry=[".debs", ".anchors"], timeout_s=360)
# llmc-bench also builds llm.c with its cuDNN attention (llmc_cudnn_build: `USE_CUDNN=1`, its fastest
# configuration; the frontend's headers from .anchors/cudnn-frontend, cuDNN the machine's) in the
# background, where cuDNN is installed, and runs it in each round between the other two: a separate
# ratio in the report, the next anchor (issue 34). SFTDP_CUDNN="INCLUDE_DIR LIBRARY" (or none) overrides
# the search; SFTDP_LLMC_CUDNN_BUILD_LIMIT (200 s).
# zero-bench (issue 25): the same prepare, then gpt2-124m bf16 at zero_stage 0, 2 and 3, GA 1 and 4, and
# with weight_dtype bfloat16 (bf16 weight storage) at zero_stage 1, 2 and 3, GA 4, on the one GPU:
# ms/step, the last loss against stage 0's, nvidia-smi's peak memory beside the plan, as
# gpu_zero_<UTC>.md:  run(command="bash scripts/gpu_check.sh zero-bench", carry=[".debs"], timeout_s=450)
# profile (issue 34): where a step's time goes, first thing on any GPU, in under 5 minutes: the same
# packages and configure, a build of bench/gpu_step_record alone, then one step of each PROFILE_STEPS
# entry (gpt2-124m and smollm2-135m, bf16, B=8, T=1024, after 3 warm-up steps) with every device
# operation timed by cudaEvents (SFTDP_GPU_PROFILE, kernels/cuda/profile.cuh), and bench/gpu_cost.py's
# table of each: measured beside predicted per operation, class and kernel, idle gaps, host-bound
# operations (gpu_profile_<name>_<UTC>.md, every line in gpu_profile_<name>.csv). The predictions need
# the simulator's record of the same steps, made here first and carried:
#   here:   bash scripts/gpu_check.sh records      (a simulator build's gpu_step_record, record-only: ~1 min)
#   run(command="bash scripts/gpu_check.sh profile", carry=[".debs", ".records"], timeout_s=300)
# Without .records/ the tables are the measured ones alone; gpu_cost.py --profile joins them here later.
# Every step runs under `timeout`, inside SFTDP_GPU_CHECK_LIMIT s (default: timeout_s above - 30);
# a failed step is logged and the others still run. Results: ONE file, $OUT/gpu_check_<mode>.tar.gz
# (summary.txt, <step>.log, metrics, bench gpu_step_<UTC>.md and gpu_vs_llmc_<UTC>.md: copy them into
# bench/results/ here); the summary is printed last; exit 1 if any step failed.
# SFTDP_GPU_CHECK_DRY=1: each command is printed, not run (SFTDP_GPU_CHECK_DRY_FAIL / _HANG="step
# ..." make those steps fail or hang); tests/integration/test_gpu_check_script.py runs it so.
# llm.c comparison knobs: SFTDP_LLMC_B (8), SFTDP_LLMC_T (1024), SFTDP_LLMC_STEPS (30, the first 5
# dropped), SFTDP_LLMC_ROUNDS (2), SFTDP_LLMC_BUILD_LIMIT (90 s; e2e-bench waits for the build before
# bench_gpu_step, so a hung one costs the later steps at most that), SFTDP_PEAK_TFLOPS (the MFU peak
# of a GPU other than an H100/H200 SXM).
set -uo pipefail
SELF="$(readlink -f "${BASH_SOURCE[0]}")"
ROOT="$(dirname "$(dirname "$SELF")")"
export ROOT BUILD="${SFTDP_GPU_BUILD_DIR:-$ROOT/build-cuda}"
export PKG="${SFTDP_PKG_ROOT:-$ROOT/build-pkgroot}" LLMC="${SFTDP_LLMC_BUILD_DIR:-$ROOT/build-llmc}"
export LLMC_CUDNN="${SFTDP_LLMC_CUDNN_BUILD_DIR:-$ROOT/build-llmc-cudnn}"  # llm.c with USE_CUDNN=1
export RECORDS="${SFTDP_GPU_RECORDS:-$ROOT/.records}"  # the simulator's records of the profiled steps
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}" OPENBLAS_NUM_THREADS=1 PATH="/usr/local/cuda/bin:$PATH"

x() {  # every command of a step goes through here; a dry run prints it (and fails or hangs on demand)
  if [[ -n ${SFTDP_GPU_CHECK_DRY:-} ]]; then
    echo "+ $*"
    [[ " ${SFTDP_GPU_CHECK_DRY_HANG:-} " == *" $STEP "* ]] && sleep 3600
    [[ " ${SFTDP_GPU_CHECK_DRY_FAIL:-} " != *" $STEP "* ]]
    return
  fi
  "$@"
}
absent() { ! grep -qE "$1" "$2"; }  # absent REGEX FILE
with_libs() { LD_LIBRARY_PATH="${SFTDP_PKG_LIBDIRS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

# ---- the steps (each runs in its own bash under timeout; output in $RES/<step>.log) ----
machine() {
  x nvidia-smi; x nvcc --version; x cmake --version; x g++ --version; x python3 --version
  x bash -c 'ls /usr/local/cuda/lib64 | grep -E "nccl|cublas|cudart"; ls -l /usr/include/nccl.h /usr/local/cuda/include/nccl.h'
  return 0  # a record, not a check
}
packages() { x bash "$ROOT/scripts/gpu_packages.sh" install; }
configure() {  # a build without CUDA would pass everything: CUDA ON is part of the check
  local args=(); [[ -f $PKG/cmake.args ]] && mapfile -t args <"$PKG/cmake.args"
  [[ -f $BUILD/CMakeCache.txt ]] || ! command -v ninja >/dev/null || command -v make >/dev/null || args+=(-G Ninja)
  x cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSFTDP_NATIVE=ON \
    "${args[@]}" && x grep -q "sft-dp: CUDA ON" "$RES/$STEP.log"
}
build() {  # the apps, tests/<dir>/test_*cuda*.cpp (target <dir>_test_...) and bench_gpu_step; tests/cudasim/
  # is the simulator's own suite, configured in the simulator build only (no such target here)
  local targets=(sft_train sft_prepare bench_gpu_step bench_flops) t
  for t in "$ROOT"/tests/*/test_*cuda*.cpp; do
    t="${t#"$ROOT"/tests/}"; [[ $t == cudasim/* ]] && continue
    targets+=("${t%%/*}_$(basename "$t" .cpp)")
  done
  x cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
}
gpu_tests() {  # the CUDA-vs-CPU GoogleTests; a skipped one means no device was seen: a failure here.
  # Not the integration ones (label integration): they need Debian's python3 with pytest and h5py, and
  # a Slurm cluster; the e2e-bench steps run sft_train on the GPU instead. Four at a time on the one GPU.
  x with_libs ctest --test-dir "$BUILD" -L gpu -LE integration -j 4 --output-on-failure --timeout 240 &&
    x absent "\*\*\*Skipped|No tests were found" "$RES/$STEP.log"
}
data() {
  local d="$RES/data"; mkdir -p "$d"
  x python3 "$ROOT/scripts/make_demo_data.py" --out "$d" &&
    x with_libs "$BUILD/sft_prepare" --input "$d/train.jsonl" --output "$d/train.h5" --max-length 64 &&
    x with_libs "$BUILD/sft_prepare" --input "$d/eval.jsonl" --output "$d/eval.h5" --max-length 64
}
train() {  # train RUN_NAME key=value...
  local name="$1"; shift
  x with_libs "$BUILD/sft_train" "$ROOT/configs/tiny.yml" run_name="$name" base_output_directory="$RES/runs" \
    train_files="$RES/data/train.h5" eval_files="$RES/data/eval.h5" eval_interval=0 seed=1 steps=30 \
    checkpoint_period=0 enable_data_shuffling=false "$@"
}
compare() {  # compare RUN_A RUN_B TOLERANCE: per-step losses, max relative difference (0: bitwise)
  x /usr/bin/env python3 - "$RES/runs/$1/metrics.jsonl" "$RES/runs/$2/metrics.jsonl" "$3" <<'PY'
import json, sys
def losses(p): return [j["loss"] for j in map(json.loads, open(p)) if "loss" in j and "eval_loss" not in j]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert a and len(a) == len(b), f"step counts differ: {len(a)} vs {len(b)}"
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
print(f"{len(a)} steps, first loss {a[0]:.6f} / {b[0]:.6f}, last {a[-1]:.6f} / {b[-1]:.6f}, "
      f"max rel diff {worst:.3e} (tolerance {tol:g})")
sys.exit(0 if (worst <= tol if tol > 0 else a == b) else 1)
PY
}
two_ranks_one_gpu() {  # issue 8: auto falls back to the CPU on every rank; gpu is a user error
  local mpi=("${SFTDP_MPIEXEC:-mpiexec}" -n 2)
  x with_libs "${mpi[@]}" "$BUILD/sft_train" "$ROOT/configs/tiny.yml" run_name=two_auto hardware=auto steps=3 \
    base_output_directory="$RES/runs" train_files="$RES/data/train.h5" eval_files="$RES/data/eval.h5" \
    eval_interval=0 checkpoint_period=0 >"$RES/two_auto.out" 2>&1; local rc=$?; cat "$RES/two_auto.out"
  ((rc == 0)) && x grep -q "hardware: auto: the CPU on every rank, since .* runs 2 local ranks" "$RES/two_auto.out" || return 1
  x with_libs "${mpi[@]}" "$BUILD/sft_train" "$ROOT/configs/tiny.yml" run_name=two_gpu hardware=gpu steps=3 \
    base_output_directory="$RES/runs" train_files="$RES/data/train.h5" eval_files="$RES/data/eval.h5" \
    >"$RES/two_gpu.out" 2>&1; rc=$?; cat "$RES/two_gpu.out"; echo "exit status $rc (want 2)"
  [[ -n ${SFTDP_GPU_CHECK_DRY:-} ]] || ((rc == 2)) && x grep -q "error: hardware: gpu: .* runs 2 local ranks" "$RES/two_gpu.out"
}
bench() { SFTDP_BENCH_OUT="$RES" x with_libs "$BUILD/bench/bench_gpu_step"; }

# ---- issue 34: every device operation of a step timed (profile), beside the cost model's prediction ----
# name|key=value... of each profiled step; `records` records the same steps in the simulator (record-only)
PROFILE_STEPS=(
  "gpt2-124m|model_name=gpt2-124m global_batch_size=8 max_target_length=1024 dtype=bfloat16"
  "smollm2-135m|model_name=smollm2-135m global_batch_size=8 max_target_length=1024 dtype=bfloat16"
)
PROFILE_WARMUP=3
build_profile() { x cmake --build "$BUILD" -j "$(nproc)" --target gpu_step_record; }
profile_step() {  # profile_step NAME: one step of that PROFILE_STEPS entry, timed per operation
  local entry keys
  for entry in "${PROFILE_STEPS[@]}"; do [[ ${entry%%|*} == "$1" ]] && keys="${entry#*|}"; done
  rm -f "$RES/profile_$1.jsonl"
  # shellcheck disable=SC2086
  x with_libs env SFTDP_GPU_PROFILE="$RES/profile_$1.jsonl" "$BUILD/bench/gpu_step_record" --warmup "$PROFILE_WARMUP" \
    $keys
}
profile_report() {  # profile_report NAME: gpu_cost.py's joined table (measured alone without a carried record)
  local record=("--no-record")
  [[ -f $RECORDS/$1.jsonl ]] && record=(--record "$RECORDS/$1.jsonl")
  x python3 "$ROOT/bench/gpu_cost.py" --profile "$RES/profile_$1.jsonl" "${record[@]}" \
    --ops-csv "$RES/gpu_profile_$1.csv" | tee "$RES/gpu_profile_$1_$(date -u +%Y%m%dT%H%M%SZ).md"
}
records() {  # here, without a GPU: the simulator's record of each PROFILE_STEPS entry into .records/
  local sim="${SFTDP_SIM_BUILD_DIR:-$ROOT/build-sim}" entry name
  [[ -f $sim/CMakeCache.txt ]] ||
    x cmake -S "$ROOT" -B "$sim" -DCMAKE_BUILD_TYPE=Release -DSFTDP_CUDA_SIM=ON -DSFTDP_BUILD_TESTS=OFF || return 1
  x cmake --build "$sim" -j "$(nproc)" --target gpu_step_record && x mkdir -p "$RECORDS" || return 1
  for entry in "${PROFILE_STEPS[@]}"; do
    name="${entry%%|*}"
    x rm -f "$RECORDS/$name.jsonl"
    # shellcheck disable=SC2086
    x env SFTDP_SIM_RECORD="$RECORDS/$name.jsonl" SFTDP_SIM_RECORD_ONLY=1 SFTDP_SIM_DEVICE_MEMORY=80G \
      "$sim/bench/gpu_step_record" --warmup "$PROFILE_WARMUP" ${entry#*|} || return 1
  done
}

# ---- issue 23: llm.c's train_gpt2cu beside sft_train, same GPU, same call ----
nvml_library() {  # a libnvidia-ml to link llm.c against (-lnvidia-ml): the toolkit's stub, else the driver's
  local f
  for f in /usr/local/cuda/lib64/stubs/libnvidia-ml.so /usr/local/cuda/targets/x86_64-linux/lib/stubs/libnvidia-ml.so \
           $(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 / {print $NF}') /usr/local/nvidia/lib64/libnvidia-ml.so.1 \
           /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; do
    [[ -e $f ]] && { echo "$f"; return 0; }
  done
  return 1
}
llmc_build() {  # from the carried copy (never built inside it): build-llmc/ is git-ignored and stays warm
  llmc_build_into "$LLMC" 0
}
# llm.c with its cuDNN attention (USE_CUDNN=1, its fastest configuration), the next anchor: into
# build-llmc-cudnn/, where cuDNN is installed (gpu_packages.sh find-cudnn: the toolkit's, the system's or
# python3's nvidia-cudnn wheel) and the frontend's headers were carried (.anchors/cudnn-frontend, by
# gpu_packages.sh fetch-llmc). Without either it says so and builds nothing (the comparison then leaves
# that anchor out); cudnn_att.cpp alone takes about a minute of nvcc.
llmc_cudnn_build() {
  local found inc lib src fe="$ROOT/.anchors/cudnn-frontend"
  x test -f "$fe/include/cudnn_frontend.h" ||
    { echo "no $fe/include/cudnn_frontend.h: run 'bash scripts/gpu_packages.sh fetch-llmc' here and carry .anchors"; return 1; }
  found="${SFTDP_CUDNN:-$(bash "$ROOT/scripts/gpu_packages.sh" find-cudnn)}"  # or "INCLUDE_DIR LIBRARY", or none
  if [[ -z $found || $found == none ]]; then
    echo "no cuDNN on this machine (cudnn.h + libcudnn.so): llm.c's cuDNN anchor is left out"; return 0
  fi
  read -r inc lib src <<<"$found"
  echo "cuDNN (${src:-SFTDP_CUDNN}): $inc/cudnn.h, $lib; frontend $(cat "$fe/VERSION" 2>/dev/null)"
  llmc_build_into "$LLMC_CUDNN" 1 "$inc" "$lib" && x ln -sfn "$fe" "$LLMC_CUDNN/cudnn-frontend" &&
    x "${LLMC_ENV[@]}" make train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 &&
    x test -x "$LLMC_CUDNN/train_gpt2cu"
}
llmc_build_into() {  # DIR CUDNN [CUDNN_INCLUDE CUDNN_LIBRARY]: copies the source in; CUDNN=0 also builds
  local dir="$1" cudnn="$2" src="$ROOT/.anchors/llm.c" nvml flags="-include $ROOT/bench/llmc_cuda13.h"
  x test -f "$src/train_gpt2.cu" ||
    { echo "no $src/train_gpt2.cu: run 'bash scripts/gpu_packages.sh fetch' here and carry .anchors"; return 1; }
  x mkdir -p "$dir/lib" && x cp -R --preserve=timestamps "$src/." "$dir/" && x chmod -R u+w "$dir" || return 1
  if nvml=$(nvml_library); then x ln -sfn "$nvml" "$dir/lib/libnvidia-ml.so"
  else echo "no libnvidia-ml found: the link needs one where the linker looks"; fi
  if ((cudnn)); then  # its headers and an unversioned libcudnn.so where the compiler and linker look
    flags+=" -isystem $3" && x ln -sfn "$4" "$dir/lib/libcudnn.so" || return 1
  fi
  LLMC_ENV=(env -C "$dir" NVCC_APPEND_FLAGS="$flags" LIBRARY_PATH="$dir/lib${LIBRARY_PATH:+:$LIBRARY_PATH}")
  ((cudnn)) && return 0
  if command -v make >/dev/null; then
    x "${LLMC_ENV[@]}" make train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90
  else  # an image without make: the Makefile's recipe for exactly these options
    x "${LLMC_ENV[@]}" nvcc --threads=0 -t=0 --use_fast_math -std=c++17 -O3 \
      "--generate-code=arch=compute_90,code=[compute_90,sm_90]" -DENABLE_BF16 train_gpt2.cu \
      -lcublas -lcublasLt -lnvidia-ml -o train_gpt2cu
  fi && x test -x "$dir/train_gpt2cu"
}
llmc_vs_sftdp() {  # rounds of one llm.c run and one sft_train run, alternating which goes first; with
  # the argument `cudnn` and a built build-llmc-cudnn/, one run of llm.c with cuDNN attention between them
  local d="$RES/llmc" B="${SFTDP_LLMC_B:-8}" T="${SFTDP_LLMC_T:-1024}" steps="${SFTDP_LLMC_STEPS:-30}"
  local rounds="${SFTDP_LLMC_ROUNDS:-2}" r who order failed=0 args=() shown=() cudnn=0 cudnn_libs=""
  if [[ ${1:-} == cudnn ]]; then
    if x test -x "$LLMC_CUDNN/train_gpt2cu"; then
      cudnn=1 cudnn_libs=$(dirname "$(readlink -f "$LLMC_CUDNN/lib/libcudnn.so")")
    else echo "no $LLMC_CUDNN/train_gpt2cu (see llmc_cudnn_build.log): the comparison without llm.c's cuDNN anchor"; fi
  fi
  local run_limit=60  # s per run (~10-15 s expected): a hung run still leaves the others and the report
  mkdir -p "$d" && printf 'run_name: llmc\n' >"$d/sft.yml"
  local keys=(model_name=gpt2-124m dtype=bfloat16 hardware=gpu global_batch_size="$B" max_target_length="$T"
              steps="$steps" learning_rate=3e-4 train_files="$d/train.h5" enable_data_shuffling=false
              checkpoint_period=0 eval_interval=0 log_period=10 base_output_directory="$d/runs")
  local llmc=("$LLMC/train_gpt2cu" -i "$d/train.bin" -j "$d/val.bin" -e d12 -b "$B" -t "$T" -x "$steps"
              -v 1000000 -m 1 -s 0 -n 0 -r 0 -h 0)  # no sampling, no checkpoints, val once (1 batch), no recompute
  x python3 "$ROOT/bench/llmc_compare.py" data "$d" --rows $((B * (steps + 2))) --T "$T" &&
    x with_libs "$BUILD/bench/bench_flops" "$d/sft.yml" "${keys[@]}" | tee "$d/flops.txt" || return 1
  for ((r = 1; r <= rounds; r++)); do
    order="llmc sftdp"; ((cudnn)) && order="llmc llmc_cudnn sftdp"
    ((r % 2)) || order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
    for who in $order; do
      if [[ $who == llmc ]]; then
        x timeout -k 5 "$run_limit" "${llmc[@]}" 2>&1 | tee "$d/llmc_$r.log" || { failed=1; echo "llm.c run $r failed"; }
      elif [[ $who == llmc_cudnn ]]; then  # the same arguments; cuDNN's libraries where it found them
        x env LD_LIBRARY_PATH="$cudnn_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 5 "$run_limit" \
          "$LLMC_CUDNN/train_gpt2cu" "${llmc[@]:1}" 2>&1 | tee "$d/llmc_cudnn_$r.log" ||
          { failed=1; echo "llm.c (cuDNN) run $r failed"; }
      else
        x with_libs timeout -k 5 "$run_limit" "$BUILD/sft_train" "$d/sft.yml" "${keys[@]}" run_name="sftdp_$r" 2>&1 |
          tee "$d/sftdp_$r.log" || { failed=1; echo "sft_train run $r failed"; }
        x rm -rf "$d/runs/sftdp_$r/checkpoints"  # the run's final checkpoint (1.5 GB), not needed
        # the same rows as SFT data: 60% of each a prompt (loss weight 0), which sft-dp's head skips
        x with_libs timeout -k 5 "$run_limit" "$BUILD/sft_train" "$d/sft.yml" "${keys[@]}" run_name="sftdp_sft_$r" \
          train_files="$d/train_sft.h5" 2>&1 | tee "$d/sftdp_sft_$r.log" || { failed=1; echo "sft_train SFT run $r failed"; }
        x rm -rf "$d/runs/sftdp_sft_$r/checkpoints"
      fi
    done
    args+=(--llmc-log "$d/llmc_$r.log" --sftdp-metrics "$d/runs/sftdp_$r/metrics.jsonl"
           --sftdp-sft-metrics "$d/runs/sftdp_sft_$r/metrics.jsonl")
    ((cudnn)) && args+=(--llmc-cudnn-log "$d/llmc_cudnn_$r.log")
  done
  # the report's commands, with no path of the device machine: the build folders relative to the repo
  # (or the variable that moved them), the step's files under $D
  local at_llmc="${LLMC#"$ROOT"/}" at_build="${BUILD#"$ROOT"/}" at_cudnn="${LLMC_CUDNN#"$ROOT"/}"
  [[ $at_llmc == /* ]] && at_llmc='$SFTDP_LLMC_BUILD_DIR'
  [[ $at_build == /* ]] && at_build='$SFTDP_GPU_BUILD_DIR'
  [[ $at_cudnn == /* ]] && at_cudnn='$SFTDP_LLMC_CUDNN_BUILD_DIR'
  shown=(--command "# D = the step's folder llmc/ in the results archive; the rounds alternate which runs first"
         --command "$at_llmc/train_gpt2cu ${llmc[*]:1}")
  ((cudnn)) && shown+=(--command "$at_cudnn/train_gpt2cu ${llmc[*]:1}   # make ... USE_CUDNN=1")
  shown+=(
         --command "$at_build/sft_train $d/sft.yml ${keys[*]} run_name=sftdp_<round>"
         --command "$at_build/sft_train $d/sft.yml ${keys[*]} run_name=sftdp_sft_<round> train_files=$d/train_sft.h5")
  shown=("${shown[@]//$d/\$D}")
  x python3 "$ROOT/bench/llmc_compare.py" gpu-report "${args[@]}" --flops "$d/flops.txt" --B "$B" --T "$T" \
    --skip 5 "${shown[@]}" --out "$RES/gpu_vs_llmc_$(date -u +%Y%m%dT%H%M%SZ).md" && ((failed == 0))
}

# ---- issue 25: ZeRO-2/3 on the one GPU (NCCL at one rank: its collectives are copies) ----
zero_runs() {  # gpt2-124m bf16, B=8 x T=1024 rows per micro-step, zero_stage 0/2/3 at GA 1 and 4, bf16 weights 1/2/3
  local d="$RES/zero" z ga w run failed=0 steps="${SFTDP_ZERO_STEPS:-12}"
  mkdir -p "$d" && printf 'run_name: zero\n' >"$d/sft.yml"
  x python3 "$ROOT/bench/llmc_compare.py" data "$d" --rows $((8 * 4 * (steps + 1))) --T 1024 || return 1
  for ga in 1 4; do
    for z in 0 2 3 1w 2w 3w; do
      w=float32
      [[ $z == *w ]] && { ((ga == 4)) || continue; w=bfloat16; }
      run="z${z}_ga${ga}"
      # device memory in use, sampled every 100 ms while the run lasts: its peak beside the plan's figure
      ( while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) \
        >"$d/$run.mem" 2>/dev/null &
      local sampler=$!
      x with_libs timeout -k 5 120 "$BUILD/sft_train" "$d/sft.yml" model_name=gpt2-124m dtype=bfloat16 hardware=gpu \
        global_batch_size=$((8 * ga)) gradient_accumulation_steps="$ga" max_target_length=1024 steps="$steps" \
        train_files="$d/train.h5" enable_data_shuffling=false checkpoint_period=0 eval_interval=0 log_period=4 \
        zero_stage="${z%w}" weight_dtype="$w" base_output_directory="$d/runs" run_name="$run" >"$d/$run.log" 2>&1 ||
        { failed=1; echo "run $run failed"; }
      kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
      tail -n 4 "$d/$run.log"; rm -rf "$d/runs/$run/checkpoints"
    done
  done
  x /usr/bin/env python3 - "$d" "$steps" >"$RES/gpu_zero_$(date -u +%Y%m%dT%H%M%SZ).md" <<'PY' || failed=1
import json, os, re, statistics, sys
d, steps = sys.argv[1], int(sys.argv[2])
rows, ok = [], True
print("# ZeRO-2/3 on one GPU: gpt2-124m, dtype bfloat16, B=8 x T=1024 per micro-step\n")
print("One rank, so NCCL's reduce-scatters and all-gathers are device copies: what this measures is the cost of")
print("ZeRO's own work (gradient slots, accumulation into the shard, per-unit gathers and bf16 packing,")
print("the master shard's all-gather at stage 2), not communication. Median step time over steps 3..%d." % steps)
print("Rows 'w': weight_dtype bfloat16, bf16 parameters with fp32 masters in the shard (their loss is bf16(master)'s,")
print("so it may differ from stage 0's by more than fp32 rounding: bound 1e-3).\n")
print("| zero_stage | GA | ms/step | vs stage 0 | loss at the last step | vs stage 0 | peak device memory (MiB, nvidia-smi) | plan (this rank needs) |")
print("|---|--:|--:|--:|--:|--:|--:|---|")
for ga in (1, 4):
    base = None
    for z in ("0", "2", "3") + (("1w", "2w", "3w") if ga == 4 else ()):
        run = f"z{z}_ga{ga}"
        try:
            ms = [json.loads(l) for l in open(f"{d}/runs/{run}/metrics.jsonl")]
        except OSError:
            print(f"| {z} | {ga} | failed | | | | | |"); ok = False; continue
        t = statistics.median(m["step_time_s"] for m in ms[2:]) * 1e3
        loss = ms[-1]["loss"]
        mem = max((int(x) for x in open(f"{d}/{run}.mem").read().split() if x.isdigit()), default=0)
        plan = re.search(r"memory: this rank needs ([0-9.]+ [GM]iB)", open(f"{d}/{run}.log").read())
        if base is None: base = (t, loss)
        rel = abs(loss - base[1]) / base[1]
        ok &= rel <= (1e-3 if z.endswith("w") else 1e-4)
        print(f"| {z} | {ga} | {t:.1f} | {t / base[0]:.2f} | {loss:.6f} | {rel:.1e} | {mem} | {plan.group(1) if plan else '?'} |")
sys.exit(0 if ok else 1)
PY
  cat "$RES"/gpu_zero_*.md; ((failed == 0))
}

# ---- the wrapper: step NAME LIMIT_S FUNCTION ARGS... (step_bg: the same in the background) ----
SUMMARY=() FAILED=0
declare -A BG_PID=() BG_T0=()
limit_for() {  # limit_for LIMIT_S: what is left of it before the deadline (15 s kept back to pack the results)
  local left=$((DEADLINE - SECONDS - 15))
  echo $(($1 > left ? left : $1))
}
record() {  # record NAME T0 RC: the summary line; prints the log's tail
  local verdict
  case $3 in 0) verdict="ok     " ;; 124|137) verdict="TIMEOUT" ;; *) verdict="FAIL   " ;; esac
  (($3 == 0)) || FAILED=1
  SUMMARY+=("$verdict $1 ($((SECONDS - $2)) s$( (($3)) && echo ", exit $3"))")
  tail -n 3 "$RES/$1.log" >&2
  return "$3"
}
step() {
  local name="$1" limit t0=$SECONDS rc; limit=$(limit_for "$2"); shift 2
  if ((limit < 5)); then SUMMARY+=("SKIP    $name: no time left"); FAILED=1; return 1; fi
  echo "[gpu_check] $name (at most $limit s)" >&2
  STEP="$name" timeout -k 5 "$limit" bash "$SELF" _call "$@" >"$RES/$name.log" 2>&1; rc=$?
  record "$name" "$t0" "$rc"
}
step_bg() {  # started now, under its own timeout (which kills its process group); step_wait NAME collects it
  local name="$1" limit; limit=$(limit_for "$2"); shift 2
  if ((limit < 5)); then SUMMARY+=("SKIP    $name: no time left"); FAILED=1; BG_PID[$name]=none; return 1; fi
  echo "[gpu_check] $name (in the background, at most $limit s)" >&2
  STEP="$name" timeout -k 5 "$limit" bash "$SELF" _call "$@" >"$RES/$name.log" 2>&1 &
  BG_PID[$name]=$! BG_T0[$name]=$SECONDS
}
step_wait() {  # the status of step_bg NAME (once; 1 if it was skipped)
  local name="$1" pid="${BG_PID[$1]:-none}" rc
  case $pid in none) return 1 ;; done*) return "${pid#done}" ;; esac
  wait "$pid"; rc=$?
  BG_PID[$name]="done$rc"
  record "$name" "${BG_T0[$name]}" "$rc"
}

prepare() {  # shared by the modes; each step but `machine` needs the one before it
  step machine 30 machine
  step packages 120 packages && step configure 150 configure || return 1
  if [[ $MODE == profile ]]; then step build 180 build_profile; else step build 420 build; fi
}

main() {
  export MODE="$1" RES; local limit="${SFTDP_GPU_CHECK_LIMIT:-}"
  [[ -n $limit ]] || case $MODE in build-test) limit=510 ;; llmc-bench) limit=330 ;; zero-bench) limit=420 ;;
    profile) limit=270 ;; *) limit=390 ;; esac
  DEADLINE=$((SECONDS + limit))
  RES="${SFTDP_GPU_CHECK_RESULTS:-$ROOT/bench/results}/gpu_check_$(date -u +%Y%m%dT%H%M%SZ)_$MODE"
  mkdir -p "$RES"
  [[ $MODE == e2e-bench ]] && step_bg llmc_build "${SFTDP_LLMC_BUILD_LIMIT:-90}" llmc_build  # one nvcc, beside the steps below
  [[ $MODE == llmc-bench ]] && step_bg llmc_cudnn_build "${SFTDP_LLMC_CUDNN_BUILD_LIMIT:-200}" llmc_cudnn_build
  if ! prepare; then :
  elif [[ $MODE == profile ]]; then
    local entry
    for entry in "${PROFILE_STEPS[@]}"; do
      step "profile_${entry%%|*}" 60 profile_step "${entry%%|*}" && step "report_${entry%%|*}" 60 profile_report "${entry%%|*}"
    done
  elif [[ $MODE == build-test ]]; then
    step gpu_tests 240 gpu_tests
  elif [[ $MODE == llmc-bench ]]; then
    # the cuDNN build's failure leaves the comparison with llm.c's default build; both collected first
    step llmc_build "${SFTDP_LLMC_BUILD_LIMIT:-90}" llmc_build; local built=$?
    step_wait llmc_cudnn_build
    ((built == 0)) && step llmc_vs_sftdp 240 llmc_vs_sftdp cudnn
  elif [[ $MODE == zero-bench ]]; then
    step zero_runs 330 zero_runs
  elif step data 60 data; then
    step train_gpu 60 train gpu hardware=gpu; step train_gpu_again 60 train gpu_again hardware=gpu
    step train_cpu 90 train cpu hardware=cpu; step train_gpu_ga4 60 train gpu_ga4 hardware=gpu gradient_accumulation_steps=4
    step train_gpu_bf16 60 train gpu_bf16 hardware=gpu dtype=bfloat16
    step gpu_runs_bitwise_equal 20 compare gpu gpu_again 0
    step gpu_matches_cpu 20 compare gpu cpu 1e-3     # differences grow over the 30 steps
    step ga4_matches_ga1 20 compare gpu_ga4 gpu 1e-3
    step bf16_tracks_fp32 20 compare gpu_bf16 gpu 5e-2
    # issue 10: the Llama family (GQA, RoPE, SwiGLU, untied head) on the GPU against the CPU
    step train_llama_gpu 60 train llama_gpu hardware=gpu model_name=llama-tiny tie_word_embeddings=false
    step train_llama_cpu 90 train llama_cpu hardware=cpu model_name=llama-tiny tie_word_embeddings=false
    step llama_gpu_matches_cpu 20 compare llama_gpu llama_cpu 1e-3
    step two_ranks_one_gpu 90 two_ranks_one_gpu
    step_wait llmc_build  # collected before the timings: no compiler on the CPU while they run
    step bench_gpu_step 240 bench
    step_wait llmc_build && step llmc_vs_sftdp 200 llmc_vs_sftdp
  fi
  [[ $MODE == e2e-bench ]] && step_wait llmc_build  # still collected when a step above stopped the rest
  [[ $MODE == llmc-bench ]] && step_wait llmc_cudnn_build
  printf '%s\n' "${SUMMARY[@]}" >"$RES/summary.txt"
  local out="${OUT:-$(dirname "$RES")}"; mkdir -p "$out"
  tar -czf "$out/gpu_check_$MODE.tar.gz" -C "$(dirname "$RES")" --exclude='*.h5' --exclude='*.bin' "$(basename "$RES")"
  echo "[gpu_check] $out/gpu_check_$MODE.tar.gz; results in $RES" >&2
  cat "$RES/summary.txt"
  return $FAILED
}

# shellcheck source=/dev/null
case "${1:-}" in
  build-test|e2e-bench|llmc-bench|zero-bench|profile) main "$1" ;;
  records) STEP=records records ;;  # here, not on the device: no results folder, no archive
  _call) shift; [[ -f $PKG/env.sh ]] && source "$PKG/env.sh"; "$@" ;;
  *) echo "usage: bash scripts/gpu_check.sh build-test|e2e-bench|llmc-bench|zero-bench|profile|records   (see the header of this file)" >&2; exit 2 ;;
esac
