# shellcheck shell=bash
# scripts/netns_hosts.sh — N "hosts" on this machine for scripts/slurm_cluster.sh --nodes N (it sources
# this file; it runs nothing itself). Each host is a network namespace with its own address, and every
# process started on it (hosts_exec) also gets its own hostname (a UTS namespace) and its own mount
# namespace, in which two directories are host-private: $DIR/tmp (Slurm's TmpFS, PMIx's per-step files)
# and $DIR/local (node-local scratch). Everything else is the shared file system, as on a cluster.
# Links: one veth pair per host on one bridge with no uplink, no default route, no NAT; the bridge holds
# the head node's address (the root namespace, where slurmctld runs). Names carry a tag made from the
# state dir, so two clusters on one machine do not meet; teardown deletes by those names.
#   hosts_check             exit 3 with a reason where namespaces or iproute2 are missing
#   hosts_create N          namespaces, bridge, addresses, /etc/netns/NAME/hosts; writes $DIR/hosts.env
#   hosts_load              reads $DIR/hosts.env (HOSTS_TAG, HOSTS_NET, HOSTS_N) if it is there
#   hosts_exec I CMD...     runs CMD on host I (exec: the PID stays the caller's)
#   hosts_link I up|down    sets host I's link (its veth on the bridge) up or down: a cut cable
#   hosts_kill I            SIGKILLs every process of host I: a node that died
#   hosts_destroy           kills what runs in the namespaces, deletes them, the bridge and /etc/netns

hosts_name() { echo "node$1"; }                          # hostname and Slurm NodeName of host I
hosts_ns() { echo "sftdp-$HOSTS_TAG-node$1"; }            # its network namespace
hosts_veth() { echo "sd${HOSTS_TAG}h$1"; }                # its link's root-side end (<= 15 chars)
hosts_bridge() { echo "sd${HOSTS_TAG}br"; }
hosts_addr() { echo "$HOSTS_NET.$((10 + $1))"; }          # host I's address; the head node is .1
hosts_head_addr() { echo "$HOSTS_NET.1"; }

hosts_check() {
  command -v ip >/dev/null && command -v unshare >/dev/null && command -v nsenter >/dev/null \
    || die "network-namespace hosts need iproute2's ip and util-linux's unshare and nsenter" 3
  [[ $(id -u) -eq 0 ]] || die "network-namespace hosts need root (ip netns add)" 3
  local probe="sftdp-probe-$$" err
  if ! err="$(ip netns add "$probe" 2>&1)"; then
    die "this kernel or container does not allow network namespaces (ip netns add: $err)" 3
  fi
  if ! err="$(nsenter --net="/run/netns/$probe" unshare --uts --mount true 2>&1)"; then
    ip netns del "$probe" 2>/dev/null
    die "this kernel or container does not allow UTS/mount namespaces (unshare --uts --mount: $err)" 3
  fi
  ip netns del "$probe"
}

hosts_load() {
  # shellcheck disable=SC1091
  [[ -f $DIR/hosts.env ]] && source "$DIR/hosts.env"
  [[ -n ${HOSTS_TAG:-} ]]
}

# The first 10.X.Y.0/24 that no interface or route of this machine uses, starting from the tag's.
hosts_pick_net() {
  local x=$((16#${HOSTS_TAG:0:2} % 200 + 20)) y=$((16#${HOSTS_TAG:2:2})) tries
  for ((tries = 0; tries < 256; tries++)); do
    if ! ip -4 route show table all | grep -q "^\(local \|broadcast \)\?10\.$x\.$y\." \
        && ! ip -4 addr show | grep -q "inet 10\.$x\.$y\."; then
      echo "10.$x.$y"
      return 0
    fi
    y=$(((y + 1) % 256))
  done
  die "no free 10.$x.*.0/24 subnet for the hosts' bridge" 1
}

hosts_create() {
  local n="$1" i ns veth br
  HOSTS_TAG="$(printf '%s' "$(realpath -m "$DIR")" | md5sum | cut -c1-6)"
  HOSTS_N="$n"
  hosts_destroy quiet  # what a crashed run of this cluster left
  HOSTS_NET="$(hosts_pick_net)"
  printf 'HOSTS_TAG=%s\nHOSTS_NET=%s\nHOSTS_N=%s\n' "$HOSTS_TAG" "$HOSTS_NET" "$HOSTS_N" >"$DIR/hosts.env"
  br="$(hosts_bridge)"
  ip link add "$br" type bridge
  ip addr add "$(hosts_head_addr)/24" dev "$br"
  ip link set "$br" up
  {
    echo "127.0.0.1 localhost"
    echo "$(hosts_head_addr) $(hostname -s)"
    for ((i = 1; i <= n; i++)); do echo "$(hosts_addr "$i") $(hosts_name "$i")"; done
  } >"$DIR/hosts"
  for ((i = 1; i <= n; i++)); do
    ns="$(hosts_ns "$i")" veth="$(hosts_veth "$i")"
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "${veth}p"
    ip link set "${veth}p" netns "$ns"
    ip -n "$ns" link set "${veth}p" name eth0
    ip -n "$ns" addr add "$(hosts_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip link set "$veth" master "$br" up
    # hosts_exec bind-mounts /etc/netns/NS/hosts over /etc/hosts: every host resolves every other.
    install -d "/etc/netns/$ns"
    cp "$DIR/hosts" "/etc/netns/$ns/hosts"
    install -d -m 1777 "$DIR/nodes/$(hosts_name "$i")/tmp" "$DIR/nodes/$(hosts_name "$i")/local"
  done
  install -d -m 1777 "$DIR/tmp" "$DIR/local"  # the mount points (empty in the root namespace)
}

# Not `ip netns exec`: it remounts /sys for the namespace, and slurmd then finds no cgroup tree.
# nsenter joins the network namespace; unshare gives the hostname and the mounts of this host.
hosts_exec() {
  local i="$1" ns
  shift
  ns="$(hosts_ns "$i")"
  exec nsenter --net="/run/netns/$ns" unshare --uts --mount -- /bin/sh -c '
    hostname "$1" && mount --bind "/etc/netns/$2/hosts" /etc/hosts \
      && mount --bind "$3/nodes/$1/tmp" "$3/tmp" && mount --bind "$3/nodes/$1/local" "$3/local" || exit 1
    shift 3
    exec "$@"' sh "$(hosts_name "$i")" "$ns" "$DIR" "$@"
}

hosts_link() { ip link set "$(hosts_veth "$1")" "$2"; }

hosts_kill() {
  local pids
  pids="$(ip netns pids "$(hosts_ns "$1")" 2>/dev/null)" || return 0
  # shellcheck disable=SC2086
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}

hosts_destroy() {
  local quiet="${1:-}" i ns pids deadline
  hosts_load || return 0
  for ((i = 1; i <= HOSTS_N; i++)); do
    ns="$(hosts_ns "$i")"
    if ip netns list | grep -q "^$ns\b"; then
      pids="$(ip netns pids "$ns")"
      if [[ -n $pids ]]; then
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        deadline=$((SECONDS + 5))
        while [[ -n "$(ip netns pids "$ns")" ]] && ((SECONDS < deadline)); do sleep 0.1; done
        hosts_kill "$i"
        [[ -n $quiet ]] || say "killed what still ran on $(hosts_name "$i"): $(echo $pids)"
      fi
      ip netns del "$ns"
    fi
    rm -rf "/etc/netns/$ns"
    ip link del "$(hosts_veth "$i")" 2>/dev/null || true
  done
  ip link del "$(hosts_bridge)" 2>/dev/null || true
  [[ -n $quiet ]] || say "removed ${HOSTS_N} network-namespace host(s) and bridge $(hosts_bridge)"
  rm -f "$DIR/hosts.env"
}
