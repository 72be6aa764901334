"""scripts/slurm_cluster.sh start with its state dir under a directory the munge user cannot enter (a
0700 temp dir, as pytest's own are): exit 2 with one error line naming that directory, the munge
user and the fix, before any daemon starts (it used to wait 15 s and say "munged did not answer").
Needs root and Slurm (installed with apt-get by the script); skipped where neither can be had.
Also: the Slurm client commands the tests run survive a socket munged closed (SIGPIPE ignored)."""
import os
import signal
import subprocess
import sys

import pytest

SOURCE = os.environ.get("SFTDP_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CLUSTER_SCRIPT = os.path.join(SOURCE, "scripts", "slurm_cluster.sh")
CANNOT_INSTALL = 3


def run_cluster(action, state_dir, timeout, *args):
    env = dict(os.environ, SFTDP_SLURM_DIR=state_dir)
    return subprocess.run(["bash", CLUSTER_SCRIPT, action, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["start", "--nodes", "x"], "error: --nodes: expected 1 to 99 hosts, got 'x'"),
    (["start", "--nodes", "0"], "error: --nodes: expected 1 to 99 hosts, got '0'"),
    (["cut", "node2"], "error: 'cut' needs a multi-node cluster (start --nodes N, N >= 2)"),
    (["start", "--hosts", "2"], "usage:")])
def test_bad_arguments_exit_2_before_anything_starts(tmp_path, args, message):
    """A bad --nodes, a fault on a cluster without hosts, an unknown option: exit 2, one line, no state."""
    state_dir = str(tmp_path / "cluster")
    p = run_cluster(args[0], state_dir, 60, *args[1:])
    assert p.returncode == 2, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert message in p.stderr, p.stderr
    assert not os.path.exists(state_dir), "nothing written"


@pytest.mark.skipif(os.geteuid() != 0, reason="slurm_cluster.sh runs as root")
def test_state_dir_out_of_reach_of_munge(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)  # whatever the umask
    state_dir = str(closed / "cluster")
    p = run_cluster("start", state_dir, timeout=600)
    if p.returncode == CANNOT_INSTALL:
        pytest.skip(f"Slurm cannot be installed: {p.stderr.strip().splitlines()[-1:]}")
    try:
        assert p.returncode == 2, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        errors = [line for line in p.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1, p.stderr
        # The first directory on the way that munge cannot enter: closed's, or an ancestor if
        # pytest's base temp dir (0700 itself) comes first.
        blocked = next(d for d in [*reversed(closed.parents), closed] if not os.stat(d).st_mode & 0o001)
        assert f"cannot enter {blocked} (mode 700" in errors[0], errors[0]
        assert "user munge" in errors[0] and f"chmod o+x {blocked}" in errors[0], errors[0]
        assert state_dir in errors[0] and "SFTDP_SLURM_DIR" in errors[0], errors[0]
        assert "did not answer" not in p.stderr
        assert not os.path.exists(os.path.join(state_dir, "pids", "munged.pid")), "no daemon was started"
    finally:
        run_cluster("stop", state_dir, timeout=120)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_slurm_clients_run_with_sigpipe_ignored(tmp_path):
    """munged closes a client's socket after 2 s without a request, and libmunge retries the request
    only if its process survives the write to that socket: the Slurm commands the tests run
    (SlurmCluster.cmd, and so every scontrol/squeue/scancel poll) ignore SIGPIPE. (An scontrol
    stalled on a loaded CI machine died of it, exit -13, and failed a job it was only watching.)"""
    from slurm_helpers import SlurmCluster
    status = SlurmCluster(str(tmp_path / "cluster")).cmd("cat", "/proc/self/status")
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)), f"SIGPIPE not ignored: SigIgn {ignored:#x}"
