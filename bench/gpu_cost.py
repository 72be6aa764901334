#!/usr/bin/env python3
"""bench/gpu_cost.py — a cost model of one GPU optimizer step, from the device operations the code really
queues: the CUDA simulator's record of one trainer step (bench/gpu_step_record.cpp in record mode,
cudasim/record.h), each line given its FLOPs and the fewest bytes it must move through device memory
(every input read once, every output written once), then timed on an H100 SXM.

    python3 bench/gpu_cost.py                      # record and cost gpt2-124m B=8 T=1024, qwen3-0.6b B=4 T=4096
    python3 bench/gpu_cost.py --step "model_name=llama-tiny global_batch_size=2 max_target_length=64"
    python3 bench/gpu_cost.py step.jsonl ...       # cost records made before (SFTDP_SIM_RECORD=step.jsonl)
    python3 bench/gpu_cost.py --device h200 ...    # predict for an H200 (default: H100 SXM)
    python3 bench/gpu_cost.py --profile prof.jsonl [--record step.jsonl]   # measured beside predicted

--profile: a profile of the same step on a GPU (bench/gpu_step_record with SFTDP_GPU_PROFILE=prof.jsonl,
kernels/cuda/profile.cuh; scripts/gpu_check.sh profile makes one): every operation's measured µs joined line
by line with the record's operation and its prediction, on the constants of the profiled device (by its
name: H100 SXM or H200; another GPU: H100 SXM's, said so): measured vs predicted µs, achieved GB/s and
TFLOP/s, the idle gap before each operation and whether the host was late (host-bound), per class, per
kernel and for the largest gaps, then each class's efficiency as measured (the constants that would make the
prediction match). The record: --record, else recorded now from the profile's own key=value overrides (a
simulator build is needed then); with --no-record, the measured tables alone.

--build DIR: a simulator build with bench/gpu_step_record (default $SFTDP_BUILD_DIR, else build-sim-b, else
build-sim). --keep DIR keeps the records. --real runs the kernels while recording (slow; the record is the
same). Prints markdown: per model the step's predicted time and MFU, a table per class and per kernel, and
the largest items. --json prints the totals as JSON instead.

The model (each assumption is a constant below):
- Kernel formulas: KERNELS, one entry per __global__ function (its name without the template arguments it
  is launched with), written from the kernel's source: its parameter names (checked against the record's
  argument count; tests/integration/test_gpu_cost_cuda.py checks them against the source), its class, and
  FLOPs and bytes from the scalar arguments and the launch shape. An unknown kernel name is an error.
- cuBLASLt GEMMs: 2·m·n·k·batch FLOPs; bytes: A and B in their types, D in fp32 (C read too when beta != 0,
  the bias when fused); time at GEMM_EFFICIENCY of the peak for the input type (bf16: dense bf16 tensor
  cores; fp32: the fp32 CUDA-core peak, since CUBLAS_COMPUTE_32F never uses TF32).
- Attention at its class's anchor: the tensor-core kernels (attention_tc_*) at FlashAttention-2's measured
  rate, the CUDA-core kernels (attention/cuda_cores.cu) at theirs, on the FLOPs each kernel executes (its own GEMMs over
  the pairs it visits: recomputed products count, causal halves do not).
- Every other kernel is memory-bound: bytes at BANDWIDTH_EFFICIENCY of HBM, FLOPs at the fp32 CUDA-core peak.
- Each operation takes max(FLOP time, byte time) plus LAUNCH_US (kernels, GEMMs, memsets, device copies,
  collectives); host<->device copies take COPY_LATENCY_US + bytes / PCIE_GBS (pageable host memory: every
  copy of the step is a synchronising one). One stream, nothing overlaps.
- MFU = the step's model FLOPs (bench::train_flops, the project's one convention, written by the recorder
  into its "step begin" mark) / predicted time / the dense bf16 peak.

This file is the command and the recording; the model is bench/cost_model/: device.py (the constants), kernels.py
(the per-kernel formulas, KERNELS), step.py (a record costed, its tables), measured.py (--profile's join). Its names
are this module's too (gpu_cost.KERNELS, gpu_cost.cost, gpu_cost.HBM_TBPS, ...), the constants read where they live.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/: cost_model beside this file
from cost_model import device as dev  # noqa: E402
from cost_model.device import device_for, use_device  # noqa: E402
from cost_model.kernels import KERNELS, Args, K, causal_pairs, tc_head_size, tile_pairs  # noqa: E402
from cost_model.measured import (HOST_BOUND_GAP_US, Measured, join, load_profile, measure,  # noqa: E402
                                 profile_report, record_key, write_ops_csv)
from cost_model.step import (COST, Item, class_names, cost, elem_bytes, load, report,  # noqa: E402
                             roofline_us, summarize)

__all__ = ["KERNELS", "Args", "K", "causal_pairs", "tc_head_size", "tile_pairs", "HOST_BOUND_GAP_US", "Measured", "join",
           "load_profile", "measure", "profile_report", "record_key", "write_ops_csv", "COST", "Item", "class_names",
           "cost", "elem_bytes", "load", "report", "roofline_us", "summarize", "device_for", "use_device",
           "default_build", "record_step", "main"]


def __getattr__(name):
    """gpu_cost.HBM_TBPS and the other constants: read from cost_model.device, where use_device() and the flags set
    them (a copy made at import would keep the value it had then)."""
    if name.isupper() and hasattr(dev, name):
        return getattr(dev, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DEFAULT_STEPS = [
    "model_name=gpt2-124m global_batch_size=8 max_target_length=1024 dtype=bfloat16",
    "model_name=qwen3-0.6b global_batch_size=4 max_target_length=4096 dtype=bfloat16",
]


# ---- recording ----------------------------------------------------------------------------------------
def default_build():
    """$SFTDP_BUILD_DIR, else the repository's build-sim-b or build-sim that has the recorder."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = [os.environ.get("SFTDP_BUILD_DIR")] + [os.path.join(root, d) for d in ("build-sim-b", "build-sim")]
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "bench", "gpu_step_record")):
            return d
    return os.environ.get("SFTDP_BUILD_DIR") or os.path.join(root, "build-sim")


def record_step(build, overrides, path, real=False, extra_env=None, warmup=0, ranks=1):
    """Runs bench/gpu_step_record with `overrides` (a list of key=value), after `warmup` steps it does not record,
    into a fresh record at `path` (returned); on `ranks` > 1 ranks (mpirun) into one record per rank, whose paths
    are returned (rank_paths)."""
    exe = os.path.join(build, "bench", "gpu_step_record")
    if not os.path.exists(exe):
        raise SystemExit(f"gpu_cost: {exe} not found: build it in a simulator build "
                         "(-DSFTDP_CUDA_SIM=ON, target gpu_step_record)")
    paths = rank_paths(path, ranks)
    for each in paths:
        if os.path.exists(each):
            os.remove(each)
    env = dict(os.environ, SFTDP_SIM_RECORD=path if ranks == 1 else rank_pattern(path),
               SFTDP_SIM_DEVICE_MEMORY="80G",  # an H100's 80 GB
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(extra_env or {}))
    env["SFTDP_SIM_RECORD_ONLY"] = "0" if real else "1"
    cmd = [exe] + (["--warmup", str(warmup)] if warmup else []) + list(overrides)
    if ranks > 1:  # one simulated GPU per rank, each recording its own step
        env["SFTDP_SIM_DEVICES"] = str(ranks)
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe"] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"gpu_cost: {exe} {' '.join(overrides)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return path if ranks == 1 else paths


def rank_pattern(path):
    """The record path of each rank of a several-rank step: `stem.%r.jsonl` (the simulator puts the rank for %r)."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.%r{ext}"


def rank_paths(path, ranks):
    return [path] if ranks == 1 else [rank_pattern(path).replace("%r", str(r)) for r in range(ranks)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("records", nargs="*", help="record files to cost (default: record the default steps)")
    ap.add_argument("--step", action="append", help="key=value ... of a step to record (repeatable)")
    ap.add_argument("--build", default=None, help="simulator build with bench/gpu_step_record")
    ap.add_argument("--keep", default=None, help="directory to keep the records in")
    ap.add_argument("--real", action="store_true", help="run the kernels while recording (slow)")
    ap.add_argument("--json", action="store_true", help="print the totals as JSON")
    ap.add_argument("--top", type=int, default=8, help="largest items listed per step")
    ap.add_argument("--launch-us", type=float, help=f"per-operation overhead, µs (default {dev.LAUNCH_US})")
    ap.add_argument("--gemm-efficiency", type=float, help=f"of the GEMM peak (default {dev.GEMM_EFFICIENCY})")
    ap.add_argument("--bandwidth-efficiency", type=float, help=f"of HBM (default {dev.BANDWIDTH_EFFICIENCY})")
    ap.add_argument("--device", choices=[k.split()[0].lower() for k in dev.DEVICES],
                    help="the device predicted for (default: H100 SXM; with --profile: the profiled one's)")
    ap.add_argument("--profile", help="a profile of the step on a GPU (SFTDP_GPU_PROFILE) to join with its record")
    ap.add_argument("--record", help="with --profile: the step's record (default: recorded now from the profile's "
                                     "overrides)")
    ap.add_argument("--no-record", action="store_true", help="with --profile: the measured tables alone")
    ap.add_argument("--ops-csv", help="with --profile: write every joined line to this CSV file")
    args = ap.parse_args(argv)
    if args.launch_us is not None:
        dev.LAUNCH_US = args.launch_us
    if args.gemm_efficiency is not None:
        dev.GEMM_EFFICIENCY = args.gemm_efficiency
    if args.bandwidth_efficiency is not None:
        dev.BANDWIDTH_EFFICIENCY = args.bandwidth_efficiency
    if args.device:
        use_device(next(k for k in dev.DEVICES if k.split()[0].lower() == args.device))
    if args.profile:
        return main_profile(args)
    paths = list(args.records)
    if not paths:
        build = args.build or default_build()
        out = args.keep or tempfile.mkdtemp(prefix="gpu_cost_")
        os.makedirs(out, exist_ok=True)
        for n, step in enumerate(args.step or DEFAULT_STEPS):
            paths.append(record_step(build, step.split(), os.path.join(out, f"step_{n}.jsonl"), real=args.real))
    results = []
    for path in paths:
        mark, records = load(path)
        items = cost(records)
        title = (f"{mark['model_name']}, B={mark['B']}, T={mark['T']}, {mark['dtype']}" if mark
                 else os.path.basename(path))
        text, s = report(title, mark, items, args.top)
        results.append(dict(s, record=path, title=title))
        if not args.json:
            print(text)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


def main_profile(args):
    """--profile: the measured step joined with its record (made now if not given) and the prediction."""
    head, profiled, foot = load_profile(args.profile)
    key, note = device_for(head.get("device", ""))
    if not args.device:
        use_device(key)
    records = []
    if not args.no_record:
        path = args.record
        if not path:
            out = args.keep or tempfile.mkdtemp(prefix="gpu_cost_")
            os.makedirs(out, exist_ok=True)
            path = record_step(args.build or default_build(), head["overrides"], os.path.join(out, "profiled.jsonl"),
                               warmup=len(head.get("warmup_ms", [])))
        mark, records = load(path)
        if mark and any(mark.get(k) != head.get(k) for k in ("model_name", "B", "T", "dtype", "remat")):
            raise SystemExit(f"gpu_cost: the record {path} is of another step than the profile {args.profile}")
    pairs = join(records, profiled)
    title = f"{head.get('model_name')}, B={head.get('B')}, T={head.get('T')}, {head.get('dtype')} (profiled)"
    text, s = profile_report(title, head, foot, pairs, args.top)
    if note:
        text = text.replace("\n", f"\n\nNote: {note}.\n", 1)
        s["note"] = note
    if args.ops_csv:
        write_ops_csv(args.ops_csv, pairs)
    print(json.dumps([dict(s, profile=args.profile, title=title)], indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
