"""Checkpoints that scale with the cluster (issue 36), measured on this machine's CPU ranks:

1. Time the training loop is blocked per checkpoint, and rank 0's memory during it: the same run (4 CPU
   ranks, zero_stage 3, a checkpoint every CKPT_EVERY steps) by today's sft_train (OLD: the single
   file rank 0 gathers and writes while every rank waits) and by this one with async_checkpointing
   false (every rank writes its shard at the boundary) and true (a thread writes it while training
   goes on). Blocked time of the checkpoint after step S = the gap between the console lines of steps
   S and S+1 minus step S+1's own step_time_s (metrics.jsonl): the same measure for every binary.
   Rank 0's resident memory is sampled (/proc/<pid>/status VmRSS every 10 ms): its peak in the
   checkpoint's gap against its peak over the step before; every rank's peak from /usr/bin/time.
2. Write throughput against the number of writing ranks (1, 2, 4) on one disk: a checkpoint's bytes
   over the slowest rank's write time as the log reports it (async_checkpointing false, so nothing
   else runs beside the write), gpt2-124m at zero_stage 0 (every rank writes 1/world of it).

  OLD=<today's sft_train> SFTDP_BUILD_DIR=build .pyref/bin/python bench/checkpoint_async.py [model] [out.md]
(without OLD the first table has the sharded rows only; THROUGHPUT=0 leaves out the second)
Prints Markdown tables (and writes them to out.md)."""
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/integration"))
from harness import MPI_ENV, SFT_TRAIN, children, make_data, tempdir, world_rank, write_config  # noqa: E402

MODEL = sys.argv[1] if len(sys.argv) > 1 else "smollm2-360m"
OUT_MD = sys.argv[2] if len(sys.argv) > 2 else None
OLD = os.environ.get("OLD")
WORLD, T, STEPS, CKPT_EVERY = 4, 32, 7, 2
VOCAB = 49152


def rank0_pid(mpirun_pid):
    """Rank 0's sft_train: a child of mpirun's /usr/bin/time wrapper (harness's process helpers)."""
    for wrapper in children(mpirun_pid):
        for pid in children(wrapper):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "sft_train" and world_rank(pid) == 0:
                        return pid
            except OSError:
                pass
    return None


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None


def run(binary, cfg, overrides, world, d, tag):
    """(stdout lines with their times, rank 0's RSS samples, every rank's peak MiB, run dir)."""
    rss_dir = f"{d}/rss_{tag}"
    os.makedirs(rss_dir, exist_ok=True)
    wrap = ["sh", "-c", f'exec /usr/bin/time -o "{rss_dir}/kb.$OMPI_COMM_WORLD_RANK" -f "%M" "$@"', "sh"]
    cmd = ["mpirun", "-np", str(world), "--oversubscribe", "-x", "OMP_NUM_THREADS=1"] + wrap + [
        binary, cfg, f"run_name={tag}", *overrides]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, **MPI_ENV))
    lines, samples, done = [], [], threading.Event()

    def sample():
        pid = None
        while not done.is_set():
            pid = pid or rank0_pid(p.pid)
            if pid and (r := rss_mib(pid)) is not None:
                samples.append((time.monotonic(), r))
            time.sleep(0.01)

    th = threading.Thread(target=sample)
    th.start()
    for line in p.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
    p.wait()
    done.set()
    th.join()
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n" + "\n".join(l for _, l in lines[-40:]))
    peaks = [int(open(f"{rss_dir}/kb.{r}").read().split()[-1]) / 1024 for r in range(world)]
    return lines, samples, peaks, f"{d}/out/{tag}"


def step_times(run_dir):
    with open(f"{run_dir}/metrics.jsonl") as f:
        return {j["step"]: j["step_time_s"] for j in map(json.loads, f) if "loss" in j}


def blocked(lines, samples, run_dir):
    """[(S, blocked s, rank-0 peak MiB in the gap, rank-0 peak MiB over step S)] for every periodic checkpoint."""
    at = {}
    for t, line in lines:
        m = re.match(r"step (\d+)/", line)
        if m:
            at.setdefault(int(m.group(1)), t)
    dt = step_times(run_dir)
    out = []
    for s in range(CKPT_EVERY, STEPS, CKPT_EVERY):
        gap = at[s + 1] - at[s]
        peak = max((r for t, r in samples if at[s] <= t <= at[s + 1] - dt[s + 1]), default=float("nan"))
        before = max((r for t, r in samples if at[s - 1] <= t <= at[s]), default=float("nan"))
        out.append((s, gap - dt[s + 1], peak, before))
    return out


def step_slowdown(run_dir):
    """Mean step_time_s of the steps right after a periodic checkpoint over the mean of the others
    (past step 1): what a background write beside training costs these CPU ranks."""
    dt = step_times(run_dir)
    after_steps = {s + 1 for s in range(CKPT_EVERY, STEPS, CKPT_EVERY)}
    after = [dt[s] for s in after_steps]
    others = [dt[s] for s in dt if s > 1 and s not in after_steps]
    return (sum(after) / len(after)) / (sum(others) / len(others))


def main():
    d = tempdir()
    data = f"{d}/train.h5"
    make_data(data, 64, T=T, vocab=VOCAB, seed=1)
    cfg = write_config(f"{d}/c.yml", model_name=MODEL, base_output_directory=f"{d}/out", train_files=data,
                       max_target_length=T, global_batch_size=WORLD, steps=STEPS, checkpoint_period=CKPT_EVERY,
                       keep_checkpoints=1, zero_stage=3, hardware="cpu", log_period=1, param_check_period=0,
                       learning_rate=1e-5)
    params = None
    rows, md = [], []
    binaries = ([("today: one file, rank 0 gathers", OLD, [])] if OLD else []) + [
        ("sharded, async_checkpointing false", SFT_TRAIN, ["async_checkpointing=false"]),
        ("sharded, async_checkpointing true", SFT_TRAIN, ["async_checkpointing=true"])]
    for i, (name, binary, over) in enumerate(binaries):
        lines, samples, peaks, run_dir = run(binary, cfg, over, WORLD, d, f"b{i}")
        params = params or int(re.search(r"(\d+) params", "\n".join(l for _, l in lines)).group(1))
        b = blocked(lines, samples, run_dir)
        mean = sum(x[1] for x in b) / len(b)
        rows.append((name, mean, b, peaks, step_slowdown(run_dir)))
    base = rows[0][1]
    md.append(f"### Blocked time per checkpoint: {MODEL} ({params} parameters), {WORLD} CPU ranks, zero_stage 3, "
              f"T={T}, a checkpoint every {CKPT_EVERY} steps (the final one not counted)\n")
    md.append("| writer | blocked per checkpoint (s), each | mean (s) | vs first row | rank 0 RSS in the "
              "checkpoint / the step before (MiB) | peak RSS rank 0 / ranks 1-3 (MiB) | step after a checkpoint / "
              "other steps |")
    md.append("|---|---|---|---|---|---|---|")
    for name, mean, b, peaks, slow in rows:
        md.append(f"| {name} | {' '.join(f'{x[1]:.3f}' for x in b)} | {mean:.3f} | {mean / base:.3f} | "
                  f"{max(x[2] for x in b):.0f} / {max(x[3] for x in b):.0f} | "
                  f"{peaks[0]:.0f} / {' '.join(f'{p:.0f}' for p in peaks[1:])} | {slow:.2f} |")
    md.append(f"\n3 x 4 bytes x parameters = {12 * params / 2**20:.0f} MiB (the whole model's parameters, m and v).\n")

    # Write throughput against the number of writing ranks.
    if os.environ.get("THROUGHPUT", "1") == "0":
        print("\n".join(md))
        if OUT_MD:
            with open(OUT_MD, "w") as f:
                f.write("\n".join(md) + "\n")
        return
    tcfg = write_config(f"{d}/t.yml", model_name="gpt2-124m", base_output_directory=f"{d}/out", train_files=f"{d}/t.h5",
                        max_target_length=16, global_batch_size=4, steps=3, checkpoint_period=1, keep_checkpoints=1,
                        hardware="cpu", log_period=1, param_check_period=0, async_checkpointing=False)
    make_data(f"{d}/t.h5", 16, T=16, vocab=50257, seed=2)
    md.append("### Write throughput against writing ranks: gpt2-124m, zero_stage 0, async_checkpointing false\n")
    md.append("| ranks | checkpoint (MiB) | slowest rank's write (s), each | MiB/s (median) | vs 1 rank |")
    md.append("|---|---|---|---|---|")
    one = None
    for world in (1, 2, 4):
        lines, _, _, run_dir = run(SFT_TRAIN, tcfg, [], world, d, f"t{world}")
        times = [float(m.group(1)) for _, l in lines if (m := re.search(r"shards written in ([\d.]+) s", l))]
        ck = f"{run_dir}/checkpoints/step_3"
        size = sum(os.path.getsize(f"{ck}/{n}") for n in os.listdir(ck)) / 2**20
        med = sorted(times)[len(times) // 2]
        rate = size / med
        one = one or rate
        md.append(f"| {world} | {size:.0f} | {' '.join(f'{t:.3f}' for t in times)} | {rate:.0f} | {rate / one:.2f} |")
    text = "\n".join(md)
    print(text)
    if OUT_MD:
        with open(OUT_MD, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
