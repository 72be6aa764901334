"""A training run to stop with a signal (the stop-signal tests): started under mpirun or alone,
its stdout and stderr in files (so the tests can wait for a line while it runs), its ranks found
from mpirun's children. Run under Debian's /usr/bin/python3."""
import os
import signal
import subprocess
import time

from harness import MPI_ENV, SFT_TRAIN, TINY_MODEL, children, make_data, world_rank, write_config
from slurm_helpers import pid_alive, wait_metrics

# ~10-20 ms a step for 16 rows on this 2-core machine; 2000 steps outlast every test.
MODEL = dict(TINY_MODEL, emb_dim=128, mlp_dim=512, num_heads=4)
INTERRUPT_NOTICE = "sft_train: interrupt: stopping at the next step boundary"


def stop_config(d, steps=2000, global_batch_size=16, rows=256):
    """A config (and its data) for runs in d; base_output_directory and run_name come as overrides."""
    if not os.path.exists(f"{d}/train.h5"):
        make_data(f"{d}/train.h5", rows, seed=1)
    return write_config(f"{d}/c.yml", **dict(
        MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
        max_target_length=16, global_batch_size=global_batch_size, steps=steps, learning_rate=1e-3,
        warmup_steps_fraction=0.1, enable_data_shuffling=True, data_shuffle_seed=5, checkpoint_period=0,
        hardware="cpu", seed=3, log_period=10))


class SignalledRun:
    """sft_train on cfg with key=value overrides, alone (np_=1), under mpirun -np np_, or after
    another launcher's words (srun ...: its ranks are not its children and stay unknown)."""

    def __init__(self, cfg, run_dir, overrides, np_=1, launcher=None, env=None):
        self.run_dir, self.np_, self.launcher = run_dir, np_, launcher
        os.makedirs(run_dir, exist_ok=True)
        self.out_path, self.err_path = f"{run_dir}.stdout", f"{run_dir}.stderr"
        cmd = [SFT_TRAIN, cfg] + [f"{k}={v}" for k, v in overrides.items()]
        if launcher:
            cmd = launcher + cmd
        elif np_ > 1:
            cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=dict(env or os.environ, **MPI_ENV),
                                         start_new_session=True)
        self.ranks = {}

    def wait_steps(self, n, timeout=60):
        """Waits until metrics.jsonl has n steps; then knows the ranks' PIDs."""
        step = wait_metrics(self.run_dir, n, timeout)
        if self.np_ == 1 and not self.launcher:
            self.ranks = {0: self.proc.pid}
        elif not self.launcher:
            self.ranks = {world_rank(p): p for p in children(self.proc.pid)}
            assert set(self.ranks) == set(range(self.np_)), f"mpirun's children are the ranks: {self.ranks}"
        return step

    def kill(self, sig, rank=None):
        """Sends sig to a rank, or (rank None) to the process started: the launcher or the lone rank."""
        os.kill(self.proc.pid if rank is None else self.ranks[rank], sig)

    def wait_stderr(self, text, timeout=10):
        deadline = time.monotonic() + timeout
        while text not in self.stderr():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def wait(self, timeout=60):
        """Exit status (negative: killed by that signal); checks no rank is left behind."""
        try:
            code = self.proc.wait(timeout)
        finally:
            self.close()
        deadline = time.monotonic() + 5  # the ranks are reaped once mpirun is gone
        while any(pid_alive(p) for p in self.ranks.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in self.ranks.values() if pid_alive(p)]
        assert not left, f"no rank process left behind (alive: {left})"
        return code

    def close(self):
        """Ends whatever is still running: mpirun's ranks run in process groups of their own."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in self.ranks.values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def checkpoints(self):
        d = f"{self.run_dir}/checkpoints"
        return sorted(os.listdir(d)) if os.path.isdir(d) else []
