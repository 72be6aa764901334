#!/usr/bin/env python3
"""LoRA's memory and step time against full fine-tuning (issue 17), as a Markdown table: sft_train
on smollm2-135m (or --model) at B=1, T=--T, hardware=cpu, 2 steps (the last one timed), seeded
base; full fine-tuning, then LoRA at rank 16 on PEFT's default modules (q_proj v_proj) and on
all-linear. Per run: trainable parameters, AdamW moments on the rank, the gradient buffer and the
allreduce per step (what sft_train logs), the step time and the peak RSS.

    SFTDP_BUILD_DIR=build /usr/bin/python3 bench/lora_memory.py [--T 512] [--model smollm2-135m]

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


def run(args, work, data, keys):
    out = tempfile.mkdtemp(prefix="out_", dir=work)
    rss = f"{out}/peak_rss"
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rss, f"{BUILD}/sft_train", f"{ROOT}/configs/reference.yml",
           f"model_name={args.model}", f"max_target_length={args.T}", "per_device_batch_size=1",
           "global_batch_size=null", f"train_files=[{data}]", "eval_files=[]", "steps=2", "checkpoint_period=0",
           "hardware=cpu", f"base_output_directory={out}", "run_name=r", "log_period=1", "load_parameters_path="]
    cmd += [f"{k}={v}" for k, v in keys.items()]
    p = subprocess.run(cmd, capture_output=True, text=True)
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
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sftdp_lora_")
    data = f"{work}/rows.h5"
    make_rows(data, 4, args.T, 49152, 0)
    cases = [("full fine-tuning", {}),
             ("LoRA r=16, q_proj v_proj", {"lora_rank": 16, "lora_alpha": 32}),
             ("LoRA r=16, all-linear", {"lora_rank": 16, "lora_alpha": 32, "lora_target_modules": "all-linear"})]
    print(f"{args.model}, B=1, T={args.T}, hardware=cpu, 1 rank, 2 steps (the last timed), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| run | trainable | share | AdamW moments (MiB) | gradient buffer = allreduce per step (MiB) | "
          "step (s) | peak RSS (GiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    full = None
    for name, keys in cases:
        r = run(args, work, data, keys)
        full = full or r
        print(f"| {name} | {r['trainable']:,} | {100 * r['trainable'] / r['params']:.3f}% | {r['moments_mib']:.1f} | "
              f"{r['grad_mib']:.2f} ({r['grad_mib'] / full['grad_mib']:.4f} of full) | {r['step_s']:.2f} | "
              f"{r['rss_gib']:.2f} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
