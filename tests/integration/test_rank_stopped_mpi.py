"""A rank that is stopped (SIGSTOP), not dead, must not hang the job: 2 ranks under mpirun with
collective_timeout_s=3; once metrics show training steps, `kill -STOP` one rank. The other rank
reaches the next collective, waits 3 s (rank 1 waits one grace second more), names the stopped
rank and ends the job: mpirun exits non-zero within the bound and no process is left behind.
Stopping rank 0 checks that rank 1, the second watcher, speaks when rank 0 cannot."""
import os
import signal
import subprocess
import time

from harness import MPI_ENV, SFT_TRAIN, TINY_MODEL, children, make_data, world_rank, write_config
from slurm_helpers import pid_alive, train_records, wait_metrics

TIMEOUT_S = 3
# The deadline (3 s, + 1 s grace on rank 1), mpirun's teardown (~2 s: SIGTERM, then SIGKILL 1 s
# later) and slack for a busy 2-core machine. Without the deadline the job never ends.
BOUND_S = 20


def stop_one_rank(d, victim, hardware="cpu", env_extra=None, model=None, into_step=0.0):
    """Runs the job, SIGSTOPs rank `victim` after step 3; returns (exit status, seconds from the
    stop to mpirun's exit, mpirun's output, step at the stop). tests/integration/test_cuda_e2e.py
    runs it with hardware=gpu on simulated GPUs (the NCCL communicator's deadline) and a smaller
    `model` (keys over the default one), whose simulated steps stay well under the deadline.
    into_step: the stop comes that fraction of a step time after the step's metrics appear, so
    the victim is inside the next step's forward/backward and the others wait in its gradient
    allreduce (0: at once, when the victim may still be in the step-boundary host allreduce)."""
    if not os.path.exists(f"{d}/train.h5"):
        make_data(f"{d}/train.h5", 256, seed=1)
    # ~25-40 ms a step on 2 ranks: 2000 steps cannot finish before the stop.
    model = model or dict(emb_dim=128, mlp_dim=512, num_heads=4)
    cfg = write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, **model, run_name="r", base_output_directory=f"{d}/out",
        train_files=f"{d}/train.h5", max_target_length=16, global_batch_size=16, steps=2000,
        learning_rate=1e-3, checkpoint_period=0, hardware=hardware, seed=3, collective_timeout_s=TIMEOUT_S))
    run = f"{d}/out/stop{victim}"
    mpirun = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", SFT_TRAIN, cfg, f"run_name=stop{victim}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, **MPI_ENV, **(env_extra or {})), start_new_session=True)
    ranks = {}
    try:
        step = wait_metrics(run, 3, timeout=60)
        if into_step:
            time.sleep(into_step * train_records(run)[-1]["step_time_s"])
        ranks = {world_rank(p): p for p in children(mpirun.pid)}
        assert set(ranks) == {0, 1}, f"mpirun's children are ranks 0 and 1: {ranks}"
        t0 = time.monotonic()
        os.kill(ranks[victim], signal.SIGSTOP)
        try:
            out, _ = mpirun.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            out = "(mpirun still running)"
        elapsed = time.monotonic() - t0
        print(f"rank {victim} stopped after step {step}: mpirun exited {mpirun.returncode} "
              f"{elapsed:.2f} s later\n{out[-2000:]}", flush=True)
        deadline = time.monotonic() + 5  # the ranks are reaped once mpirun is gone
        while any(pid_alive(p) for p in ranks.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in ranks.values() if pid_alive(p)]
        assert not left, f"no rank process left behind (alive: {left})"
        return mpirun.returncode, elapsed, out, step
    finally:
        for pid in ranks.values():  # never leave a stopped or running rank behind
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        if mpirun.poll() is None:
            os.killpg(mpirun.pid, signal.SIGKILL)
            mpirun.wait()


def test_stopped_rank_1_is_named_by_rank_0_and_the_job_ends(tmp_path):
    code, elapsed, out, _ = stop_one_rank(str(tmp_path), 1)
    assert code not in (None, 0), f"mpirun exits non-zero (got {code})"
    assert TIMEOUT_S <= elapsed < BOUND_S, f"ended by the deadline, within {BOUND_S} s ({elapsed:.1f} s)"
    assert "[rank 0@" in out and "error: rank 1 (" in out, "rank 0 names rank 1 and its host"
    assert "the gradient allreduce of step" in out or "a host allreduce of step" in out, \
        "the message says which collective of which step"
    assert "(collective_timeout_s: 3)" in out, "the message names the key to change"


def test_stopped_rank_0_is_named_by_rank_1(tmp_path):
    code, elapsed, out, _ = stop_one_rank(str(tmp_path), 0)
    assert code not in (None, 0), f"mpirun exits non-zero (got {code})"
    assert TIMEOUT_S <= elapsed < BOUND_S, f"ended by the deadline, within {BOUND_S} s ({elapsed:.1f} s)"
    assert "[rank 1@" in out and "error: rank 0 (" in out, "rank 1 names rank 0 and its host"
