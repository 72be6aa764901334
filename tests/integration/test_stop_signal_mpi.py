"""Stop signals under mpirun (Open MPI 4.1; docs/SPEC.md §2), 2 ranks:
- SIGINT to one rank (kill -INT of its PID): every rank stops at the next step boundary, rank 0
  writes the checkpoint, every rank exits 0 and so does mpirun.
- SIGUSR1 to mpirun: mpirun forwards it to every rank at once; the same clean stop, exit 0.
- SIGINT to mpirun (Ctrl-C at its terminal: the ranks run in process groups of their own, so only
  mpirun gets it) or SIGTERM to mpirun: Open MPI does not forward these. It aborts the job: the
  ranks get SIGTERM odls_base_sigkill_timeout (1 s) after mpirun's signal, then SIGKILL 1 s after
  that, and mpirun exits 1 whatever the ranks return. The ranks' SIGTERM is a clean stop, so the
  checkpoint is written when the step in progress and the checkpoint fit in that second (they do
  here: a small model).
- Ctrl-C twice at mpirun: the ranks see SIGCONT, then SIGKILL, never the SIGTERM: nothing is saved and no
  rank can say so. The next start of the run says it (issue 35): a warning that metrics.jsonl logged
  steps no checkpoint holds, and that they are trained again."""
import os
import signal
import time

import pytest

from harness import read_metrics, run_train
from signalled_run import SignalledRun, stop_config

SIGKILL_TIMEOUT_S = 1  # Open MPI 4.1's odls_base_sigkill_timeout default


def run_and_signal(workdir, name, sig, rank=None):
    """2 ranks until step 3, then sig to `rank` (None: to mpirun). Returns (run, exit status,
    seconds from the signal to the checkpoint file's last write, or None without one)."""
    d = f"{workdir}/{name}"
    os.makedirs(d)
    run = SignalledRun(stop_config(d), f"{d}/out/r", {}, np_=2)
    try:
        run.wait_steps(3)
        t0 = time.time()
        run.kill(sig, rank)
        code = run.wait()
    finally:
        run.close()
    ckpt = [f"{run.run_dir}/checkpoints/{c}" for c in run.checkpoints()]
    return run, code, (os.path.getmtime(ckpt[0]) - t0) if ckpt else None


def assert_clean_stop(run, what):
    out = run.stdout()
    step = read_metrics(run.run_dir)[0][-1]["step"]
    assert run.checkpoints() == [f"step_{step}"], f"{what}: the checkpoint of the stop's step {step}: " \
        f"{run.checkpoints()}\n{out[-1500:]}\n{run.stderr()[-1500:]}"
    assert f"stop signal received: checkpoint at step {step} written; resubmit to continue" in out, out[-1500:]


@pytest.mark.parametrize("rank", [0, 1])
def test_ctrl_c_on_one_rank_stops_every_rank_with_exit_0(workdir, rank):
    run, code, _ = run_and_signal(workdir, f"rank{rank}", signal.SIGINT, rank)
    assert code == 0, f"mpirun exits 0 (got {code})\n{run.stdout()[-1500:]}\n{run.stderr()[-1500:]}"
    assert_clean_stop(run, f"SIGINT to rank {rank}")


def test_sigusr1_to_mpirun_is_forwarded_and_ends_with_exit_0(workdir):
    run, code, _ = run_and_signal(workdir, "usr1", signal.SIGUSR1)
    assert code == 0, f"mpirun exits 0 (got {code})\n{run.stdout()[-1500:]}\n{run.stderr()[-1500:]}"
    assert_clean_stop(run, "SIGUSR1 to mpirun")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_sigint_or_sigterm_to_mpirun_checkpoints_but_mpirun_exits_1(workdir, sig, note):
    run, code, after = run_and_signal(workdir, f"mpirun_{sig.name}", sig)
    assert code == 1, f"Open MPI's mpirun exits 1 after a {sig.name} of its own (got {code})"
    assert_clean_stop(run, f"{sig.name} to mpirun")
    note(f"stop signal: {sig.name} to mpirun: checkpoint written {after:.2f} s after it, mpirun exit {code}")
    assert after >= 0.8 * SIGKILL_TIMEOUT_S, \
        f"the ranks' SIGTERM comes {SIGKILL_TIMEOUT_S} s after mpirun's signal (checkpoint after {after:.2f} s)"


def test_ctrl_c_at_a_terminal_reaches_mpirun_alone(workdir):
    """The ranks are not in mpirun's process group, the terminal's foreground group."""
    d = f"{workdir}/groups"
    os.makedirs(d)
    run = SignalledRun(stop_config(d), f"{d}/out/r", {}, np_=2)
    try:
        run.wait_steps(1)
        groups = {r: os.getpgid(p) for r, p in run.ranks.items()}
        assert os.getpgid(run.proc.pid) not in groups.values(), \
            f"ranks' process groups {groups}, mpirun's {os.getpgid(run.proc.pid)}"
    finally:
        run.close()


def test_ctrl_c_twice_at_mpirun_is_said_at_the_next_start(workdir):
    d = f"{workdir}/twice"
    os.makedirs(d)
    cfg = stop_config(d)
    run = SignalledRun(cfg, f"{d}/out/r", {}, np_=2)
    try:
        run.wait_steps(3)
        run.kill(signal.SIGINT)
        time.sleep(0.2)  # within odls_base_sigkill_timeout: before the ranks' SIGTERM
        run.kill(signal.SIGINT)
        code = run.wait()
    finally:
        run.close()
    assert code != 0 and run.checkpoints() == [], f"mpirun exit {code}, checkpoints {run.checkpoints()}"
    logged = read_metrics(run.run_dir)[0][-1]["step"]
    assert "resubmit to continue" not in run.stdout()
    p = run_train(cfg, {"steps": 1})  # the resubmission, shortened
    want = (f"warning: {run.run_dir}/metrics.jsonl logged steps up to {logged} but no checkpoint was written: "
            f"steps 1-{logged} are trained again (the run that logged them ended without a checkpoint after them: "
            "killed, out of memory, or Ctrl-C twice at mpirun)")
    assert want in p.stderr.splitlines(), p.stderr
