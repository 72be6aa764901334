"""Helpers for the Slurm integration test: a private single-node cluster started and stopped through
scripts/slurm_cluster.sh (stopped by PID on every exit path), sbatch submission, bounded waits on job
states (scontrol, ~0.5 s polls) and on metrics.jsonl. Run under Debian's /usr/bin/python3."""
import atexit
import json
import os
import signal
import subprocess
import sys
import time

from harness import SOURCE

CLUSTER_SCRIPT = os.path.join(SOURCE, "scripts", "slurm_cluster.sh")
CANNOT_INSTALL = 3  # slurm_cluster.sh's exit status when apt-get cannot install Slurm
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


class SlurmCluster:
    """start() brings the cluster up (or prints SKIPPED and exits 0 where Slurm cannot be
    installed; under pytest it skips the tests that asked for it); a failed start raises.
    stop() runs at exit, on SIGTERM/SIGINT and when called, and only once."""

    def __init__(self, state_dir, fake_gpus=0):
        self.state_dir, self.fake_gpus, self.env, self.stopped = state_dir, fake_gpus, None, False

    def _run(self, action, timeout):
        env = dict(os.environ, SFTDP_SLURM_DIR=self.state_dir, SFTDP_SLURM_FAKE_GPUS=str(self.fake_gpus))
        return subprocess.run(["bash", CLUSTER_SCRIPT, action], capture_output=True, text=True,
                              env=env, timeout=timeout)

    def start(self):
        atexit.register(self.stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: sys.exit(1))  # sys.exit runs the atexit stop
        t0 = time.monotonic()
        p = self._run("start", timeout=900)
        if p.returncode == CANNOT_INSTALL:
            reason = (p.stderr.strip().splitlines() or ["Slurm cannot be installed"])[-1]
            print(f"SKIPPED: {reason}", flush=True)
            if "pytest" in sys.modules:  # under pytest: the tests that need the cluster are skipped
                import pytest
                pytest.skip(f"SKIPPED: {reason}")
            sys.exit(0)
        if p.returncode != 0:
            raise RuntimeError(f"slurm_cluster.sh start failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        print(f"cluster up in {time.monotonic() - t0:.1f} s (state in {self.state_dir})", flush=True)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.state_dir, "slurm.conf"))
        return self

    def daemon_pids(self):
        pids = {}
        for name in ("munged", "slurmctld", "slurmd"):
            path = os.path.join(self.state_dir, "pids", f"{name}.pid")
            if os.path.exists(path):
                with open(path) as f:
                    pids[name] = int(f.read().strip())
        return pids

    def job_processes(self):
        """Live slurmstepd processes of this cluster (they inherit SLURM_CONF from its slurmd)."""
        marker = f"SLURM_CONF={os.path.join(self.state_dir, 'slurm.conf')}".encode()
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() != "slurmstepd":
                        continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0") and pid_alive(int(entry)):
                        found.append(int(entry))
            except (OSError, ValueError):
                pass
        return found

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        p = self._run("stop", timeout=120)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)

    def cmd(self, *args, timeout=30, check=True):
        p = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def submit(self, script, args, sbatch_options=(), env_extra=None):
        env = dict(self.env, **(env_extra or {}))
        p = subprocess.run(["sbatch", "--parsable", *sbatch_options, script, *args], capture_output=True,
                           text=True, env=env, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"sbatch failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout.strip().split(";")[0]

    def job(self, job_id):
        """scontrol show job as a dict (JobState, ExitCode, Restarts, StdOut, ...)."""
        out = self.cmd("scontrol", "show", "job", "-o", job_id)
        fields = {}
        for token in out.split():
            key, _, value = token.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_job(self, job_id, timeout=120, until=None):
        """Polls until the job is in a terminal state (or `until(fields)` holds); raises on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            done = until(fields) if until else fields.get("JobState") in TERMINAL_STATES
            if done:
                return fields
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {fields.get('JobState')} after {timeout} s")
            time.sleep(0.5)


def metrics_steps(run_dir):
    """Completed training steps recorded so far in run_dir/metrics.jsonl (0 if none yet)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    steps = 0
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except json.JSONDecodeError:  # a line being written
                continue
            if "eval_loss" not in j:
                steps = max(steps, j["step"])
    return steps


def wait_metrics(run_dir, min_steps, timeout=60):
    deadline = time.monotonic() + timeout
    while metrics_steps(run_dir) < min_steps:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{run_dir}: fewer than {min_steps} steps after {timeout} s")
        time.sleep(0.05)
    return metrics_steps(run_dir)


def pid_alive(pid):
    """True if the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
