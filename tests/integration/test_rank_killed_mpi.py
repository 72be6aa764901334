"""A rank killed with SIGKILL under mpirun (no Slurm) takes the whole job down: for a 2-rank run,
once metrics show training steps, `kill -9` one rank (rank 1, then in a second run rank 0); mpirun
must exit non-zero within 30 s and leave no sft_train process behind. Notes the teardown time."""
import os
import signal
import subprocess
import time

import pytest

from harness import MPI_ENV, SFT_TRAIN, TINY_MODEL, children, make_data, world_rank, write_config
from slurm_helpers import pid_alive, wait_metrics

TEARDOWN_LIMIT_S = 30


@pytest.fixture(scope="module")
def cfg(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 256, seed=1)
    # ~25-40 ms a step on 2 ranks: 2000 steps cannot finish before the kill.
    return write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, emb_dim=128, mlp_dim=512, num_heads=4, run_name="r", base_output_directory=f"{d}/out",
        train_files=f"{d}/train.h5", max_target_length=16, global_batch_size=16, steps=2000,
        learning_rate=1e-3, checkpoint_period=0, hardware="cpu", seed=3))


@pytest.mark.parametrize("victim", [1, 0], ids=["rank1", "rank0"])
def test_killed_rank_ends_the_job(workdir, cfg, victim, note):
    run = f"{workdir}/out/kill{victim}"
    mpirun = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", SFT_TRAIN, cfg, f"run_name=kill{victim}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, **MPI_ENV), start_new_session=True)
    try:
        step = wait_metrics(run, 3, timeout=60)
        ranks = {world_rank(p): p for p in children(mpirun.pid)}
        assert set(ranks) == {0, 1}, f"mpirun's children are ranks 0 and 1: {ranks}"
        t0 = time.monotonic()
        os.kill(ranks[victim], signal.SIGKILL)
        try:
            out, _ = mpirun.communicate(timeout=TEARDOWN_LIMIT_S)
        except subprocess.TimeoutExpired:
            out = ""
        teardown = time.monotonic() - t0
        note(f"rank {victim} killed after step {step}: mpirun exited {mpirun.returncode} "
             f"{teardown:.2f} s later")
        assert mpirun.returncode not in (None, 0), f"mpirun exits non-zero (got {mpirun.returncode})"
        assert teardown < TEARDOWN_LIMIT_S, f"teardown within {TEARDOWN_LIMIT_S} s ({teardown:.1f} s)"
        assert f"rank {victim}" in out and "signal 9" in out, f"mpirun names the killed rank and the signal:\n{out}"
        deadline = time.monotonic() + 5  # the survivors are reaped by init once mpirun is gone
        while any(pid_alive(p) for p in ranks.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in ranks.values() if pid_alive(p)]
        assert not left, f"no rank process left behind (alive: {left})"
    finally:
        if mpirun.poll() is None:  # never leave a job behind, whatever failed above
            os.killpg(mpirun.pid, signal.SIGKILL)
            mpirun.wait()
