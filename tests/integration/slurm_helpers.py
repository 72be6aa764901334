"""Helpers for the Slurm integration tests: a private cluster (one node, or N network-namespace
hosts) started and stopped through scripts/slurm_cluster.sh (stopped by PID and namespace name on
every exit path), its faults (cut/heal/kill/revive a node), sbatch submission, bounded waits on job
states (scontrol, ~0.5 s polls) and on metrics.jsonl, and the checks the Slurm tests share (a job
completed, metrics equal to a reference run's). Run under Debian's /usr/bin/python3."""
import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from harness import SOURCE, TINY_MODEL, make_data, read_metrics, read_params, write_config

CLUSTER_SCRIPT = os.path.join(SOURCE, "scripts", "slurm_cluster.sh")
CANNOT_INSTALL = 3  # slurm_cluster.sh's exit status when apt-get cannot install Slurm
# munged closes a client's socket when no request arrives within 2 s of its accept
# (MUNGE_SOCKET_TIMEOUT_MSECS); libmunge then retries the request (MUNGE_SOCKET_RETRY_ATTEMPTS)
# but does not ignore SIGPIPE, so a Slurm client stalled that long on a loaded machine (the
# sanitized suite on 2 cores) dies of SIGPIPE at its write instead (scontrol exited -13 in CI).
# The Slurm client commands run here (cmd, submit) inherit Python's SIG_IGN for SIGPIPE (restore_signals=False), as
# munge's own tools set it, so the library's retry does its job.
SLURM_CLIENT = dict(capture_output=True, text=True, restore_signals=False)
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


class SlurmCluster:
    """start() brings the cluster up (or prints SKIPPED and exits 0 where Slurm cannot be
    installed; under pytest it skips the tests that asked for it); a failed start raises.
    stop() runs at exit, on SIGTERM/SIGINT and when called, and only once."""

    def __init__(self, state_dir, fake_gpus=0, nodes=1):
        self.state_dir, self.fake_gpus, self.nodes = state_dir, fake_gpus, nodes
        self.env, self.stopped = None, False

    def _run(self, *args, timeout):
        env = dict(os.environ, SFTDP_SLURM_DIR=self.state_dir, SFTDP_SLURM_FAKE_GPUS=str(self.fake_gpus))
        # Default signal dispositions here: the daemons it starts, and through them the jobs, keep theirs.
        return subprocess.run(["bash", CLUSTER_SCRIPT, *args], capture_output=True, text=True,
                              env=env, timeout=timeout)

    def start(self):
        atexit.register(self.stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: sys.exit(1))  # sys.exit runs the atexit stop
        t0 = time.monotonic()
        p = self._run("start", *(["--nodes", str(self.nodes)] if self.nodes > 1 else []), timeout=900)
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
        self.env = dict(os.environ, **self.client_env())
        return self

    def client_env(self):
        """The variables $DIR/env exports (SLURM_CONF; on several hosts Open MPI's TCP settings)."""
        found = {}
        with open(os.path.join(self.state_dir, "env")) as f:
            for line in f:
                if line.startswith("export "):
                    for pair in line.split()[1:]:
                        key, _, value = pair.partition("=")
                        found[key] = value
        return found

    def fault(self, action, node):
        """cut | heal | kill | revive NODE (scripts/slurm_cluster.sh); raises if the script fails."""
        p = self._run(action, node, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"slurm_cluster.sh {action} {node} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")

    def node_state(self, node):
        return self.cmd("sinfo", "-h", "-n", node, "-o", "%T").strip()

    def daemon_pids(self):
        """Every daemon's recorded PID: munged, slurmctld, slurmd (or slurmd-nodeI per host)."""
        pids = {}
        pid_dir = os.path.join(self.state_dir, "pids")
        for entry in sorted(os.listdir(pid_dir)) if os.path.isdir(pid_dir) else []:
            with open(os.path.join(pid_dir, entry)) as f:
                pids[entry[:-4]] = int(f.read().strip())
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
        p = self._run("stop", timeout=180)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)

    def cmd(self, *args, timeout=30, check=True):
        p = subprocess.run(list(args), env=self.env, timeout=timeout, **SLURM_CLIENT)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def submit(self, script, args, sbatch_options=(), env_extra=None):
        env = dict(self.env, **(env_extra or {}))
        p = subprocess.run(["sbatch", "--parsable", *sbatch_options, script, *args], env=env, timeout=30,
                           **SLURM_CLIENT)
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


def job_config(d):
    """The Slurm tests' run: the tiny model, 24 steps of 16 rows on CPU ranks, outputs in d/out."""
    make_data(f"{d}/train.h5", 256, seed=1)
    make_data(f"{d}/eval.h5", 32, seed=2)
    return write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
        eval_files=f"{d}/eval.h5", eval_interval=8, max_target_length=16, global_batch_size=16,
        gradient_accumulation_steps=1, steps=24, learning_rate=3e-3, warmup_steps_fraction=0.1,
        enable_data_shuffling=True, data_shuffle_seed=5, checkpoint_period=0, hardware="cpu", seed=3))


@contextlib.contextmanager
def running_cluster(note, what, **cluster_options):
    """(work dir, started SlurmCluster) for a test module: the cluster's state under a fresh
    world-readable directory (munged must enter it; pytest's tmp_path is 0700), stopped and the
    directory removed on the way out (kept with SFTDP_KEEP_TMP=1); notes how long it all took."""
    d = tempfile.mkdtemp(prefix="sftdp_it_")
    os.chmod(d, 0o755)
    cluster = SlurmCluster(os.path.join(d, "cluster"), **cluster_options)
    t0 = time.monotonic()
    try:
        cluster.start()
        yield d, cluster
    finally:
        cluster.stop()
        note(f"{what} took {time.monotonic() - t0:.1f} s (cluster start included)")
        if not os.environ.get("SFTDP_KEEP_TMP"):
            shutil.rmtree(d, ignore_errors=True)


def train_records(run_dir):
    """The training-step records in run_dir/metrics.jsonl so far ([] if none yet), skipping a line
    still being written."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except json.JSONDecodeError:  # a line being written
                continue
            if "eval_loss" not in j:
                records.append(j)
    return records


def metrics_steps(run_dir):
    """Completed training steps recorded so far in run_dir/metrics.jsonl (0 if none yet)."""
    return max((j["step"] for j in train_records(run_dir)), default=0)


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


def job_log(fields):
    with open(fields["StdOut"]) as f:
        return f.read()


def assert_completed(fields, what):
    ok = fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0"
    log = job_log(fields)[-3000:] if os.path.exists(fields.get("StdOut", "")) else "(no log)"
    assert ok, f"{what}: JobState={fields.get('JobState')} ExitCode={fields.get('ExitCode')}\n{log}"


def assert_same_metrics(run_dir, ref_dir, what, rel=1e-6, from_step=0, to_step=None):
    """Per-step losses within rel of the reference's (steps from_step + 1 .. to_step), equal weight
    sums; returns the largest relative difference."""
    ms, es = read_metrics(run_dir)
    mr, er = read_metrics(ref_dir)
    last = to_step if to_step is not None else float("inf")
    ms = [m for m in ms if from_step < m["step"] <= last]
    mr = [m for m in mr if from_step < m["step"] <= last]
    assert [m["step"] for m in ms] == [m["step"] for m in mr] and len(ms) > 0, \
        f"{what}: steps {[m['step'] for m in ms]} vs {[m['step'] for m in mr]}"
    worst = max((abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ms, mr)), default=0.0)
    assert worst <= rel, f"{what}: loss differs by {worst:.2e} relative (limit {rel})"
    assert [m["weight_sum"] for m in ms] == [m["weight_sum"] for m in mr], f"{what}: weight_sum per step"
    if from_step == 0 and to_step is None:
        assert len(es) == len(er), f"{what}: {len(es)} eval lines vs {len(er)}"
    return worst


def assert_final_params_equal(run_dir, ref_dir, step, what):
    a = read_params(f"{run_dir}/checkpoints/step_{step}")
    b = read_params(f"{ref_dir}/checkpoints/step_{step}")
    differ = [k for k in b if not np.array_equal(a[k], b[k])]
    assert not differ, f"{what}: final parameters not bitwise equal: {differ}"
