# shellcheck shell=bash
# slurm/launch.sh — the part the three batch scripts share; they source it (it runs nothing itself).
# It checks the arguments and the binary, sets OMP_NUM_THREADS = --cpus-per-task, says where the
# log, metrics and checkpoints go, runs `srun --mpi=pmix --kill-on-bad-exit=1 sft_train`, passes
# USR1/TERM on to every task, turns srun's silent launch failures into exit 1, and requeues the job
# after a clean stop. slurm/README.md has the why of each. Use:
#   sftdp_args SCRIPT_NAME HARDWARE "$@"      CONFIG, OVERRIDES (hardware=HARDWARE; a user's pair wins)
#   sftdp_run "HEADER" [srun options ...]     prints the header lines, runs the step; exits its status

sftdp_args() {
  local name="$1" hardware="$2"; shift 2
  if (($# < 1)); then
    echo "usage: sbatch slurm/$name CONFIG.yml [key=value ...]" >&2
    exit 2
  fi
  CONFIG="$1"; shift
  OVERRIDES=(hardware="$hardware" "$@")  # later pairs win: a user's hardware=... still applies
  SFTDP_TRAIN="${SFTDP_TRAIN:-$(command -v sft_train || echo "${SLURM_SUBMIT_DIR:-$PWD}/build/sft_train")}"
  [[ -x $SFTDP_TRAIN ]] || { echo "error: sft_train not found at '$SFTDP_TRAIN' (set SFTDP_TRAIN)" >&2; exit 2; }
  [[ -r $CONFIG ]] || { echo "error: $CONFIG: cannot read the config file" >&2; exit 2; }
  export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
  export OPENBLAS_NUM_THREADS="$OMP_NUM_THREADS"
}

# Where things go: the last key=value override, else the config's top-level line, else the default.
sftdp_config_value() {
  local key="$1" default="$2" value="" pair
  for pair in "${OVERRIDES[@]}"; do [[ $pair == "$key="* ]] && value="${pair#*=}"; done
  [[ -n $value ]] || value="$(sed -n -E "s/^$key:[[:space:]]*([^#]*).*$/\1/p" "$CONFIG" | tail -n 1)"
  value="$(echo "$value" | sed -E "s/[[:space:]]+$//; s/^[\"'](.*)[\"']$/\1/")"
  echo "${value:-$default}"
}

# With --signal=B:USR1@120 Slurm signals the batch shell only; pass the signal on to every task.
# sft_train checkpoints at the next step boundary and exits 0; then sftdp_run requeues the job.
sftdp_forward() {
  SFTDP_STOP_SIGNAL="$1"
  echo "sftdp: SIG$1 received; asking sft_train to checkpoint at the next step boundary"
  # scancel without --batch signals the tasks of the job steps on every node, not this shell and
  # not srun (srun answers a TERM by SIGKILLing its tasks; it forwards USR1 as it is).
  timeout 10 scancel --signal="$1" "$SLURM_JOB_ID" 2>/dev/null \
    || { [[ $1 == USR1 ]] && kill -USR1 "$SFTDP_SRUN_PID" 2>/dev/null; }
}

sftdp_run() {
  local header="$1" run_dir job_info log err_log err_offset status
  shift
  run_dir="$(sftdp_config_value base_output_directory out)/$(sftdp_config_value run_name sft)"
  [[ $run_dir == /* ]] || run_dir="$PWD/$run_dir"
  job_info="$(scontrol show job -o "${SLURM_JOB_ID:-0}" 2>/dev/null)"
  log="$(grep -o 'StdOut=[^ ]*' <<<"$job_info" | cut -d= -f2)"
  err_log="$(grep -o 'StdErr=[^ ]*' <<<"$job_info" | cut -d= -f2)"
  echo "sftdp: job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST:-?}:" \
       "$header; $SFTDP_TRAIN"
  echo "sftdp: log ${log:-<see --output>}; metrics $run_dir/metrics.jsonl; checkpoints $run_dir/checkpoints/"

  SFTDP_STOP_SIGNAL="" SFTDP_SRUN_PID=""
  err_offset="$(stat -c %s "$err_log" 2>/dev/null || echo 0)"
  trap 'sftdp_forward USR1' USR1
  trap 'sftdp_forward TERM' TERM
  # Every PMIx fence of the step on Slurm's ring algorithm. By default mpi/pmix runs a fence that
  # carries no data (Open MPI's barrier at the end of MPI_Init) on its tree, and on Slurm 22.05 that
  # tree released ranks before every rank had entered it (51 of 60 two-node start-ups). A rank
  # released early sends its first message to a rank still inside MPI_Init's modex fence, whose
  # Open MPI has no receive handler yet: SIGSEGV at address 0 (about 1 start-up in 50; slurm/README.md).
  export SLURM_PMIX_FENCE="${SLURM_PMIX_FENCE:-ring}"
  srun --mpi=pmix --kill-on-bad-exit=1 "$@" "$SFTDP_TRAIN" "$CONFIG" "${OVERRIDES[@]}" &
  SFTDP_SRUN_PID=$!
  while :; do  # a trapped signal interrupts wait; wait again until srun has really ended
    wait "$SFTDP_SRUN_PID"
    kill -0 "$SFTDP_SRUN_PID" 2>/dev/null || break
  done
  wait "$SFTDP_SRUN_PID"; status=$?  # bash keeps an ended child's status: this one is srun's own
  # Slurm 22.05's srun exits 0 when it could not launch the tasks (an MPI plugin failing, say).
  if ((status == 0)) && [[ -f $err_log ]] && tail -c +"$((err_offset + 1))" "$err_log" | grep -q "launch failed"; then
    echo "sftdp: srun could not launch the tasks (see above)" >&2
    status=1
  fi

  if [[ $SFTDP_STOP_SIGNAL == USR1 && $status -eq 0 && ${SFTDP_REQUEUE:-1} == 1 ]]; then
    echo "sftdp: checkpoint written; requeueing job $SLURM_JOB_ID (it resumes from the checkpoint)"
    scontrol requeue "$SLURM_JOB_ID" && exit 0
    echo "sftdp: scontrol requeue failed; resubmit the same command to continue" >&2
  fi
  echo "sftdp: sft_train ended with status $status"
  exit "$status"
}
