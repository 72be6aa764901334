"""sft-dp on more than one node (issue 18): a real Slurm cluster of two network-namespace hosts
(scripts/slurm_cluster.sh --nodes 2: node1 and node2, each with its own address, hostname, slurmd and
TmpFS; one shared file system; Open MPI between the hosts over TCP on the bridge), driving the real
batch scripts:
1. sbatch --nodes=2 --ntasks-per-node=2 slurm/cpu.sbatch equals mpirun -np 4 on one host (losses
   within 1e-6 relative), and the placement line is what slurm/README.md says: ranks 0-1 on node1,
   2-3 on node2, local ranks 0-1 on each.
2. The hosts share no memory transport: with Open MPI's TCP taken away the job cannot start.
3. A train file that only node1 can see: every rank exits 2, one message names node2, nothing written.
4. USR1 to the batch shell of a 2-node job (what --signal=B:USR1@120 delivers): checkpoint, clean
   exit, requeue, resume, same trajectory as uninterrupted; and the real pre-timeout signal
   (--time=1 --signal=B:USR1@58) on 2 nodes: checkpoint, clean exit, requeue, resume.
5. A cut link (node2's veth down mid-run): the job ends within collective_timeout_s + 30 s, rank 0
   names node2; the link healed, a resubmission resumes from the newest checkpoint, same trajectory.
6. A lost node (every process of node2 killed, slurmd included): the job ends, node2 is DOWN, and
   resubmitting with --nodes=1 resumes at world size 2 on the same trajectory (1e-5 relative) from
   the newest checkpoint the two hosts wrote (one shard per rank, SPEC §5).
Skipped only where Slurm cannot be installed or the kernel allows no namespaces (slurm_cluster.sh
exit 3). Each fault's time to the job's end is printed (note)."""
import os
import shutil
import subprocess
import time

import pytest

from harness import SFT_TRAIN, SOURCE, checkpoint_state, read_params, run_train
from slurm_helpers import (assert_completed, assert_same_metrics, job_config, job_log, metrics_steps, pid_alive,
                           running_cluster)

CPU_SBATCH = os.path.join(SOURCE, "slurm", "cpu.sbatch")
JOB_ENV = {"SFTDP_TRAIN": SFT_TRAIN}
TWO_NODES = ["--nodes=2", "--ntasks-per-node=2"]
# Fault runs: ~20 ms a step on 4 ranks; a checkpoint every 10 steps; a 5 s collective deadline.
TIMEOUT_S = 5
SLOW = {"emb_dim": 128, "mlp_dim": 512, "num_heads": 4, "steps": 300, "eval_interval": 0,
        "checkpoint_period": 10, "collective_timeout_s": TIMEOUT_S}
SLOW_ARGS = [f"{k}={v}" for k, v in SLOW.items()]


class Env:
    def __init__(self, d, cluster):
        self.d, self.cluster = d, cluster
        self.cfg = job_config(d)

    def submit(self, run_name, sbatch_options, args=(), env_extra=None):
        return self.cluster.submit(CPU_SBATCH, [self.cfg, f"run_name={run_name}", *args],
                                   [f"--chdir={self.d}", *sbatch_options], dict(JOB_ENV, **(env_extra or {})))

    def run_job(self, run_name, sbatch_options, args=(), env_extra=None, note=None):
        t0 = time.monotonic()
        job_id = self.submit(run_name, sbatch_options, args, env_extra)
        fields = self.cluster.wait_job(job_id, timeout=180)
        if note:
            note(f"job {job_id} ({run_name}, {' '.join(sbatch_options)}): {fields['JobState']} "
                 f"{fields['ExitCode']} in {time.monotonic() - t0:.1f} s")
        return job_id, fields

    def run_dir(self, run_name):
        return f"{self.d}/out/{run_name}"

    def wait_steps(self, job_id, run_name, steps, timeout=120):
        """Until the running job has recorded `steps` steps; fails at once, with its log, if the job
        is no longer running (or never gets there)."""
        deadline = time.monotonic() + timeout
        while (done := metrics_steps(self.run_dir(run_name))) < steps:
            fields = self.cluster.job(job_id)
            if fields.get("JobState") not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
                log = job_log(fields) if os.path.exists(fields.get("StdOut", "")) else "(no log yet)"
                raise AssertionError(f"job {job_id} ({run_name}): {fields.get('JobState')} "
                                     f"{fields.get('Reason')}, {done} of {steps} steps\n{log[-3000:]}")
            time.sleep(0.05)
        return done


@pytest.fixture(scope="module")
def env(note):
    with running_cluster(note, "multi-node Slurm tests", nodes=2) as (d, cluster):
        yield Env(d, cluster)


@pytest.fixture(autouse=True)
def no_job_left(env):
    """After each test (passed or not), no job of it still runs into the next one, and both nodes
    are up (a fault test that failed half-way may have left node2 cut or down)."""
    yield
    if env.cluster.stopped:
        return
    jobs = env.cluster.cmd("squeue", "-h", "-o", "%i").split()
    if jobs:
        env.cluster.cmd("scancel", *jobs)
        deadline = time.monotonic() + 60
        while env.cluster.cmd("squeue", "-h", "-o", "%i").split() and time.monotonic() < deadline:
            time.sleep(0.5)
    if env.cluster.node_state("node2") not in ("idle", "mixed", "allocated"):
        env.cluster.fault("heal", "node2")
        env.cluster.fault("revive", "node2")


@pytest.fixture(scope="module")
def slow_reference(env):
    """The fault runs' trajectory uninterrupted: mpirun -np 4 on one host."""
    run_train(env.cfg, dict(SLOW, run_name="reference"), np_=4)
    return env.run_dir("reference")


def last_status(log):
    """sft_train's exit status as the batch script's last line about it says."""
    lines = [line for line in log.splitlines() if line.startswith("sftdp: sft_train ended with status")]
    return int(lines[-1].rsplit(" ", 1)[1]) if lines else None


def assert_failed_run(log):
    """The run ended non-zero: the batch script says so, or Slurm ended the job for the node's
    failure first (then the batch shell itself is killed before it can say anything)."""
    status = last_status(log)
    assert status not in (None, 0) or (status is None and "DUE TO NODE FAILURE" in log), \
        f"the run ended non-zero (status {status})\n{log[-3000:]}"


def wait_for_end(cluster, job_id, limit):
    """(seconds until the job's run ended: its batch script exited, the job no longer RUNNING;
    seconds until Slurm let go of it too: terminal, or PENDING again if requeued; its fields).
    COMPLETING in between: Slurm waits for the epilog of a node it cannot reach, or marks it DOWN."""
    t0 = time.monotonic()
    fields = cluster.wait_job(job_id, timeout=limit, until=lambda f: f.get("JobState") != "RUNNING")
    ended = time.monotonic() - t0
    fields = cluster.wait_job(job_id, timeout=limit, until=lambda f: f.get("JobState") not in ("RUNNING", "COMPLETING"))
    return ended, time.monotonic() - t0, fields


def test_two_nodes_equal_one_host(env, note):
    """1. 2 nodes x 2 tasks = mpirun -np 4 on one host; ranks where the README says."""
    _, fields = env.run_job("two_nodes", TWO_NODES, note=note)
    assert_completed(fields, "cpu.sbatch on 2 nodes")
    run_train(env.cfg, {"run_name": "mpirun4"}, np_=4)
    worst = assert_same_metrics(env.run_dir("two_nodes"), env.run_dir("mpirun4"), "2 nodes vs mpirun -np 4")
    note(f"2 nodes x 2 tasks vs mpirun -np 4: losses within {worst:.1e} relative")
    log = job_log(fields)
    want = ("placement: 4 ranks on 2 hosts; node1: ranks 0-1, local ranks 0-1, cpu; "
            "node2: ranks 2-3, local ranks 0-1, cpu")
    assert want in log, f"the placement line\n{log[:2000]}"
    # slurm/launch.sh puts the step's PMIx fences on Slurm's ring (test_startup_repeat.py: why).
    assert "warning: SLURM_PMIX_FENCE" not in log, log[:2000]
    assert "on node[1-2]" in log, "the job header names both nodes"


def test_hosts_share_no_memory_transport(env, note):
    """2. Ranks on different hosts need TCP: with only shared memory (vader) and self, MPI_Init fails."""
    _, fields = env.run_job("no_tcp", TWO_NODES, env_extra={"OMPI_MCA_btl": "self,vader"}, note=note)
    assert fields["JobState"] == "FAILED", fields["JobState"]
    assert "unable to reach each other" in job_log(fields), job_log(fields)[-2000:]


def test_file_one_host_cannot_see(env, note):
    """3. train_files under the host-private directory: only node1 holds the file."""
    private = os.path.join(env.cluster.state_dir, "local")  # each host mounts its own here
    shutil.copy(f"{env.d}/train.h5", os.path.join(env.cluster.state_dir, "nodes", "node1", "local", "train.h5"))
    _, fields = env.run_job("one_host_file", TWO_NODES, [f"train_files={private}/train.h5"], note=note)
    log = job_log(fields)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "2:0", f"{fields['ExitCode']}\n{log[-2000:]}"
    errors = [line for line in log.splitlines() if line.startswith("error:")]  # sft_train's, not Slurm's
    assert errors == [f"error: {private}/train.h5: not found (run sft_prepare first?) (seen by ranks 2-3 on node2)"], \
        f"one message, naming node2:\n{log[-2000:]}"
    assert "tasks 0-1: Exited with exit code 2" in log and "tasks 2-3: Exited with exit code 2" in log, \
        f"every rank exits 2\n{log[-2000:]}"
    assert not os.path.exists(env.run_dir("one_host_file")), "nothing written"


def test_usr1_to_batch_shell_of_two_nodes(env, slow_reference, note):
    """4. The pre-timeout signal on 2 nodes: checkpoint, clean exit, requeue, resume, same trajectory."""
    cluster = env.cluster
    job_id = env.submit("usr1", TWO_NODES, SLOW_ARGS)
    at = env.wait_steps(job_id, "usr1", 20)
    t0 = time.monotonic()
    cluster.cmd("scancel", "--signal=USR1", "--batch", job_id)
    stop_s, _, fields = wait_for_end(cluster, job_id, 120)
    note(f"job {job_id}: USR1 to the batch shell after step {at}: its run ended in {stop_s:.1f} s")
    assert fields.get("Restarts") == "1", f"the job requeued itself (Restarts={fields.get('Restarts')})"
    # Slurm holds a requeued job back for cred_expire + 1 s (BeginTime; the test cluster: 11 s).
    fields = cluster.wait_job(job_id, timeout=180)
    assert_completed(fields, "the requeued 2-node job")
    log = job_log(fields)
    assert "stop signal received: checkpoint at step" in log and "requeueing job" in log, log[-3000:]
    assert "resuming from" in log, log[-3000:]
    assert_same_metrics(env.run_dir("usr1"), slow_reference, "stopped, requeued and resumed on 2 nodes")
    note(f"job {job_id}: requeued and completed {time.monotonic() - t0:.1f} s after the signal")


def test_time_limit_signal_on_two_nodes(env, note):
    """4b. The real thing: --time=1 --signal=B:USR1@58. slurmctld checks time limits every 30 s, so
    USR1 reaches the batch shell 2-32 s after the start; the job checkpoints, exits cleanly and
    requeues; started again (with a longer limit) it resumes from that checkpoint on both nodes."""
    cluster = env.cluster
    args = [*SLOW_ARGS, "steps=100000", "checkpoint_period=0"]  # still running when the signal comes
    job_id = env.submit("time_limit", [*TWO_NODES, "--time=1", "--signal=B:USR1@58"], args)
    t0 = time.monotonic()
    cluster.wait_job(job_id, timeout=60, until=lambda f: f.get("JobState") != "PENDING")
    _, _, fields = wait_for_end(cluster, job_id, 90)
    log = job_log(fields)
    note(f"job {job_id}: the time-limit USR1 ended its run {time.monotonic() - t0:.1f} s after submission")
    assert fields.get("Restarts") == "1", f"requeued (Restarts={fields.get('Restarts')})\n{log[-3000:]}"
    assert "sftdp: SIGUSR1 received" in log and "requeueing job" in log, log[-3000:]  # after a clean exit
    stops = [line for line in log.splitlines() if line.startswith("stop signal received: checkpoint at step")]
    assert len(stops) == 1, log[-3000:]
    step = int(stops[0].split("checkpoint at step ")[1].split()[0])
    cluster.cmd("scontrol", "update", f"JobId={job_id}", "TimeLimit=10")  # no second signal
    cluster.wait_job(job_id, timeout=60, until=lambda f: "resuming from" in job_log(f))
    assert f"resuming from {env.run_dir('time_limit')}/checkpoints/step_{step}" in job_log(cluster.job(job_id))
    env.wait_steps(job_id, "time_limit", step + 5, timeout=60)  # and trains on, on both nodes
    assert "on node[1-2]" in job_log(cluster.job(job_id)).split("restart 1")[1]
    cluster.cmd("scancel", job_id)
    cluster.wait_job(job_id, timeout=60)


def test_cut_link_ends_the_job_and_it_resumes(env, slow_reference, note):
    """5. node2's link down mid-run: the job ends within collective_timeout_s + 30 s, rank 0 names
    node2; the link healed and node2 back, the resubmitted job resumes from the newest checkpoint."""
    cluster = env.cluster
    job_id = env.submit("cut", TWO_NODES, SLOW_ARGS)
    at = env.wait_steps(job_id, "cut", 25)
    cluster.fault("cut", "node2")
    end_s, released_s, fields = wait_for_end(cluster, job_id, TIMEOUT_S + 60)
    note(f"job {job_id}: node2's link cut after step {at}: the run ended in {end_s:.1f} s "
         f"(limit collective_timeout_s + 30 = {TIMEOUT_S + 30} s); job {fields['JobState']} after {released_s:.1f} s")
    log = job_log(fields)
    assert end_s <= TIMEOUT_S + 30, f"ended after {end_s:.1f} s\n{log[-3000:]}"
    assert_failed_run(log)
    # "ranks 2-3 (node2) reached ... but have given no sign of life", or rank 2 and rank 3 apart
    # (one had not yet entered the collective); either way the host is named as a whole.
    rank0 = [line for line in log.splitlines() if line.startswith("[rank 0@node1] error:")]
    assert rank0 and "no rank on host node2 answers" in rank0[0], f"rank 0 names node2\n{log[-3000:]}"
    ckpts = sorted(int(f[5:]) for f in os.listdir(f"{env.run_dir('cut')}/checkpoints")  # committed step_<S>/
                   if f[5:].isdigit() and os.path.isfile(f"{env.run_dir('cut')}/checkpoints/{f}/index.h5"))
    newest = ckpts[-1]
    assert 10 <= newest <= at + 10, f"checkpoints {ckpts}, cut after step {at}"
    assert read_params(f"{env.run_dir('cut')}/checkpoints/step_{newest}"), "the newest checkpoint opens"

    # The run ends by srun giving up on node2's tasks (KillWait + 2 s after rank 0's abort: the job
    # FAILED) or by slurmctld marking node2 DOWN first (NODE_FAIL: --requeue puts it back in the
    # queue, waiting for node2). Either way the user resubmits once the node is back.
    if fields.get("JobState") == "PENDING":
        cluster.cmd("scancel", job_id)
    cluster.fault("heal", "node2")
    cluster.fault("revive", "node2")  # its slurmd again: a rebooted node (the old one waits on srun)
    _, fields = env.run_job("cut", TWO_NODES, SLOW_ARGS, note=note)
    assert_completed(fields, "the resubmitted job after the link came back")
    log = job_log(fields)
    assert f"resuming from {env.run_dir('cut')}/checkpoints/step_{newest}" in log, log[-3000:]
    assert_same_metrics(env.run_dir("cut"), slow_reference, "cut, resubmitted and resumed")


def test_lost_node_then_one_node_resumes(env, slow_reference, note):
    """6. Every process of node2 killed: the job ends, node2 is DOWN; resubmitted on node1 alone (world
    size 2), the run resumes from the newest checkpoint on the same trajectory (1e-5 relative)."""
    cluster = env.cluster
    job_id = env.submit("lost", TWO_NODES, SLOW_ARGS)
    at = env.wait_steps(job_id, "lost", 25)
    cluster.fault("kill", "node2")
    end_s, released_s, fields = wait_for_end(cluster, job_id, TIMEOUT_S + 60)
    log = job_log(fields)
    note(f"job {job_id}: node2 killed after step {at}: the run ended in {end_s:.1f} s; "
         f"job {fields['JobState']} after {released_s:.1f} s")
    assert end_s <= TIMEOUT_S + 30, f"ended after {end_s:.1f} s\n{log[-3000:]}"
    assert_failed_run(log)
    # Rank 0's deadline message ("no rank on host node2 answers"), or Open MPI's own report of the
    # lost peer ("Peer host: node2") where it noticed the closed connections first.
    named = [line for line in log.splitlines() if "node2" in line and ("error:" in line or "Peer host" in line)]
    assert named, f"the log names node2\n{log[-3000:]}"
    deadline = time.monotonic() + 30
    while not cluster.node_state("node2").startswith("down") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster.node_state("node2").startswith("down"), f"node2 is {cluster.node_state('node2')}"
    cluster.cmd("scancel", job_id)  # requeued, it would wait for node2
    # Committed checkpoints only: a save in flight when node2 died left a step_<S>/ without index.
    ckpts = f"{env.run_dir('lost')}/checkpoints"
    newest = max(int(f[5:]) for f in os.listdir(ckpts) if f[5:].isdigit() and os.path.isfile(f"{ckpts}/{f}/index.h5"))
    # One checkpoint written from both hosts: a shard per rank, ranks 2-3 on node2 (SPEC §5).
    assert sorted(os.listdir(f"{ckpts}/step_{newest}")) == ["index.h5"] + [f"shard_{r}.h5" for r in range(4)]
    assert checkpoint_state(f"{ckpts}/step_{newest}")["world_size"] == 4

    _, fields = env.run_job("lost", ["--nodes=1", "--ntasks=2"], SLOW_ARGS, note=note)
    assert_completed(fields, "the resubmission on one node")
    log = job_log(fields)
    assert f"resuming from {env.run_dir('lost')}/checkpoints/step_{newest}" in log, log[-3000:]
    assert "placement: 2 ranks on 1 host; node1: ranks 0-1" in log, log[:2000]
    # The next 50 steps (the elastic-resume tests' bound; a different summation order drifts slowly).
    worst = assert_same_metrics(env.run_dir("lost"), slow_reference, "resumed at world size 2", rel=1e-5,
                                from_step=newest, to_step=newest + 50)
    note(f"resumed at world size 2 from step {newest}: the next 50 losses within {worst:.1e} relative of 4 ranks'")
    assert metrics_steps(env.run_dir("lost")) == SLOW["steps"]


def test_cluster_stops_cleanly(env):
    """Last: daemons stopped by PID, the namespaces and the bridge deleted by name."""
    cluster = env.cluster
    pids = cluster.daemon_pids()
    with open(os.path.join(cluster.state_dir, "hosts.env")) as f:
        tag = dict(line.strip().split("=", 1) for line in f if "=" in line)["HOSTS_TAG"]
    cluster.stop()
    assert {"munged", "slurmctld", "slurmd-node1", "slurmd-node2"} <= set(pids), pids
    assert not any(pid_alive(p) for p in pids.values()), f"alive: {[n for n, p in pids.items() if pid_alive(p)]}"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert tag not in netns and tag not in links, f"left behind:\n{netns}\n{links}"
    assert not cluster.job_processes(), f"no job process left: {cluster.job_processes()}"
