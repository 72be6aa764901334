#!/usr/bin/env python3
"""Long-context SFT on the CPU (issue 16): peak RSS and step time of sft_train for smollm2-135m at
B=1 and T in {1k, 2k, 4k, 8k, 16k}, with and without remat, one run each, as a Markdown table.
Activations are linear in T now that attention keeps no T×T matrix; a run the memory plan refuses
is listed with its error line instead of being killed by the OOM killer.

    SFTDP_BUILD_DIR=build /usr/bin/python3 bench/long_context.py [--steps 2] [--T 1024 2048 ...]
    SFTDP_BUILD_DIR=build /usr/bin/python3 bench/long_context.py --baseline OTHER_BUILD --T 1024

--baseline: the step time of this build against another build's sft_train (today's main, say), remat
off, runs alternating between the two for --rounds rounds; each run's last step counts, and each
side's best run (the least disturbed by other jobs on the machine) is compared, the median beside it.

Needs GNU time (/usr/bin/time) and Debian's python3-h5py. Each run: hardware=cpu, synthetic rows of
T tokens (loss on the second half), per_device_batch_size 1, no eval, no checkpoint until the end;
max_position_embeddings raised to T past the preset's 8192 (RoPE: a limit, not a table)."""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SFTDP_BUILD_DIR", os.path.join(ROOT, "build"))


def make_rows(path, rows, T, vocab, seed):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=rng.integers(0, vocab, (rows, T), dtype=np.int32))
        f.create_dataset("targets", data=rng.integers(0, vocab, (rows, T), dtype=np.int32))
        w = np.zeros((rows, T), dtype=np.float32)
        w[:, T // 2:] = 1
        f.create_dataset("loss_weights", data=w)
        f.attrs["vocab_size"] = np.int64(vocab)


def run(T, remat, steps, work, build=BUILD):
    data = f"{work}/rows_{T}.h5"
    if not os.path.exists(data):
        make_rows(data, 4, T, 49152, T)
    out = tempfile.mkdtemp(prefix=f"out_{T}_{int(remat)}_", dir=work)  # fresh: never a resume
    rss = f"{out}/peak_rss"
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rss, f"{build}/sft_train", f"{ROOT}/configs/reference.yml",
           "model_name=smollm2-135m", f"max_target_length={T}", f"max_position_embeddings={max(T, 8192)}", "per_device_batch_size=1", "global_batch_size=null",
           f"train_files=[{data}]", "eval_files=[]", f"steps={steps}", "checkpoint_period=0", "hardware=cpu",
           f"remat={'true' if remat else 'false'}", f"base_output_directory={out}", "run_name=r", "log_period=1",
           "load_parameters_path="]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    row = {"T": T, "remat": remat, "wall": wall, "exit": p.returncode}
    if os.path.exists(rss):
        row["rss_gib"] = int(open(rss).read().split()[-1]) / 2**20
    steps_ms = [float(m) for m in re.findall(r"\| ([\d.]+) ms \|", p.stdout)]
    row["step_s"] = steps_ms[-1] / 1000 if steps_ms else None
    act = re.search(r"activations: ([\d.]+) MiB", p.stdout)
    row["act_mib"] = float(act.group(1)) if act else None
    need = re.search(r"memory: this rank needs ([\d.]+ [GM]iB)", p.stdout)
    row["plan"] = need.group(1) if need else None
    err = [l for l in p.stderr.splitlines() if "error:" in l]
    row["error"] = err[0] if err else ""
    shutil.rmtree(out, ignore_errors=True)  # the final checkpoint: 1.5 GiB at this size
    return row


def compare(args, work):
    steps = max(args.steps, 3)
    print(f"smollm2-135m, B=1, hardware=cpu, remat off, {steps} steps per run (the last one timed), "
          f"{args.rounds} rounds alternating, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| T | this build: best step (s) | median | baseline: best step (s) | median | this / baseline (best) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for T in args.T:
        times = {"this": [], "base": []}
        for _ in range(args.rounds):
            for side, build in (("this", BUILD), ("base", args.baseline)):
                r = run(T, False, steps, work, build)
                if r["exit"] or not r["step_s"]:
                    raise SystemExit(f"error: {build}/sft_train at T={T} exited {r['exit']}: {r['error']}")
                times[side].append(r["step_s"])
        best = {k: min(v) for k, v in times.items()}
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        print(f"| {T} | {best['this']:.3f} | {med['this']:.3f} | {best['base']:.3f} | {med['base']:.3f} | "
              f"{best['this'] / best['base']:.3f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--baseline", help="another build directory whose sft_train this one is compared with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--remat", choices=["both", "off", "on"], default="both", help="which runs of each T")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sftdp_long_")
    if args.baseline:
        compare(args, work)
        return
    print(f"smollm2-135m, B=1, hardware=cpu, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'all')}, "
          f"{args.steps} step(s) per run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| T | remat | step (s) | tokens/s | peak RSS (GiB) | activations (MiB, logged) | memory plan | note |")
    print("|---:|:---:|---:|---:|---:|---:|---:|---|")
    for T in args.T:
        for remat in {"both": (False, True), "off": (False,), "on": (True,)}[args.remat]:
            r = run(T, remat, args.steps, work)
            step = f"{r['step_s']:.2f}" if r["step_s"] else "—"
            tps = f"{T / r['step_s']:.0f}" if r["step_s"] else "—"
            rss = f"{r['rss_gib']:.2f}" if "rss_gib" in r else "—"
            act = f"{r['act_mib']:.0f}" if r["act_mib"] else "—"
            note = r["error"][:160] if r["exit"] else ""
            print(f"| {T} | {'on' if remat else 'off'} | {step} | {tps} | {rss} | {act} | {r['plan'] or '—'} | {note} |",
                  flush=True)


if __name__ == "__main__":
    main()
