"""Issue 11's table, measured in one run on this machine (CPU ranks):
  1. the SFT step against this machine's sgemm, unmasked and 60% masked, with gradient
     accumulation, the optimizer's share, the memory bandwidth and the bounds they imply
     (bench_sft_step; llm.c's bench shape, a small-model / big-vocabulary shape, 256-token rows);
  2. ZeRO-1: AdamW moments and peak RSS per rank at world 1, 2, 4 (zero1_memory.py, gpt2-124m dims);
  3. allreduce_overlap off / on at world 2 and 4: step_time_s of sft_train, interleaved;
  4. remat off / on: activation memory (sft_train's startup line) and step time, one rank.
Every section notes the 1-minute load average before and after it (the machine may be shared).

  SFTDP_BUILD_DIR=build .pyref/bin/python bench/sft_table.py > bench/results/cpu_sft_table_<date>.md
Needs a build with benches (bench/bench_sft_step) and sft_train; prints Markdown."""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/integration"))
from harness import BUILD, MPI_ENV, SFT_TRAIN, make_data, tempdir, write_config  # noqa: E402


def load():
    return f"{os.getloadavg()[0]:.2f}"


def section(title, fn):
    l0, t0 = load(), time.time()
    print(f"## {title}\n", flush=True)
    fn()
    print(f"\n_load {l0} → {load()}, {time.time() - t0:.0f} s_\n", flush=True)


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=1200)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def step_bench():
    p = run([os.path.join(BUILD, "bench/bench_sft_step")], {"SFTDP_BENCH_REPS": os.environ.get("REPS", "3")})
    print("```\n" + p.stdout.strip() + "\n```")


def zero1():
    p = run([sys.executable, os.path.join(HERE, "zero1_memory.py"), "768", "12", "50257"])
    print(p.stdout.strip())


def sft_train_config(d, T, steps, gb, **extra):
    data = f"{d}/train_{T}.h5"
    if not os.path.exists(data):
        make_data(data, gb * (steps + 1), T=T, vocab=50257, seed=1, unequal=False)
    return write_config(f"{d}/c_{T}.yml", model_name="gpt2-tiny", num_decoder_layers=4, num_heads=4, emb_dim=256,
                        mlp_dim=1024, vocab_size=50257, max_position_embeddings=T, train_files=data,
                        max_target_length=T, global_batch_size=gb, steps=steps, hardware="cpu", seed=1,
                        enable_data_shuffling=False, run_name="b", param_check_period=0, resume=False, **extra)


def train(cfg, out, overrides, world=1, threads="1"):
    cmd = [SFT_TRAIN, cfg, f"base_output_directory={out}"] + overrides
    if world > 1:
        cmd = ["mpirun", "-np", str(world), "--oversubscribe"] + cmd
    p = run(cmd, dict(MPI_ENV, OMP_NUM_THREADS=threads))
    with open(f"{out}/b/metrics.jsonl") as f:
        steps = [json.loads(line) for line in f if '"step_time_s"' in line]
    return p, steps


def overlap():
    d, steps, reps = tempdir(), 10, 3
    cfg = sft_train_config(d, 128, steps, 8)
    times = {}
    for rep in range(reps):
        for world in (2, 4):
            for on in (False, True):
                _, s = train(cfg, f"{d}/w{world}{on}{rep}", [f"allreduce_overlap={'true' if on else 'false'}"], world)
                times.setdefault((world, on), []).extend(x["step_time_s"] * 1e3 for x in s[1:])
    print(f"GPT-2 L4 C256 V50257, T=128, global batch 8 (GA 1), OMP_NUM_THREADS=1 per rank, steps 2..{steps} of "
          f"{reps} interleaved runs each; world 4 is oversubscribed (4 ranks on 2 cores).\n")
    print("| world | overlap | step ms median | min | on/off (median) |")
    print("|---|---|---|---|---|")
    for world in (2, 4):
        off = statistics.median(times[(world, False)])
        for on in (False, True):
            t = times[(world, on)]
            print(f"| {world} | {'on' if on else 'off'} | {statistics.median(t):.0f} | {min(t):.0f} | "
                  f"{statistics.median(t) / off:.3f} |")


def remat():
    d, steps, reps = tempdir(), 6, 2
    cfg = sft_train_config(d, 512, steps, 4)
    rows, losses, times = {}, {}, {}
    for rep in range(reps):  # interleaved
        for on in (False, True):
            p, s = train(cfg, f"{d}/r{on}{rep}", [f"remat={'true' if on else 'false'}"], threads="2")
            m = re.search(r"activations: ([0-9.]+) MiB", p.stdout + p.stderr)
            times.setdefault(on, []).extend(x["step_time_s"] * 1e3 for x in s[1:])
            rows[on] = (m.group(1) if m else "?", statistics.median(times[on]))
            losses[on] = [x["loss"] for x in s]
    print(f"GPT-2 L4 C256 V50257, T=512, global batch 4 (one micro-step of 4 rows), 2 threads, steps 2..{steps} "
          f"of {reps} interleaved runs each.\n")
    print("| remat | activations MiB (startup log) | step ms median | losses bitwise equal to off |")
    print("|---|---|---|---|")
    for on in (False, True):
        print(f"| {'on' if on else 'off'} | {rows[on][0]} | {rows[on][1]:.0f} | {losses[on] == losses[False]} |")


def main():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# CPU SFT speed and memory, one run — {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC (issue 11)\n")
    print(f"Commit {rev}, build `{BUILD}`. Machine: {os.cpu_count()} vCPUs, {cpu}.\n")
    section("1. Step vs sgemm, masked, gradient accumulation (bench/bench_sft_step)", step_bench)
    section("2. ZeRO-1 optimizer memory per rank (bench/zero1_memory.py 768 12 50257)", zero1)
    section("3. allreduce_overlap off / on", overlap)
    section("4. remat off / on", remat)


if __name__ == "__main__":
    main()
