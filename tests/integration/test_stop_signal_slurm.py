"""Stop signals under Slurm 22.05 (a private single-node cluster, as tests/integration/test_slurm.py;
docs/SPEC.md §2), 2 tasks launched by srun --mpi=pmix:
- `scancel --signal=INT <job>` gives every task SIGINT: the clean stop — checkpoint, "resubmit to
  continue", every task exits 0, srun exits 0 and the job reads COMPLETED 0:0.
- Ctrl-C at srun's terminal reaches srun alone (the tasks run under slurmstepd). srun's first
  SIGINT only prints the tasks' state; two within a second make it send the tasks SIGINT and then,
  at once, SIGKILL ("forcing job termination"): no time to save. Documented, not a clean stop."""
import os
import signal
import time

import pytest

from harness import read_metrics
from signalled_run import SignalledRun, stop_config
from slurm_helpers import running_cluster


@pytest.fixture(scope="module")
def cluster(note):
    with running_cluster(note, "Slurm stop-signal tests") as (d, cluster):
        yield d, cluster


def srun_job(cluster, name):
    """srun -n 2 sft_train, past step 3; returns (run, job id)."""
    d, slurm = cluster
    os.makedirs(f"{d}/{name}")
    run = SignalledRun(stop_config(f"{d}/{name}"), f"{d}/{name}/out/r", {},
                       launcher=["srun", "--mpi=pmix", "-n", "2", "-O", f"--job-name={name}"],
                       env=dict(slurm.env, OMP_NUM_THREADS="1"))
    run.wait_steps(3, timeout=120)
    jobs = slurm.cmd("squeue", "-h", "-n", name, "-o", "%i").split()
    assert len(jobs) == 1, f"one job named {name}: {jobs}"
    return run, jobs[0]


def test_scancel_signal_int_is_a_clean_stop(cluster):
    run, job = srun_job(cluster, "scancel_int")
    try:
        cluster[1].cmd("scancel", "--signal=INT", job)
        code = run.proc.wait(60)
    finally:
        run.close()
    out = run.stdout() + run.stderr()
    step = read_metrics(run.run_dir)[0][-1]["step"]
    assert code == 0, f"srun exits 0 (got {code})\n{out[-2000:]}"
    assert run.checkpoints() == [f"step_{step}"], f"the stop's checkpoint: {run.checkpoints()}"
    assert f"stop signal received: checkpoint at step {step} written; resubmit to continue" in out, out[-2000:]
    fields = cluster[1].wait_job(job, timeout=30)
    assert fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0", \
        f"JobState={fields.get('JobState')} ExitCode={fields.get('ExitCode')}"


def test_ctrl_c_twice_on_srun_kills_the_tasks(cluster, note):
    run, job = srun_job(cluster, "srun_twice")
    try:
        run.kill(signal.SIGINT)
        time.sleep(0.2)
        run.kill(signal.SIGINT)
        code = run.proc.wait(60)
    finally:
        run.close()
    out = run.stdout() + run.stderr()
    note(f"stop signal: Ctrl-C twice on srun: srun exit {code}, checkpoints {run.checkpoints()}")
    assert "one more within 1 sec to abort" in out, "srun's first Ctrl-C reports, no more"
    assert "sending Ctrl-C" in out and "forcing job termination" in out, out[-2000:]
    assert code != 0, f"srun exits non-zero: its tasks were killed (got {code})"
