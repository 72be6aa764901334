"""tests/integration/chaos.py — the seeded fault soak (issue 24; scripts/chaos.sh runs it): one 2-node
x 2-task job of slurm/cpu.sbatch (--requeue) on the namespace cluster, disturbed at seeded random steps
by a seeded random sequence of faults, each followed by what the job documents (slurm/README.md):

  kill_rank           SIGKILL of one rank: the job fails; resubmitted, it resumes
  stop_rank           SIGSTOP of one rank: collective_timeout_s ends the job; resubmitted
  kill_node           every process of a node killed: the job fails; the node revived; resubmitted
  cut_link            a node's link cut: the job fails; healed, the node revived; resubmitted
  usr1                Slurm's pre-timeout USR1 to the batch shell: checkpoint, the job requeues itself
  full_disk           the file system of the run fills: the next checkpoint write fails (exit 1);
                      space freed, resubmitted, it resumes from the checkpoint before
  damaged_checkpoint  a rank killed and one shard file of the newest checkpoint (a step_<S>/ directory,
                      SPEC §5) damaged on disk before the resubmission: the run moves the directory
                      aside (.corrupt) and resumes from the one before
  kill_in_flight_save a rank killed while a checkpoint is written in the background (async_checkpointing,
                      the default): the ranks are stopped when a step_<S>/ without index appears, and
                      one is killed only if, all of them stopped, some rank's shard is not in place yet
                      (else they may have agreed to commit: they go on to the next save); the directory
                      stays uncommitted, the resubmission removes it and resumes from the one before
  missing_shard       a rank killed and one shard file of the newest checkpoint deleted before the
                      resubmission: the run names the missing file, moves the directory aside and
                      resumes from the one before

until the configured steps are done. Then the run must equal an undisturbed 2-node job of the same
config: final parameters and AdamW moments bitwise, metrics.jsonl and TensorBoard every step exactly
once with the undisturbed losses, every kept checkpoint readable, no temporary file, no process left
on any host, no step_<S>/ without its index. Each fault's time lost is from the fault to the resumed run's next step.
The run directory is on a tmpfs mounted before the cluster starts (the hosts see it; the full-disk
fault fills it), so this needs root, as the cluster does."""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

from harness import SFT_TRAIN, SOURCE, TINY_MODEL, make_data, read_metrics, read_params, write_config
from slurm_helpers import job_log, metrics_steps, pid_alive

KINDS = ("kill_rank", "stop_rank", "kill_node", "cut_link", "usr1", "full_disk", "damaged_checkpoint",
         "kill_in_flight_save", "missing_shard")
CPU_SBATCH = os.path.join(SOURCE, "slurm", "cpu.sbatch")
TWO_NODES = ["--nodes=2", "--ntasks-per-node=2"]
PERIOD = 5  # a checkpoint every 5 steps
MODEL = dict(TINY_MODEL, emb_dim=128, mlp_dim=512, num_heads=4)  # ~20 ms a step on 4 ranks here
TMPFS_MIB = 48


def mount_tmpfs(path, mib=TMPFS_MIB):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "sftdp-chaos", path], check=True)


def unmount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


def checkpoints(run_dir):
    """[(S, path)] of the checkpoints of a run, ascending S: step_<S>/ directories holding index.h5
    (what sft_train writes) and step_<S>.h5 files (the single-file form)."""
    found = []
    for path in glob.glob(f"{run_dir}/checkpoints/step_*"):
        m = re.fullmatch(r"step_(\d+)(\.h5)?", os.path.basename(path))
        if m and (os.path.isfile(path) if m[2] else os.path.isfile(f"{path}/index.h5")):
            found.append((int(m[1]), path))
    return sorted(found)


def uncommitted(run_dir):
    """step_<S>/ directories without index.h5: a checkpoint being written (or one never finished)."""
    return sorted(p for p in glob.glob(f"{run_dir}/checkpoints/step_*")
                  if re.fullmatch(r"step_\d+", os.path.basename(p)) and not os.path.isfile(f"{p}/index.h5"))


def shards_renamed(step_dir):
    """How many shard_<r>.h5 of a step_<S>/ are in place (renamed from their temporary names): a rank
    reports its background write ended only after that rename, so while one is missing the ranks cannot
    have agreed to commit (SPEC §5) and killing any rank leaves the directory without its index."""
    return sum(1 for n in os.listdir(step_dir) if re.fullmatch(r"shard_\d+\.h5", n)) if os.path.isdir(step_dir) else 0


def all_stopped(pids, timeout=10):
    """Waits until every thread of every pid is stopped (state T): SIGSTOP takes effect only once a thread
    leaves the system call it is in (an fsync, a rename), so os.kill's return does not mean stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for pid in pids:
            for task in glob.glob(f"/proc/{pid}/task/*/stat"):
                try:
                    with open(task) as f:
                        states.append(f.read().rpartition(")")[2].split()[0])
                except OSError:
                    pass  # a thread that ended meanwhile
        if all(st in ("T", "t") for st in states):
            return True
        time.sleep(0.001)
    return False


def checkpoint_bytes(path):
    """The size of a checkpoint: its file, or every file of its directory."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names)


def soak_config(d, out_dir, steps):
    make_data(f"{d}/train.h5", 512, seed=1)
    make_data(f"{d}/eval.h5", 32, seed=2)
    return write_config(f"{d}/c.yml", **dict(
        MODEL, run_name="soak", base_output_directory=out_dir, train_files=f"{d}/train.h5",
        eval_files=f"{d}/eval.h5", eval_interval=20, max_target_length=16, global_batch_size=16, steps=steps,
        learning_rate=3e-3, warmup_steps_fraction=0.05, enable_data_shuffling=True, data_shuffle_seed=5,
        checkpoint_period=PERIOD, keep_checkpoints=3, collective_timeout_s=5, log_period=1, hardware="cpu",
        seed=3))


class Soak:
    def __init__(self, d, cluster, seed, faults, log=print):
        self.d, self.cluster, self.rng, self.nfaults, self.log = d, cluster, random.Random(seed), faults, log
        self.steps = 40 + 25 * faults
        self.out = os.path.join(d, "fs")  # the tmpfs
        self.config = soak_config(d, self.out, self.steps)
        self.run_dir = os.path.join(self.out, "soak")
        self.records = []  # one dict per fault
        self.jobs = []

    # --- the job ---
    def submit(self, run_name="soak", base=None):
        args = [self.config, f"run_name={run_name}"] + ([f"base_output_directory={base}"] if base else [])
        job = self.cluster.submit(CPU_SBATCH, args, [f"--chdir={self.d}", *TWO_NODES], {"SFTDP_TRAIN": SFT_TRAIN})
        self.jobs.append(job)
        return job

    def state(self, job):
        return self.cluster.job(job).get("JobState")

    def wait_state(self, job, done, timeout=120):
        return self.cluster.wait_job(job, timeout=timeout, until=done)

    def rank_pids(self, job):
        """PIDs of this job's sft_train processes on every host (their environment names the job)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() != "sft_train":
                        continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if f"SLURM_JOB_ID={job}".encode() in f.read().split(b"\0") and pid_alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                pass
        return sorted(found)

    def wait_step(self, job, step, timeout=180):
        """Until the running job has recorded `step`; None if the job ended first."""
        deadline = time.monotonic() + timeout
        while metrics_steps(self.run_dir) < step:
            if self.state(job) not in ("PENDING", "RUNNING", "CONFIGURING") or time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return metrics_steps(self.run_dir)

    def wait_ended(self, job, timeout=120):
        """Until the job is neither RUNNING nor COMPLETING; a requeued (PENDING) one is cancelled
        when cancel_pending (it would wait for a node that is down)."""
        return self.wait_state(job, lambda f: f.get("JobState") not in ("RUNNING", "COMPLETING", "CONFIGURING"),
                               timeout)

    def cancel_if_pending(self, job):
        if self.state(job) == "PENDING":
            self.cluster.cmd("scancel", job)
            self.wait_state(job, lambda f: f.get("JobState") == "CANCELLED", 60)

    def log_size(self, job):
        path = self.cluster.job(job).get("StdOut", "")
        return os.path.getsize(path) if os.path.exists(path) else 0

    def next_step_after_resume(self, job, t_fault, offset=0, timeout=180):
        """(checkpoint step resumed from, seconds from the fault to the resumed run's next step),
        from the job's log after `offset` (a requeued job appends to its log)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fields = self.cluster.job(job)
            if os.path.exists(fields.get("StdOut", "")):
                with open(fields["StdOut"], errors="replace") as f:
                    f.seek(offset)
                    log = f.read()
                # "resuming from DIR/step_S (step S, ..." (a refused newer checkpoint adds a warning
                # that also says "resuming from the older ..."; the first line is the one that counts).
                found = list(re.finditer(r"resuming from \S*step_(\d+)(?:\.h5)? \(step", log))
                if found:
                    m = found[-1]
                    if re.search(rf"step {int(m[1]) + 1}/", log[m.end():]):
                        return int(m[1]), time.monotonic() - t_fault
            if fields.get("JobState") in ("FAILED", "CANCELLED", "COMPLETED", "NODE_FAIL", "TIMEOUT"):
                raise AssertionError(f"job {job} {fields.get('JobState')} before resuming\n{job_log(fields)[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"job {job}: no resumed step within {timeout} s")

    # --- faults: each returns the job that carries on ---
    def kill_rank(self, job, sig=signal.SIGKILL):
        pids = self.rank_pids(job)
        victim = self.rng.choice(pids)
        os.kill(victim, sig)
        self.wait_ended(job)
        self.cancel_if_pending(job)
        return self.submit(), f"pid {victim} of {len(pids)}"

    def stop_rank(self, job):
        return self.kill_rank(job, signal.SIGSTOP)

    def node_fault(self, job, fault, *recover):
        """fault (kill | cut) on a random node; when the job has ended, recover (heal, revive) it
        and resubmit."""
        node = self.rng.choice(["node1", "node2"])
        self.cluster.fault(fault, node)
        self.wait_ended(job)
        self.cancel_if_pending(job)
        for step in recover:
            self.cluster.fault(step, node)
        return self.submit(), node

    def kill_node(self, job):
        return self.node_fault(job, "kill", "revive")

    def cut_link(self, job):
        return self.node_fault(job, "cut", "heal", "revive")  # revive: its slurmd still waits on the old step

    def usr1(self, job):
        restarts = int(self.cluster.job(job).get("Restarts", "0"))
        self.cluster.cmd("scancel", "--signal=USR1", "--batch", job)
        # Requeued (held for cred_expire + 1 s), then running again under the same id.
        self.wait_state(job, lambda f: int(f.get("Restarts", "0")) > restarts, 120)
        return job, "batch shell"

    def full_disk(self, job):
        """Other jobs fill the file system: kept full (less than half a checkpoint free, room for
        metrics lines) until the run ends. Topped up, not filled once: a checkpoint that was being
        written when the disk filled still completes, its rotation frees the oldest one, and a disk
        filled once would have room for every later checkpoint again."""
        ckpt = max(checkpoint_bytes(p) for _, p in checkpoints(self.run_dir))
        filler = os.path.join(self.out, "filler")
        keep = ckpt // 2
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        chunk = b"\0" * (1 << 20)
        deadline, next_check = time.monotonic() + 180, 0.0
        try:
            while time.monotonic() < deadline:
                st = os.statvfs(self.out)
                free = st.f_bavail * st.f_frsize
                if free > keep:
                    try:
                        os.write(fd, chunk[:min(free - keep, len(chunk))])
                    except OSError:  # the run's own writes took the rest
                        pass
                    continue
                if time.monotonic() >= next_check:
                    if self.state(job) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                        break
                    next_check = time.monotonic() + 0.2
                time.sleep(0.002)
        finally:
            os.close(fd)
        self.wait_ended(job, timeout=180)
        fields = self.cluster.job(job)
        os.remove(filler)
        log = job_log(fields)
        assert "No space left on device" in log, f"the run ended for the full disk\n{log[-3000:]}"
        self.cancel_if_pending(job)
        return self.submit(), f"{keep >> 10} KiB left"

    def kill_then_newest_shard(self, job):
        """Kills a rank; once the job has ended, one shard file of the newest checkpoint (the file
        itself for a single-file one), drawn from its own generator, so that the seed's sequence of
        kinds and steps stays what it was when a checkpoint was one file."""
        pids = self.rank_pids(job)
        os.kill(self.rng.choice(pids), signal.SIGKILL)
        self.wait_ended(job)
        self.cancel_if_pending(job)
        step, newest = checkpoints(self.run_dir)[-1]
        return newest if os.path.isfile(newest) else \
            random.Random(step).choice(sorted(glob.glob(f"{newest}/shard_*.h5")))

    def damaged_checkpoint(self, job):
        damaged = self.kill_then_newest_shard(job)
        with open(damaged, "r+b") as f:
            f.truncate(os.path.getsize(damaged) // 2)
        return self.submit(), os.path.relpath(damaged, f"{self.run_dir}/checkpoints")

    def kill_in_flight_save(self, job, timeout=120):
        pids = self.rank_pids(job)
        victim = self.rng.choice(pids)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = uncommitted(self.run_dir)
            if not pending:
                time.sleep(0.001)
                continue
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            all_stopped(pids)
            # In flight only while some rank's shard is not in place: once all are, the ranks may already have
            # agreed to commit, and rank 0 would write the index after the kill (a commit, not a lost save).
            if any(shards_renamed(p) < len(pids) for p in uncommitted(self.run_dir)):
                os.kill(victim, signal.SIGKILL)
                for pid in pids:
                    if pid != victim:
                        os.kill(pid, signal.SIGCONT)
                break
            for pid in pids:  # written (or committed) meanwhile: let them go on to the next save
                os.kill(pid, signal.SIGCONT)
            while uncommitted(self.run_dir) == pending and time.monotonic() < deadline:
                time.sleep(0.001)
        else:
            raise TimeoutError(f"job {job}: no checkpoint in flight within {timeout} s")
        self.wait_ended(job)
        self.cancel_if_pending(job)
        assert any(not os.path.isfile(f"{p}/index.h5") for p in pending), pending
        return self.submit(), f"pid {victim} of {len(pids)} during {os.path.basename(pending[-1])}"

    def missing_shard(self, job):
        gone = self.kill_then_newest_shard(job)
        os.remove(gone)
        return self.submit(), os.path.relpath(gone, f"{self.run_dir}/checkpoints")

    # --- the soak ---
    def run(self):
        job = self.submit()
        for i in range(self.nfaults):
            kind = self.rng.choice(KINDS)
            # At least two checkpoints behind it, so that a damaged newest one has an older one to fall back on.
            target = max(metrics_steps(self.run_dir), 2 * PERIOD) + self.rng.randint(2, 12)
            if target > self.steps - 10:
                self.log(f"fault {i + 1}: only {self.steps - target} steps left; the soak ends")
                break
            if self.wait_step(job, target) is None:
                raise AssertionError(f"job {job} ended before step {target}\n{job_log(self.cluster.job(job))[-3000:]}")
            at, t0, offset = metrics_steps(self.run_dir), time.monotonic(), self.log_size(job)
            previous = job
            job, what = getattr(self, kind)(job)
            resumed, lost_s = self.next_step_after_resume(job, t0, offset if job == previous else 0)
            self.records.append({"fault": i + 1, "kind": kind, "what": what, "at_step": at, "resumed_from": resumed,
                                 "lost_s": lost_s, "job": job})
            self.log(f"fault {i + 1}: {kind} ({what}) after step {at}: resumed from step {resumed}, "
                     f"next step {lost_s:.1f} s after the fault")
        fields = self.cluster.wait_job(job, timeout=600)
        assert fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0", \
            f"the last job {job}: {fields.get('JobState')} {fields.get('ExitCode')}\n{job_log(fields)[-3000:]}"
        return self.records

    def reference(self):
        """The undisturbed run: the same job, submitted once, on the same 2 nodes (not on the tmpfs)."""
        base = os.path.join(self.d, "reference")
        job = self.submit("soak", base)
        fields = self.cluster.wait_job(job, timeout=600)
        assert fields.get("JobState") == "COMPLETED", f"reference {fields.get('JobState')}\n{job_log(fields)[-3000:]}"
        return os.path.join(base, "soak")


def compare(run_dir, ref_dir, steps):
    """What must hold at the end; returns a list of problems (empty: nothing lost)."""
    problems = []
    final = f"checkpoints/step_{steps}"
    for group in ("params", "opt/m", "opt/v"):
        a, b = read_params(f"{run_dir}/{final}", group), read_params(f"{ref_dir}/{final}", group)
        differ = [k for k in b if k not in a or not np.array_equal(a[k], b[k])]
        if differ or set(a) != set(b):
            problems.append(f"{group} not bitwise equal to the undisturbed run: {differ[:5]}")
    train, evals = read_metrics(run_dir)
    rtrain, revals = read_metrics(ref_dir)
    steps_seen = [m["step"] for m in train]
    if steps_seen != list(range(1, steps + 1)):
        dup = sorted({s for s in steps_seen if steps_seen.count(s) > 1})
        problems.append(f"metrics.jsonl steps: {len(steps_seen)} lines, duplicates {dup[:10]}, "
                        f"missing {sorted(set(range(1, steps + 1)) - set(steps_seen))[:10]}")
    elif [m["loss"] for m in train] != [m["loss"] for m in rtrain]:
        problems.append("metrics.jsonl losses differ from the undisturbed run's")
    if [(e["step"], e["eval_loss"]) for e in evals] != [(e["step"], e["eval_loss"]) for e in revals]:
        problems.append(f"eval lines {[e['step'] for e in evals]} vs {[e['step'] for e in revals]}")
    problems += tensorboard_problems(run_dir, ref_dir)
    kept = [p for _, p in checkpoints(run_dir)]
    want = [f"{run_dir}/checkpoints/step_{s}" for s in range(steps - 2 * PERIOD, steps + 1, PERIOD)]
    if sorted(kept) != sorted(want):
        problems.append(f"checkpoints kept: {[os.path.basename(k) for k in kept]}, expected the newest 3")
    for path in kept:
        try:
            read_params(path)
        except (OSError, KeyError) as e:
            problems.append(f"{path}: unreadable ({e})")
    if uncommitted(run_dir):
        problems.append(f"checkpoint directories without an index left: {uncommitted(run_dir)}")
    temps = [p for p in glob.glob(f"{run_dir}/**/*", recursive=True) + glob.glob(f"{run_dir}/**/.*", recursive=True)
             if ".tmp" in os.path.basename(p)]
    if temps:
        problems.append(f"temporary files left: {temps}")
    return problems


def tensorboard_problems(run_dir, ref_dir):
    from tensorboard.backend.event_processing import event_accumulator

    def scalars(d):
        acc = event_accumulator.EventAccumulator(os.path.join(d, "tensorboard"),
                                                 size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}

    got, want = scalars(run_dir), scalars(ref_dir)
    problems = []
    for tag in sorted(set(got) | set(want)):
        g, w = got.get(tag, []), want.get(tag, [])
        if [s for s, _ in g] != [s for s, _ in w]:
            problems.append(f"TensorBoard {tag}: steps {len(g)} vs {len(w)} (each once: {len({s for s, _ in g}) == len(g)})")
        elif tag in ("train/loss", "eval/loss", "train/lr", "train/grad_norm") and g != w:
            problems.append(f"TensorBoard {tag}: values differ from the undisturbed run's")
    return problems


def leftover_processes(cluster, jobs):
    """sft_train processes of this soak's jobs (their environment names the job: other tests on the
    machine run sft_train too), and this cluster's job processes."""
    ids = {f"SLURM_JOB_ID={j}".encode() for j in jobs}
    left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "sft_train" and ids & _environ(p)]
    return left + cluster.job_processes()


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return set(f.read().split(b"\0"))
    except OSError:
        return set()


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def summary_table(records):
    """Faults by kind: count, time lost min / median / max."""
    lines = ["| fault | survived | time lost, fault to the resumed run's next step (s): min / median / max |",
             "|---|---|---|"]
    for kind in KINDS:
        lost = sorted(r["lost_s"] for r in records if r["kind"] == kind)
        if lost:
            lines.append(f"| {kind} | {len(lost)} | {lost[0]:.1f} / {lost[len(lost) // 2]:.1f} / {lost[-1]:.1f} |")
    return "\n".join(lines)


def remove_tree(path):
    shutil.rmtree(path, ignore_errors=True)


def dump(records, path):
    with open(path, "w") as f:
        json.dump(records, f, indent=1)


def soak(seed, faults, keep=False, log=print):
    """The whole soak on a fresh 2-node cluster: (fault records, problems, seconds, work dir)."""
    import tempfile

    from slurm_helpers import SlurmCluster
    d = tempfile.mkdtemp(prefix="sftdp_chaos_")
    os.chmod(d, 0o755)  # munged must enter the cluster's state dir below it
    fs = os.path.join(d, "fs")
    mount_tmpfs(fs)  # before the cluster: every host's mount namespace is a copy with it
    cluster = SlurmCluster(os.path.join(d, "cluster"), nodes=2)
    t0 = time.monotonic()
    records, problems = [], []
    try:
        cluster.start()
        s = Soak(d, cluster, seed, faults, log)
        ref = s.reference()
        records = s.run()
        problems = compare(s.run_dir, ref, s.steps)
        time.sleep(1)  # the last job's steps are gone once it is COMPLETED; give stragglers a second
        left = leftover_processes(cluster, s.jobs)
        if left:
            problems.append(f"processes left: {left}")
        corrupt = glob.glob(f"{s.run_dir}/checkpoints/*.corrupt*")
        log(f"{len(records)} faults in {s.steps} steps, jobs {' '.join(s.jobs)}; moved aside: "
            f"{[os.path.basename(c) for c in corrupt]}")
    finally:
        cluster.stop()
        if keep or problems or sys.exc_info()[0] is not None:  # the tmpfs goes; keep a copy of the run
            shutil.copytree(fs, os.path.join(d, "run"), symlinks=True, dirs_exist_ok=True)
        unmount(fs)
        if not keep and not problems:
            remove_tree(d)
    return records, problems, time.monotonic() - t0, d


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--records", help="write the fault records (JSON) here")
    a = ap.parse_args()
    records, problems, seconds, d = soak(a.seed, a.faults, a.keep, log=lambda line: print(line, flush=True))
    print(summary_table(records))
    print(f"seed {a.seed}: {len(records)} faults survived in {seconds:.0f} s; lost: "
          + ("nothing" if not problems else "; ".join(problems)))
    if a.records:
        dump(records, a.records)
    if problems or a.keep:
        print(f"work directory kept: {d}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
