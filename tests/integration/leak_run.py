"""tests/integration/leak_run.py — a long run that must not leak: sft_train on 2 CPU ranks (mpirun)
of the tiny model with eval, checkpoints (keep_checkpoints) and TensorBoard on, each rank's resident
memory (VmRSS) and open file descriptors sampled from /proc every 10 ms against the step it is at.
Growth is measured from the first `warm` steps on: the median of the first tenth of the samples
taken from step `warm` on against the median of the last tenth (at least 5 each; both windows hold
checkpoint and eval steps alike), and likewise the open descriptors (a checkpoint or event file open
at the moment of a sample is not a leak; a count that climbs is); the largest samples after `warm`
are reported too. Samples at the last step are left out: there the final checkpoint is written and
MPI tears down, and RSS and descriptors move as the process frees and closes. The windows are counted in samples, not steps: the tiny model runs over 1,000
steps/s, and a window of 100 steps (0.1 s) once held no sample at all.

  /usr/bin/python3 tests/integration/leak_run.py [--steps 20000] [--warm 1000]

prints a table per rank and exits 1 when RSS grew by 1% or more, or any descriptor was left open.
CI runs 2,000 steps (test_no_leak.py); bench/results/leak_*.md holds the 20,000-step run."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import MPI_ENV, SFT_TRAIN, TINY_MODEL, children, make_data, world_rank, write_config  # noqa: E402


def leak_config(d, steps):
    make_data(f"{d}/train.h5", 512, seed=1)
    make_data(f"{d}/eval.h5", 32, seed=2)
    return write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, run_name="long", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
        eval_files=f"{d}/eval.h5", eval_interval=250, max_target_length=16, global_batch_size=8,
        steps=steps, learning_rate=1e-3, warmup_steps_fraction=0.01, enable_data_shuffling=True,
        data_shuffle_seed=5, checkpoint_period=500, keep_checkpoints=2, log_period=500, hardware="cpu", seed=3))


def proc_sample(pid):
    """(VmRSS in KiB, open descriptors) of pid, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


class StepReader:
    """The newest step in metrics.jsonl, reading only what was appended since the last call."""

    def __init__(self, path):
        self.path, self.offset, self.step, self.partial = path, 0, 0, ""

    def __call__(self):
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except OSError:
            return self.step
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        for line in lines:
            if line and '"eval_loss"' not in line:
                self.step = max(self.step, json.loads(line)["step"])
        return self.step


def run(d, steps, period_s=0.01):
    """Runs the job; returns ({rank: [(step, rss_kib, fds)]}, wall seconds, completed process)."""
    config = leak_config(d, steps)
    env = dict(os.environ, **MPI_ENV)
    t0 = time.monotonic()
    p = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", SFT_TRAIN, config], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = StepReader(f"{d}/out/long/metrics.jsonl")
    ranks, samples = {}, {0: [], 1: []}
    while p.poll() is None:
        if len(ranks) < 2:
            for pid in children(p.pid):
                r = world_rank(pid)
                if r is not None:
                    ranks[r] = pid
        step = reader()
        for r, pid in ranks.items():
            s = proc_sample(pid)
            if s and step > 0:
                samples[r].append((step, *s))
        time.sleep(period_s)
    out = p.stdout.read()
    return samples, time.monotonic() - t0, p.returncode, out


def growth(samples, steps, warm):
    """Per rank: dict of the figures the table shows."""
    after = [s for s in samples if warm <= s[0] < steps]  # the last step, final save and teardown left out
    window = max(5, len(after) // 10)
    if len(after) < 2 * window:
        raise RuntimeError(f"too few samples: {len(after)} in steps [{warm}, {steps}), {2 * window} needed")
    first, last = after[:window], after[-window:]
    rss0, rss1 = statistics.median(s[1] for s in first), statistics.median(s[1] for s in last)
    return {"samples": len(samples), "rss_warm_kib": rss0, "rss_end_kib": rss1, "rss_growth": rss1 / rss0 - 1,
            "rss_max_kib": max(s[1] for s in after), "fds_warm": round(statistics.median(s[2] for s in first)),
            "fds_end": round(statistics.median(s[2] for s in last)), "fds_max": max(s[2] for s in after)}


def table(results, steps, warm, wall_s):
    lines = [f"{steps} steps on 2 ranks in {wall_s:.0f} s ({steps / wall_s:.0f} steps/s); growth from step {warm}",
             "", "| rank | samples | RSS at warm-up (MiB) | RSS at the end (MiB) | growth | largest RSS after warm-up (MiB) "
             "| open fds: warm-up / end / largest |", "|---|---|---|---|---|---|---|"]
    for r, g in sorted(results.items()):
        lines.append(f"| {r} | {g['samples']} | {g['rss_warm_kib'] / 1024:.2f} | {g['rss_end_kib'] / 1024:.2f} | "
                     f"{100 * g['rss_growth']:+.2f}% | {g['rss_max_kib'] / 1024:.2f} | "
                     f"{g['fds_warm']} / {g['fds_end']} / {g['fds_max']} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--warm", type=int, default=1000)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sftdp_leak_")
    samples, wall_s, rc, out = run(d, a.steps)
    if rc != 0:
        print(out[-3000:])
        print(f"error: the run exited {rc} (work directory {d})")
        return 1
    results = {r: growth(s, a.steps, a.warm) for r, s in samples.items()}
    print(table(results, a.steps, a.warm, wall_s))
    ok = all(g["rss_growth"] < 0.01 and g["fds_end"] <= g["fds_warm"] for g in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
