"""Ctrl-C saves (docs/SPEC.md §2): on one rank, SIGINT is the same clean stop as SIGTERM and
SIGUSR1 — the run stops at the next step boundary, writes a checkpoint, says "resubmit to
continue" and exits 0 — and running the same command again continues bitwise as if never
stopped. Nothing is lost silently (issue 35): a second SIGINT while the stop is pending keeps it (the
checkpoint is still written, exit 0) and says so; a third ends the process at once, killed by SIGINT
(status 130 in a shell), without a checkpoint, after a line saying so. tests/integration/
test_stop_signal_mpi.py covers mpirun."""
import os
import signal
import time

import numpy as np
import pytest

from harness import read_metrics, read_params, run_train
from signalled_run import INTERRUPT_NOTICE, SignalledRun, stop_config

STEPS = 24  # the resumed run's: ~30-100 ms each (64 rows), so a stop signalled after step 3 lands mid-run


@pytest.fixture(scope="module")
def cfg(workdir):
    """2000 steps: a run that only a signal ends."""
    return stop_config(workdir, global_batch_size=64)


def stopped_run(workdir, cfg, sig, name, overrides=None):
    """Runs until step 3, sends sig, waits; returns (run, exit status, the step of the stop)."""
    run = SignalledRun(cfg, f"{workdir}/{name}/r", dict(overrides or {}, base_output_directory=f"{workdir}/{name}"))
    run.wait_steps(3)
    run.kill(sig)
    code = run.wait()
    return run, code, read_metrics(run.run_dir)[0][-1]["step"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_stop_signal_writes_a_checkpoint_and_exits_0(workdir, cfg, sig):
    run, code, step = stopped_run(workdir, cfg, sig, sig.name)
    out = run.stdout()
    assert code == 0, f"{sig.name}: exit 0 (got {code})\n{out[-2000:]}\n{run.stderr()[-2000:]}"
    assert step >= 3, f"stopped at a step boundary after step 3 (step {step})"
    assert f"stop signal received: checkpoint at step {step} written; resubmit to continue" in out, out[-2000:]
    assert run.checkpoints() == [f"step_{step}"], f"one checkpoint, the stop's: {run.checkpoints()}"
    if sig == signal.SIGINT:
        assert INTERRUPT_NOTICE in run.stderr(), "Ctrl-C is answered at once on stderr"


def test_resubmitting_after_ctrl_c_continues_bitwise(workdir, cfg):
    straight, steps = f"{workdir}/straight", {"steps": STEPS}
    run_train(cfg, dict(steps, base_output_directory=straight))
    run, code, step = stopped_run(workdir, cfg, signal.SIGINT, "resumed", steps)
    assert code == 0 and run.checkpoints() == [f"step_{step}"], f"exit {code}, {run.checkpoints()}"
    assert step < STEPS, f"stopped before the end (step {step} of {STEPS})"
    p = run_train(cfg, dict(steps, base_output_directory=f"{workdir}/resumed"))
    assert f"step_{step}" in p.stdout and "resuming from" in p.stdout, p.stdout[-2000:]
    for group in ("params", "opt/m", "opt/v"):
        a = read_params(f"{straight}/r/checkpoints/step_{STEPS}", group)
        b = read_params(f"{run.run_dir}/checkpoints/step_{STEPS}", group)
        differ = [k for k in a if not np.array_equal(a[k], b[k])]
        assert not differ, f"{group} bitwise equal to the run never stopped: {differ}"
    keys = ("step", "loss", "lr", "grad_norm", "weight_sum", "epoch")
    rows = lambda d: [[m[k] for k in keys] for m in read_metrics(d)[0]]
    assert rows(run.run_dir) == rows(f"{straight}/r"), "metrics of every step identical"


SECOND_NOTICE = "sft_train: interrupt again: the checkpoint is still written at the next step boundary " \
                "(no checkpoint yet); a third Ctrl-C stops at once, without it"
THIRD_NOTICE = "sft_train: third interrupt: stopping now, without a checkpoint; no checkpoint written yet: a " \
               "resubmission starts over"


def slow_run(workdir, name):
    """256 rows a step (~0.3-0.5 s): the later SIGINTs land while the step of the first runs."""
    d = f"{workdir}/{name}"
    os.makedirs(d)
    cfg = stop_config(d, global_batch_size=256, rows=256)
    run = SignalledRun(cfg, f"{d}/out/r", {})
    run.wait_steps(3)
    return run


def interrupt(run, notice):
    run.kill(signal.SIGINT)
    assert run.wait_stderr(notice), f"answered on stderr while the run goes on (exit {run.proc.poll()})\n" + \
        run.stderr()[-1500:]


def test_a_second_ctrl_c_still_writes_the_checkpoint(workdir):
    run = slow_run(workdir, "twice")
    interrupt(run, INTERRUPT_NOTICE)
    interrupt(run, SECOND_NOTICE)
    code = run.wait()
    assert code == 0, f"the pending stop ends the run as one Ctrl-C does (got {code})\n{run.stderr()[-1500:]}"
    step = read_metrics(run.run_dir)[0][-1]["step"]
    assert run.checkpoints() == [f"step_{step}"], f"the checkpoint of the stop: {run.checkpoints()}"
    assert f"stop signal received: checkpoint at step {step} written; resubmit to continue" in run.stdout()


def test_a_third_ctrl_c_stops_at_once(workdir, note):
    run = slow_run(workdir, "thrice")
    interrupt(run, INTERRUPT_NOTICE)
    interrupt(run, SECOND_NOTICE)
    t0 = time.monotonic()
    run.kill(signal.SIGINT)
    code = run.wait()
    elapsed = time.monotonic() - t0
    note(f"stop signal: a third Ctrl-C ended sft_train {elapsed * 1000:.0f} ms after it was sent")
    assert code == -signal.SIGINT, f"killed by SIGINT, as the shell's 130 says (got {code})"
    assert THIRD_NOTICE in run.stderr(), run.stderr()[-1500:]
    assert run.checkpoints() == [], f"no checkpoint written: {run.checkpoints()}"
    assert "resubmit to continue" not in run.stdout()
    step_s = read_metrics(run.run_dir)[0][-1]["step_time_s"]
    assert elapsed < step_s, f"ended within the step it came in ({elapsed:.2f} s; a step takes {step_s:.2f} s)"
