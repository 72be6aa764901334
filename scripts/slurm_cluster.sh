#!/usr/bin/env bash
# scripts/slurm_cluster.sh — a private single-node Slurm cluster (Debian's munge + slurmctld + slurmd)
# on this machine, for the test suite and for trying the slurm/ batch scripts. Run as root.
#   start   install munge/slurm-wlm with apt-get if missing (exit 3 if that fails), start the daemons
#           under setsid, wait until the node is idle; prints the state dir and writes $DIR/env
#   stop    cancel jobs, stop the daemons by their recorded PIDs     status   exit 0 if up, 4 if not
#   (exit 2: the state dir is out of reach of the munge user, e.g. under a 0700 directory)
# Idempotent. State (config, munge key and socket, spool, logs, PIDs) in $SFTDP_SLURM_DIR
# (default /tmp/sftdp-slurm). Clients: `source $DIR/env` (sets SLURM_CONF). Every wait is bounded.
set -euo pipefail

DIR="${SFTDP_SLURM_DIR:-${TMPDIR:-/tmp}/sftdp-slurm}"
CPUS="${SFTDP_SLURM_CPUS:-4}"          # advertised CPUs (config_overrides): more tasks than cores fit
FAKE_GPUS="${SFTDP_SLURM_FAKE_GPUS:-0}"  # >0: advertise that many fake GPUs (GRES on /dev/null clones)
PACKAGES=(munge slurmctld slurmd slurm-client)
DAEMONS=(slurmd slurmctld munged)      # stop order

say() { echo "slurm_cluster: $*"; }
die() { echo "slurm_cluster: error: $1" >&2; exit "${2:-1}"; }

# --- PIDs: recorded at start, checked against /proc/PID/comm so a recycled PID is never signalled ---
alive() {  # alive PID: exists and is not a zombie
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ ${stat##*) } != Z* ]]
}

pid_of() {  # pid_of NAME -> prints the PID if that daemon is alive
  local f="$DIR/pids/$1.pid" pid
  [[ -s $f ]] || return 1
  pid="$(<"$f")"
  [[ -r /proc/$pid/comm && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$1" ]] && alive "$pid" || return 1
  echo "$pid"
}

slurm_responds() {
  [[ -f $DIR/slurm.conf ]] && SLURM_CONF="$DIR/slurm.conf" timeout 5 sinfo -h -N -o %T 2>/dev/null \
    | grep -Eq '^(idle|mixed|allocated)'
}

is_up() {
  local d
  for d in "${DAEMONS[@]}"; do pid_of "$d" >/dev/null || return 1; done
  slurm_responds
}

# --- installation ---
installed() {
  local c
  for c in munged munge unmunge slurmctld slurmd sbatch srun squeue scontrol sinfo; do
    command -v "$c" >/dev/null 2>&1 || [[ -x /usr/sbin/$c ]] || return 1
  done
  compgen -G "/usr/lib/*/slurm-wlm/mpi_pmix*.so" >/dev/null
}

install_slurm() {
  installed && return 0
  [[ $(id -u) -eq 0 ]] || die "Slurm is not installed and installing it needs root" 3
  say "installing ${PACKAGES[*]} with apt-get"
  local apt=(env DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends)
  if ! "${apt[@]}" "${PACKAGES[@]}" >"$DIR/log/apt.log" 2>&1; then
    timeout 300 apt-get update -qq >>"$DIR/log/apt.log" 2>&1 || true
    "${apt[@]}" "${PACKAGES[@]}" >>"$DIR/log/apt.log" 2>&1 \
      || { tail -5 "$DIR/log/apt.log" >&2; die "apt-get could not install ${PACKAGES[*]}" 3; }
  fi
  installed || die "installed ${PACKAGES[*]} but a command or the pmix plugin is missing" 3
}

# --- configuration ---
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

write_config() {
  local host ctld_port slurmd_port gres_node="" first_job_id
  host="$(hostname -s)"
  first_job_id=$(( (RANDOM * 32768 + RANDOM) % 60000000 + 1000 ))
  ctld_port="$(free_port)"
  slurmd_port="$(free_port)"
  [[ $ctld_port != "$slurmd_port" ]] || slurmd_port=$((ctld_port + 1))
  if ((FAKE_GPUS > 0)); then
    : >"$DIR/gres.conf"
    local i
    for ((i = 0; i < FAKE_GPUS; i++)); do
      rm -f "$DIR/dev/gpu$i"
      mknod -m 666 "$DIR/dev/gpu$i" c 1 3  # a /dev/null clone: Slurm drops count-only GPUs
      echo "NodeName=$host Name=gpu File=$DIR/dev/gpu$i" >>"$DIR/gres.conf"
    done
    gres_node=" Gres=gpu:$FAKE_GPUS"
  fi
  cat >"$DIR/slurm.conf" <<EOF
# Written by scripts/slurm_cluster.sh: one node, everything under $DIR.
ClusterName=sftdp
# Job ids name PMIx namespaces and Open MPI's shared-memory files: two clusters on one machine
# must not both count from 1, or their job 2s share those files.
FirstJobId=$first_job_id
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=30
MailProg=/bin/true
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
TmpFS=$DIR/tmp
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
$( ((FAKE_GPUS > 0)) && echo "GresTypes=gpu")
NodeName=$host CPUs=$CPUS RealMemory=1000$gres_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

# --- daemons ---
spawn() {  # spawn NAME CMD... : starts CMD in its own session; records the PID
  local name="$1"; shift
  setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  echo $! >"$DIR/pids/$name.pid"
}

wait_for() {  # wait_for SECONDS DAEMON WHAT CMD... : polls CMD every 0.2 s while DAEMON lives
  local limit="$1" daemon="$2" what="$3"; shift 3
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    alive "$(<"$DIR/pids/$daemon.pid")" || { echo "slurm_cluster: $daemon exited" >&2; return 1; }
    sleep 0.2
  done
  say "$what"
}

# munged runs as the munge user and must reach its key and socket under $DIR. Where a directory on
# the way is closed to it (a 0700 temp dir, say), say which, instead of "munged did not answer".
check_munge_can_reach() {
  local rest p="" part mode owner
  rest="$(realpath -m "$DIR/munge")"; rest="${rest#/}"
  while [[ -n $rest ]]; do
    part="${rest%%/*}"
    if [[ $rest == */* ]]; then rest="${rest#*/}"; else rest=""; fi
    p+="/$part"
    setpriv --reuid=munge --regid=munge --init-groups test -x "$p" 2>/dev/null && continue
    mode="$(stat -c %a "$p")" owner="$(stat -c %U "$p")"
    die "the state dir $DIR is out of reach of user munge (munged runs as munge): it cannot enter $p (mode $mode, owner $owner); chmod o+x $p, or set SFTDP_SLURM_DIR to a directory under a traversable path (default /tmp/sftdp-slurm)" 2
  done
}

munge_works() {
  munge -n -S "$DIR/munge/munge.socket" | unmunge -S "$DIR/munge/munge.socket"
}

start() {
  if is_up; then
    say "already running; state in $DIR"
    cat "$DIR/env"
    return 0
  fi
  stop_daemons quiet  # leftovers of a half-started cluster
  [[ -f $DIR/slurm.conf ]] && stop_stray_jobs
  install -d -m 755 "$DIR" "$DIR/log" "$DIR/pids" "$DIR/run" "$DIR/state" "$DIR/spool" "$DIR/dev"
  install -d -m 1777 "$DIR/tmp"  # TmpFS: mpi/pmix's per-step dirs, named by job id, stay per cluster
  install_slurm
  install -d -m 755 -o munge -g munge "$DIR/munge"  # munged: socket dir must be o+x
  check_munge_can_reach
  if [[ ! -s $DIR/munge/munge.key ]]; then
    head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
    chown munge:munge "$DIR/munge/munge.key"
    chmod 600 "$DIR/munge/munge.key"
  fi
  spawn munged setpriv --reuid=munge --regid=munge --init-groups \
    munged -F --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed" \
    --log-file="$DIR/munge/munged.log"
  wait_for 15 munged "munged is up" munge_works || die "munged did not answer within 15 s (see $DIR/log/munged.out)"

  write_config
  export SLURM_CONF="$DIR/slurm.conf"
  spawn slurmctld slurmctld -D -i -f "$SLURM_CONF"
  wait_for 20 slurmctld "slurmctld is up" timeout 5 scontrol ping || die "slurmctld did not answer within 20 s (see $DIR/log/slurmctld.log)"
  spawn slurmd slurmd -D -f "$SLURM_CONF"
  wait_for 30 slurmd "node $(hostname -s) is idle" slurm_responds \
    || die "the node did not become idle within 30 s (see $DIR/log/slurmd.log)"
  echo "export SLURM_CONF=$SLURM_CONF" >"$DIR/env"
  say "running; state in $DIR; clients: source $DIR/env"
  cat "$DIR/env"
}

stop_daemons() {
  local quiet="${1:-}" d pid
  for d in "${DAEMONS[@]}"; do
    pid="$(pid_of "$d")" || { rm -f "$DIR/pids/$d.pid"; continue; }
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$DIR/pids/$d.pid"
    [[ -n $quiet ]] || say "stopped $d (pid $pid)"
  done
}

# Job processes left behind when a job could not end before the daemons stopped: slurmstepd
# inherits SLURM_CONF from our slurmd, and the tasks and batch shells run below it.
stray_job_pids() {
  local step
  for step in $(pgrep -x slurmstepd); do
    tr '\0' '\n' 2>/dev/null <"/proc/$step/environ" | grep -qx "SLURM_CONF=$DIR/slurm.conf" || continue
    echo "$step"
    descendants "$step"
  done
}

descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1"); do echo "$child"; descendants "$child"; done
}

stop_stray_jobs() {
  local pids=() pid
  mapfile -t pids < <(stray_job_pids)
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 5))
  for pid in "${pids[@]}"; do
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  done
  say "stopped ${#pids[@]} job process(es) left behind: ${pids[*]}"
}

stop() {
  if [[ -f $DIR/slurm.conf ]] && pid_of slurmctld >/dev/null; then
    export SLURM_CONF="$DIR/slurm.conf"
    local jobs
    jobs="$(timeout 5 squeue -h -o %i 2>/dev/null || true)"
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      timeout 5 scancel $jobs 2>/dev/null || true
      local deadline=$((SECONDS + 40))  # KillWait (30 s) bounds a job's end
      while [[ -n "$(timeout 5 squeue -h -o %i 2>/dev/null || true)" ]] && ((SECONDS < deadline)); do
        sleep 0.5
      done
    fi
  fi
  stop_daemons
  stop_stray_jobs
  rm -f "$DIR/env"
  say "stopped; state left in $DIR"
}

status() {
  if is_up; then
    say "running; state in $DIR"
    cat "$DIR/env"
    SLURM_CONF="$DIR/slurm.conf" timeout 5 sinfo || true
    return 0
  fi
  say "not running (state dir $DIR)"
  return 4
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status   (state in \$SFTDP_SLURM_DIR, default /tmp/sftdp-slurm)" >&2; exit 2 ;;
esac
