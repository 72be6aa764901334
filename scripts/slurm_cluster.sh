#!/usr/bin/env bash
# scripts/slurm_cluster.sh — a private Slurm cluster (Debian's munge + slurmctld + slurmd) on this
# machine, for the test suite and for trying the slurm/ batch scripts. Run as root.
#   start [--nodes N]  install munge/slurm-wlm with apt-get if missing (exit 3 if that fails), start
#           the daemons under setsid, wait until every node is idle; prints the state dir, writes $DIR/env.
#           N = 1 (default): one node, this machine itself. N >= 2: N network-namespace hosts node1..nodeN
#           (scripts/netns_hosts.sh: own address, hostname and TmpFS each, one bridge, no way out), one
#           slurmd on each; slurmctld and munged on this machine (the head node, on the bridge). Ranks
#           on different hosts talk over TCP: $DIR/env sets Open MPI's btl to self,vader,tcp on the
#           bridge's subnet. Exit 3 also where the kernel allows no namespaces.
#   stop    cancel jobs, stop the daemons by their recorded PIDs, delete the hosts by name
#   status  exit 0 if up, 4 if not
#   Faults, on a multi-node cluster (for the tests): cut NODE | heal NODE (its link down / up),
#   kill NODE (SIGKILL every process of that host, its slurmd included), revive NODE (a reboot:
#   what still runs there is killed, a fresh slurmd registers the node; waits until it is idle).
#   (exit 2: the state dir is out of reach of the munge user, e.g. under a 0700 directory; a bad argument)
# Idempotent. State (config, munge key and socket, spool, logs, PIDs) in $SFTDP_SLURM_DIR
# (default /tmp/sftdp-slurm). Clients: `source $DIR/env` (sets SLURM_CONF). Every wait is bounded.
set -euo pipefail

DIR="${SFTDP_SLURM_DIR:-${TMPDIR:-/tmp}/sftdp-slurm}"
CPUS="${SFTDP_SLURM_CPUS:-4}"          # advertised CPUs (config_overrides): more tasks than cores fit
FAKE_GPUS="${SFTDP_SLURM_FAKE_GPUS:-0}"  # >0: advertise that many fake GPUs (GRES on /dev/null clones)
PACKAGES=(munge slurmctld slurmd slurm-client)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/netns_hosts.sh
source "$HERE/netns_hosts.sh"

say() { echo "slurm_cluster: $*"; }
die() { echo "slurm_cluster: error: $1" >&2; exit "${2:-1}"; }

# --- PIDs: recorded at start, checked against /proc/PID/comm so a recycled PID is never signalled ---
alive() {  # alive PID: exists and is not a zombie
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ ${stat##*) } != Z* ]]
}

pid_of() {  # pid_of NAME -> prints the PID if that daemon is alive (NAME: munged, slurmd-node2, ...)
  local f="$DIR/pids/$1.pid" pid
  [[ -s $f ]] || return 1
  pid="$(<"$f")"
  [[ -r /proc/$pid/comm && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "${1%%-*}" ]] && alive "$pid" || return 1
  echo "$pid"
}

# The cluster's size: recorded at start (N >= 2: namespace hosts); 1 before any start.
node_count() { if [[ -s $DIR/node_count ]]; then cat "$DIR/node_count"; else echo 1; fi; }

daemons() {  # in stop order
  local n i
  n="$(node_count)"
  if ((n == 1)); then echo slurmd; else for ((i = 1; i <= n; i++)); do echo "slurmd-$(hosts_name "$i")"; done; fi
  echo slurmctld munged
}

# Every node answers and is usable (idle, mixed or allocated).
slurm_responds() {
  [[ -f $DIR/slurm.conf ]] || return 1
  local states
  states="$(SLURM_CONF="$DIR/slurm.conf" timeout 5 sinfo -h -N -o %T 2>/dev/null)" || return 1
  [[ $(grep -Ec '^(idle|mixed|allocated)$' <<<"$states") -eq $(node_count) ]]
}

is_up() {
  local d
  for d in $(daemons); do pid_of "$d" >/dev/null || return 1; done
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
  # Another cluster of the suite may be installing at the same time: wait for dpkg's lock.
  local apt=(env DEBIAN_FRONTEND=noninteractive timeout 300 apt-get -o DPkg::Lock::Timeout=240 install -y -qq
             --no-install-recommends)
  if ! "${apt[@]}" "${PACKAGES[@]}" >"$DIR/log/apt.log" 2>&1; then
    timeout 300 apt-get -o DPkg::Lock::Timeout=240 update -qq >>"$DIR/log/apt.log" 2>&1 || true
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
  local n host ctld_host ctld_port slurmd_port gres="" first_job_id i nodes=() timeouts="" kill_wait=30
  n="$(node_count)"
  host="$(hostname -s)"
  first_job_id=$(( (RANDOM * 32768 + RANDOM) % 60000000 + 1000 ))
  ctld_port="$(free_port)"
  slurmd_port="$(free_port)"
  [[ $ctld_port != "$slurmd_port" ]] || slurmd_port=$((ctld_port + 1))
  if ((n == 1)); then
    ctld_host="$host"
    nodes=("NodeName=$host")
  else
    # slurmctld on the head node (this machine), reached at its bridge address; a node per host.
    ctld_host="$host($(hosts_head_addr))"
    for ((i = 1; i <= n; i++)); do nodes+=("NodeName=$(hosts_name "$i") NodeAddr=$(hosts_addr "$i")"); done
    # A node that stops answering is DOWN after 10 s (Slurm's default: 300 s); messages to an
    # unreachable node give up after 5 s. After a task fails, srun waits KillWait + 2 s for the
    # tasks it cannot reach (a cut link), then ends the step: 10 s here (Slurm's default: 30 s).
    timeouts=$'SlurmdTimeout=10\nMessageTimeout=5\nTCPTimeout=2'
    kill_wait=10
  fi
  if ((FAKE_GPUS > 0)); then
    : >"$DIR/gres.conf"
    for ((i = 0; i < FAKE_GPUS; i++)); do
      rm -f "$DIR/dev/gpu$i"
      mknod -m 666 "$DIR/dev/gpu$i" c 1 3  # a /dev/null clone: Slurm drops count-only GPUs
      echo "Name=gpu File=$DIR/dev/gpu$i" >>"$DIR/gres.conf"  # every node has these
    done
    gres=" Gres=gpu:$FAKE_GPUS"
  fi
  cat >"$DIR/slurm.conf" <<EOF
# Written by scripts/slurm_cluster.sh: $n node(s), everything under $DIR.
ClusterName=sftdp
# Job ids name PMIx namespaces and Open MPI's shared-memory files: two clusters on one machine
# must not both count from 1, or their job 2s share those files.
FirstJobId=$first_job_id
SlurmctldHost=$ctld_host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long (+1 s) before it may start again (default 120 s);
# starting it sooner (scontrol update StartTime=now) races the revoked credential of its previous
# run ("Job credential revoked", seen here) and the job fails.
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=10
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
KillWait=$kill_wait
MailProg=/bin/true
$timeouts
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
TmpFS=$DIR/tmp
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
$( ((FAKE_GPUS > 0)) && echo "GresTypes=gpu")
$(for node in "${nodes[@]}"; do echo "$node CPUs=$CPUS RealMemory=1000$gres State=UNKNOWN"; done)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

# $DIR/env: what a client of this cluster sources. Multi-node: Open MPI's point-to-point between
# hosts over TCP on the bridge's subnet (shared memory only within a host), and NCCL's sockets on
# the hosts' interface (each host's link is eth0 in its namespace).
write_env() {
  {
    echo "export SLURM_CONF=$DIR/slurm.conf"
    if (($(node_count) > 1)); then
      echo "export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=$HOSTS_NET.0/24"
      echo "export NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1"
    fi
  } >"$DIR/env"
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
  local n="$1" i
  if is_up && (($(node_count) == n)); then
    say "already running; state in $DIR"
    cat "$DIR/env"
    return 0
  fi
  stop_daemons quiet  # leftovers of a half-started cluster
  [[ -f $DIR/slurm.conf ]] && stop_stray_jobs
  hosts_destroy quiet
  install -d -m 755 "$DIR" "$DIR/log" "$DIR/pids" "$DIR/run" "$DIR/state" "$DIR/spool" "$DIR/dev"
  install -d -m 1777 "$DIR/tmp"  # TmpFS: mpi/pmix's per-step dirs, named by job id, stay per cluster
  install_slurm
  ((n == 1)) || hosts_check
  install -d -m 755 -o munge -g munge "$DIR/munge"  # munged: socket dir must be o+x
  check_munge_can_reach
  if [[ ! -s $DIR/munge/munge.key ]]; then
    head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
    chown munge:munge "$DIR/munge/munge.key"
    chmod 600 "$DIR/munge/munge.key"
  fi
  echo "$n" >"$DIR/node_count"
  ((n == 1)) || { hosts_create "$n" && say "$n network-namespace hosts on bridge $(hosts_bridge) ($HOSTS_NET.0/24)"; }
  # One munged for every host: its socket is on the shared file system, as the key is on a cluster.
  spawn munged setpriv --reuid=munge --regid=munge --init-groups \
    munged -F --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed" \
    --log-file="$DIR/munge/munged.log"
  wait_for 15 munged "munged is up" munge_works || die "munged did not answer within 15 s (see $DIR/log/munged.out)"

  write_config
  export SLURM_CONF="$DIR/slurm.conf"
  spawn slurmctld slurmctld -D -i -f "$SLURM_CONF"
  wait_for 20 slurmctld "slurmctld is up" timeout 5 scontrol ping || die_daemon slurmctld "did not answer within 20 s"
  if ((n == 1)); then
    spawn slurmd slurmd -D -f "$SLURM_CONF"
  else
    for ((i = 1; i <= n; i++)); do spawn_node_slurmd "$i"; done
  fi
  wait_for 30 slurmctld "$n node(s) idle: $(node_list)" slurm_responds \
    || die "not every node became idle within 30 s (see $DIR/log/slurmd*.log): $(node_states)"
  write_env
  say "running; state in $DIR; clients: source $DIR/env"
  cat "$DIR/env"
}

node_list() { SLURM_CONF="$DIR/slurm.conf" timeout 5 sinfo -h -o %N 2>/dev/null || true; }
node_states() { SLURM_CONF="$DIR/slurm.conf" timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | paste -sd, || true; }

# A daemon that failed to start: the reason from its log where it is one we know.
die_daemon() {
  local name="$1" what="$2" log="$DIR/log/$1.log" port
  if grep -q "Address already in use" "$log" "$DIR/log/$name.out" 2>/dev/null; then
    port="$(grep -o "Port=[0-9]*" "$DIR/slurm.conf" | head -1)"
    die "$name $what: its port is taken by another process ($port in $DIR/slurm.conf); run start again for new ports"
  fi
  die "$name $what (see $log)"
}

spawn_node_slurmd() {  # slurmd on host I, in its namespaces, as node I
  local i="$1" name
  name="$(hosts_name "$i")"
  install -d "$DIR/spool/$name"
  # shellcheck disable=SC2016
  spawn "slurmd-$name" bash -c 'source "$1"; DIR="$2"; hosts_load; hosts_exec "$3" slurmd -D -N "$4" -f "$5"' \
    sh "$HERE/netns_hosts.sh" "$DIR" "$i" "$name" "$DIR/slurm.conf"
}

node_index() {  # node_index NAME -> I, for a node of this multi-node cluster
  local n i
  n="$(node_count)"
  for ((i = 1; i <= n; i++)); do [[ $1 == "$(hosts_name "$i")" ]] && { echo "$i"; return 0; }; done
  die "no node '$1' in this cluster (node1..node$n)" 2
}

fault() {  # fault cut|heal|kill|revive NODE
  local action="$1" node="$2" i
  if (($(node_count) < 2)) || ! hosts_load; then
    die "'$action' needs a multi-node cluster (start --nodes N, N >= 2) in $DIR" 2
  fi
  i="$(node_index "$node")" || exit $?
  case "$action" in
    cut) hosts_link "$i" down && say "$node: link down" ;;
    heal) hosts_link "$i" up && say "$node: link up" ;;
    kill) hosts_kill "$i" && say "$node: every process killed (slurmd included)" ;;
    revive)  # a reboot: whatever still runs there goes, then a fresh slurmd registers the node
      hosts_kill "$i"
      local deadline=$((SECONDS + 10))
      while [[ -n "$(ip netns pids "$(hosts_ns "$i")")" ]] && ((SECONDS < deadline)); do sleep 0.1; done
      # A reboot empties /tmp: a requeued job (same id) must not find its old PMIx step directory.
      find "$DIR/nodes/$node/tmp" -mindepth 1 -delete
      spawn_node_slurmd "$i"
      wait_for 30 "slurmd-$node" "$node is back" slurm_responds \
        || die "$node did not become idle within 30 s: $(node_states)"
      ;;
  esac
}

stop_daemons() {
  local quiet="${1:-}" d pid
  for d in $(daemons); do
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
  hosts_destroy
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

usage() {
  echo "usage: $0 start [--nodes N] | stop | status | cut|heal|kill|revive NODE" >&2
  echo "       (state in \$SFTDP_SLURM_DIR, default /tmp/sftdp-slurm)" >&2
  exit 2
}

case "${1:-}" in
  start)
    node_arg=1
    if (($# >= 2)); then
      [[ $2 == --nodes && $# -eq 3 ]] || usage
      [[ $3 =~ ^[1-9][0-9]?$ ]] || die "--nodes: expected 1 to 99 hosts, got '$3'" 2
      node_arg="$3"
    fi
    start "$node_arg" ;;
  stop) stop ;;
  status) status ;;
  cut | heal | kill | revive) (($# == 2)) || usage; fault "$1" "$2" ;;
  *) usage ;;
esac
