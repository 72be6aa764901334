#!/usr/bin/env python3
"""LoRA's memory and step time against full fine-tuning (issue 17), as a Markdown table: sft_train
for each --models at per_device_batch_size --B, T = --T, hardware=cpu, on 1 and 2 ranks (mpirun,
one thread each at 2 ranks), 3 steps (the last one timed), seeded base: full fine-tuning, then LoRA
r=16 on every attention and MLP module (all-linear). Per run: trainable parameters, AdamW moments
per rank, the gradient buffer and the allreduce per step (what sft_train logs), the step time,
LoRA's step as a fraction of full fine-tuning's, and the peak RSS of the largest rank.

    SFTDP_BUILD_DIR=build /usr/bin/python3 bench/lora_memory.py [--B 4] [--T 256] [--models gpt2-124m smollm2-135m]

Needs GNU time (/usr/bin/time) and Debian's python3-h5py."""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time

from long_context import make_rows  # bench/ is on the path: the script's own directory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SFTDP_BUILD_DIR", os.path.join(ROOT, "build"))


def run(args, work, data, model, world, keys):
    out = tempfile.mkdtemp(prefix="out_", dir=work)
    rss = f"{out}/peak_rss"
    mpi = ["mpirun", "-np", str(world), "--oversubscribe", "-x", "OMP_NUM_THREADS=1"] if world > 1 else []
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rss] + mpi + [
        f"{BUILD}/sft_train", f"{ROOT}/configs/reference.yml", f"model_name={model}", f"max_target_length={args.T}",
        f"per_device_batch_size={args.B}", "global_batch_size=null", f"train_files=[{data}]", "eval_files=[]",
        "steps=3", "checkpoint_period=0", "hardware=cpu", f"base_output_directory={out}", "run_name=r",
        "log_period=1", "load_parameters_path="]
    cmd += [f"{k}={v}" for k, v in keys.items()]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"error: sft_train exited {p.returncode}: {p.stderr[-2000:]}")
    r = {"rss_gib": int(open(rss).read().split()[-1]) / 2**20}
    r["step_s"] = [float(m) for m in re.findall(r"\| ([\d.]+) ms \|", p.stdout)][-1] / 1000
    m = re.search(r"AdamW moments ([\d.]+) MiB on this rank \((\d+) of (\d+) floats", p.stdout)
    r["moments_mib"], r["trainable"] = float(m.group(1)), int(m.group(2))
    params = int(re.search(r", (\d+) params", p.stdout).group(1))
    r["params"] = params
    lora = re.search(r"gradient buffer ([\d.]+) MiB, allreduce ([\d.]+) MiB per step", p.stdout)
    grad = float(lora.group(1)) if lora else (params + 2) * 4 / 2**20  # full: the whole model + 2 sums
    r["grad_mib"] = r["allreduce_mib"] = grad
    shutil.rmtree(out, ignore_errors=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--models", nargs="+", default=["gpt2-124m", "smollm2-135m"])
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sftdp_lora_")
    cases = [("full", {}), ("LoRA r=16 all-linear", {"lora_rank": 16, "lora_alpha": 32, "lora_target_modules": "all-linear"})]
    print(f"B={args.B} rows per rank, T={args.T}, hardware=cpu, 3 steps (the last timed), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| model | ranks | run | trainable | share | AdamW moments per rank (MiB) | gradient buffer = allreduce "
          "per step (MiB) | step (s) | step / full's | peak RSS (GiB) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for model in args.models:
        vocab = 50257 if model.startswith("gpt2") else 49152
        data = f"{work}/rows_{vocab}.h5"
        if not os.path.exists(data):
            make_rows(data, 8 * args.B * 2, args.T, vocab, 0)
        for world in (1, 2):
            full = None
            for name, keys in cases:
                r = run(args, work, data, model, world, keys)
                full = full or r
                print(f"| {model} | {world} | {name} | {r['trainable']:,} | {100 * r['trainable'] / r['params']:.2f}% | "
                      f"{r['moments_mib']:.1f} | {r['grad_mib']:.2f} | {r['step_s']:.2f} | "
                      f"{r['step_s'] / full['step_s']:.2f} | {r['rss_gib']:.2f} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
