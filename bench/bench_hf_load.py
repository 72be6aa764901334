#!/usr/bin/env python3
"""Load time of a 124M GPT-2 through load_parameters_path: a Hugging Face directory (config.json +
model.safetensors, as transformers' save_pretrained writes it) vs the same weights as an HDF5 file
with /params (SPEC §5). Times sft_train from its start to the log line 'initial parameters from'
(config, data file, model allocation and the load itself; the same for both paths), then kills it.
A random GPT2LMHeadModel(GPT2Config()) stands in for real weights (nothing is downloaded). Runs
alternate between the two paths; best and median of --repeats each, written to
bench/results/hf_load_<date>.md.

    .pyref/bin/python bench/bench_hf_load.py [--build build] [--repeats 3] [--out FILE]
"""
import argparse
import datetime
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from harness import make_data, spec_of_hf_gpt2  # noqa: E402


def spec_params(sd, L):
    """SPEC §5 float32 tensors of an HF GPT-2 state dict."""
    return {k: v.astype(np.float32) for k, v in spec_of_hf_gpt2(sd, L).items()}


def time_to_initial_params(sft_train, config):
    """Seconds from starting sft_train to its 'initial parameters from' line."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    t0 = time.perf_counter()
    p = subprocess.Popen([sft_train, config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    seen, lines = None, []
    for line in p.stdout:
        lines.append(line)
        if "initial parameters from" in line:
            seen = time.perf_counter() - t0
            break
    p.send_signal(signal.SIGKILL)
    p.wait()
    if seen is None:
        raise SystemExit(f"sft_train {config} ended without 'initial parameters from':\n{''.join(lines)}")
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sft_train = os.path.join(os.path.abspath(args.build), "sft_train")
    d = tempfile.mkdtemp(prefix="sftdp_hfload_")
    try:
        torch.manual_seed(0)
        cfg = transformers.GPT2Config()  # 124M: 12 layers, 768 wide, vocab 50257, 1024 positions
        model = transformers.GPT2LMHeadModel(cfg).float().eval()
        model.save_pretrained(f"{d}/hf", safe_serialization=True)
        with h5py.File(f"{d}/params.h5", "w") as f:
            g = f.create_group("params")
            for k, v in spec_params(model.state_dict(), cfg.n_layer).items():
                g.create_dataset(k, data=v)
        del model
        make_data(f"{d}/train.h5", 4, T=16, vocab=cfg.vocab_size, seed=0)
        common = (f"train_files: {d}/train.h5\nglobal_batch_size: 4\nmax_target_length: 16\nsteps: 1\n"
                  f"hardware: cpu\nbase_output_directory: {d}/out\n")
        with open(f"{d}/hf.yml", "w") as f:
            f.write(common + f"run_name: hf\nload_parameters_path: {d}/hf\n")
        with open(f"{d}/h5.yml", "w") as f:
            f.write(common + f"run_name: h5\nmodel_name: gpt2-124m\nload_parameters_path: {d}/params.h5\n")
        sizes = {"hf": os.path.getsize(f"{d}/hf/model.safetensors"), "h5": os.path.getsize(f"{d}/params.h5")}
        times = {"hf": [], "h5": []}
        for _ in range(args.repeats):
            for kind in ("hf", "h5"):
                times[kind].append(time_to_initial_params(sft_train, f"{d}/{kind}.yml"))
                print(f"{kind}: {times[kind][-1]:.3f} s", flush=True)
    finally:
        shutil.rmtree(d, True)

    load = os.getloadavg()
    today = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "results", f"hf_load_{today}.md")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rows = [("Hugging Face directory (model.safetensors, Conv1D names)", "hf"),
            ("HDF5 /params (SPEC §5 names)", "h5")]
    with open(out, "w") as f:
        f.write(f"# 124M GPT-2 load time: Hugging Face safetensors vs HDF5 /params — {today}, "
                f"{os.cpu_count()} cores ({cpu})\n\n")
        f.write(f"`.pyref/bin/python bench/bench_hf_load.py --build {args.build} --repeats {args.repeats}`: "
                "seconds from starting `sft_train` (1 rank, CPU) to its `initial parameters from` line, "
                "the same 124,439,808 random parameters (transformers' `GPT2LMHeadModel(GPT2Config())`, "
                "fp32) read either way; runs alternate between the two paths. transformers "
                f"{transformers.__version__}, torch {torch.__version__}, Python {platform.python_version()}. "
                f"Load average when it finished: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
                "(1 / 5 / 15 min; other jobs shared the cores when it is well above 2).\n\n")
        f.write("| load_parameters_path | file MB | best s | median s | all runs s |\n|---|---|---|---|---|\n")
        for label, kind in rows:
            t = times[kind]
            f.write(f"| {label} | {sizes[kind] / 1e6:.0f} | {min(t):.3f} | {statistics.median(t):.3f} | "
                    f"{', '.join(f'{x:.2f}' for x in t)} |\n")
    print(open(out).read())


if __name__ == "__main__":
    main()
