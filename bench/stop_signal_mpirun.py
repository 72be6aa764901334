#!/usr/bin/env python3
"""Does a stop under mpirun keep the work? (issue 26), as a Markdown table: sft_train on 2 CPU ranks
(mpirun, one thread each) for four model sizes, stopped after step 3 by SIGINT to mpirun (Ctrl-C
at its terminal), SIGUSR1 to mpirun, or SIGINT to rank 1. Per run: parameters, the step time, the
checkpoint's size, mpirun's exit status, the checkpoint left (a temporary file only: SIGKILLed while
writing it) and the seconds from the signal to mpirun's exit. Open MPI 4.1's mpirun answers its own
SIGINT by SIGTERM to the ranks 1 s later and SIGKILL 1 s after that (docs/SPEC.md §2).

    SFTDP_BUILD_DIR=build /usr/bin/python3 bench/stop_signal_mpirun.py

Needs Debian's python3-h5py; uses tests/integration/signalled_run.py."""
import os
import shutil
import signal
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from harness import read_metrics  # noqa: E402
from signalled_run import SignalledRun, stop_config  # noqa: E402

SIZES = {"128x2": dict(emb_dim=128, mlp_dim=512, num_heads=4, num_decoder_layers=2),
         "256x4": dict(emb_dim=256, mlp_dim=1024, num_heads=4, num_decoder_layers=4),
         "512x4": dict(emb_dim=512, mlp_dim=2048, num_heads=8, num_decoder_layers=4),
         "768x6": dict(emb_dim=768, mlp_dim=3072, num_heads=12, num_decoder_layers=6)}
STOPS = [("SIGINT", "mpirun", signal.SIGINT, None), ("SIGUSR1", "mpirun", signal.SIGUSR1, None),
         ("SIGINT", "rank 1", signal.SIGINT, 1)]


def params_of(run):
    for line in run.stdout().splitlines():
        if line.startswith("sft-dp:") and " params" in line:
            return int(line.rsplit(",", 1)[1].split()[0])
    return 0


def one(work, size, sig_name, target, sig, rank):
    d = tempfile.mkdtemp(prefix="stop_", dir=work)
    run = SignalledRun(stop_config(d), f"{d}/out/r", SIZES[size], np_=2)
    try:
        run.wait_steps(3, timeout=300)
        t0 = time.monotonic()
        run.kill(sig, rank)
        code = run.wait(timeout=120)
        seconds = time.monotonic() - t0
    finally:
        run.close()
    records = read_metrics(run.run_dir)[0]
    ckpts = [c for c in os.listdir(f"{run.run_dir}/checkpoints")] if os.path.isdir(f"{run.run_dir}/checkpoints") else []
    done = [c for c in ckpts if c.startswith("step_")]
    def size(p):  # a checkpoint is a step_<S>/ directory (SPEC §5); an older one a file
        return sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(p) for n in ns) \
            if os.path.isdir(p) else os.path.getsize(p)
    mb = max((size(f"{run.run_dir}/checkpoints/{c}") for c in ckpts), default=0) / 2**20
    left = done[0] if done else ("temporary file only" if ckpts else "none")
    return (f"| {size} | {params_of(run) / 1e6:.1f}M | {records[-1]['step_time_s'] * 1000:.0f} | {mb:.0f} | "
            f"{sig_name} to {target} | {code} | {left} | {seconds:.2f} |")


def main():
    work = tempfile.mkdtemp(prefix="sftdp_stop_bench_")
    try:
        print("| model (emb x layers) | params | step ms | checkpoint MiB | signal | mpirun exit | checkpoint left | s to exit |")
        print("|---|---|---|---|---|---|---|---|")
        for size in SIZES:
            for stop in STOPS:
                print(one(work, size, *stop), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
