#!/usr/bin/env python3
"""bench/gpu_scale.py — one optimizer step of a data-parallel group on paper: the per-GPU compute of
bench/gpu_cost.py (the CUDA simulator's record of the step the code makes, each operation costed) plus the
ZeRO-3 collectives, overlapped as src/optim/zero_units.cpp overlaps them, in tokens/s per GPU.

    python3 bench/gpu_scale.py                         # Llama-3.1-8B, 8 and 64 x H100 SXM, T = 8192 and 32768
    python3 bench/gpu_scale.py --model llama-3.1-8b --batch 2 --seq 8192 --gpus 8 --gpus 64
    python3 bench/gpu_scale.py --json ...

The compute: two records of one rank's step (bench/gpu_step_record in record-only mode: nothing runs), of the
model cut to one and to two decoder layers, at the local batch and sequence length, dtype bfloat16, weight_dtype
bfloat16, remat. Every operation is costed by gpu_cost.py; the step splits at the first operation of the LM head's
loss (cross_entropy_*) into forward and backward, and the optimizer's kernels (AdamW, the gradient norm's sums, the
masters' bf16 copy) are set apart. Two layers minus one layer is one block's forward, its backward (with remat its
re-forward too) and its optimizer work; one layer minus that block is everything else (embedding, head, loss). So
an L-layer step costs rest + L x block, with nothing assumed about the split of forward and backward.

The group (src/optim/zero_units.cpp, zero_stage 3): the parameters are all-gathered unit by unit (the embeddings,
each block, the untied head), bf16 with weight_dtype bfloat16 (2 bytes a parameter), when the model uses the unit,
the next unit's gather issued as the current one starts (one ahead, prefetch()); each unit's fp32 gradient sums are
reduce-scattered as soon as backward has finished them (4 bytes a parameter), while backward goes on. Collectives
run in issue order on one NCCL stream beside the compute stream; a unit's compute waits for its gather. Gathered
units stay while their slot is not needed: the last block used forward is not gathered again for its backward.
Each rank runs AdamW, the norm and the bf16 copy on its 1/world shard only. The step ends when both streams have
ended (end_pass waits for every collective) and the shard's update is done.

A ring collective of S bytes over w ranks takes (w - 1) x ALPHA + (w - 1)/w x S / busbw (all-gather and
reduce-scatter; nccl-tests' bus bandwidth convention). busbw within a node: NVLink, NVLINK_BUS_GBPS (gpu_cost.py's,
NCCL's ring on an H100 SXM node); across nodes NCCL runs one ring per NIC (rail), so each ring's inter-node hop
carries 1/NICS of the data: busbw = min(NVLink's, NICS_PER_NODE x NIC_GBPS x NIC_EFFICIENCY).

What the prediction is calibrated on: nothing measured of sft-dp on these shapes. The compute constants are
gpu_cost.py's (GEMMs at 70% of the bf16 peak, attention at FlashAttention-2's published 335 TFLOP/s on an H100,
memory-bound kernels at 80% of HBM); the one time they were set beside a measured sft-dp step (GPT-2 124M, H200,
2026-12-04) the model predicted 22.2 ms for a step that took 49.0 ms. The collective constants are the nominal
link rates above. Overlapped NCCL kernels also take SMs from the compute they hide behind: --overlap-slowdown
(default 0) stretches compute that runs beside a collective by that fraction.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_cost  # noqa: E402

NVLINK_BUS_GBPS = gpu_cost.NVLINK_BUS_GBPS  # NCCL ring bus bandwidth within an 8-GPU H100 SXM node
GPUS_PER_NODE = 8
NIC_GBPS = 50.0          # 400 Gb/s InfiniBand NDR per GPU
NICS_PER_NODE = 8
NIC_EFFICIENCY = 0.9     # of the NIC's line rate a large NCCL transfer reaches
ALPHA_NVLINK_US = 3.0    # per ring step within a node
ALPHA_NIC_US = 8.0       # per ring step when the ring crosses nodes

OPTIMIZER_KERNELS = ("adamw_step_kernel", "partial_sums_kernel", "finish_sum_kernel", "fp32_to_bf16_kernel")

# torchtitan's docs/performance.md: Llama 3.1 8B on 8 x H100 SXM, FSDP2, bf16, T = 8192, local batch 2, activation
# checkpointing; tokens/s per GPU.
TORCHTITAN = {("llama-3.1-8b", 8192): {"FSDP2 (eager)": 5762, "FSDP2 + torch.compile": 6667},
              ("llama-3.1-8b", 32768): {"FSDP2 + torch.compile": 3890}}


class StepParts:
    """One record's costed step in µs: forward (up to the loss), backward (the rest but the optimizer), optimizer."""

    def __init__(self, items):
        first_loss = next((i for i, it in enumerate(items) if it.group.startswith("cross_entropy")), None)
        if first_loss is None:
            raise SystemExit("gpu_scale: the record has no cross_entropy kernel: not a training step")
        self.forward = self.backward = self.optimizer = 0.0
        for i, it in enumerate(items):
            if it.group.split("<")[0] in OPTIMIZER_KERNELS:
                self.optimizer += it.us
            elif i < first_loss:
                self.forward += it.us
            else:
                self.backward += it.us

    def minus(self, other):
        d = StepParts.__new__(StepParts)
        d.forward, d.backward = self.forward - other.forward, self.backward - other.backward
        d.optimizer = self.optimizer - other.optimizer
        return d


def ring_us(nbytes, world):
    """A ring all-gather or reduce-scatter of nbytes (the whole buffer) over world ranks, in µs."""
    if world <= 1 or nbytes == 0:
        return 0.0
    nodes = -(-world // GPUS_PER_NODE)
    busbw = NVLINK_BUS_GBPS if nodes == 1 else min(NVLINK_BUS_GBPS, NICS_PER_NODE * NIC_GBPS * NIC_EFFICIENCY)
    alpha = ALPHA_NVLINK_US if nodes == 1 else ALPHA_NIC_US
    return (world - 1) * alpha + (world - 1) / world * nbytes / (busbw * 1e3)


def simulate(uses, world, optimizer_us, slowdown=0.0):
    """The two streams over a pass's unit uses, each a dict: compute µs, gather bytes (0: resident), reduce-scatter
    bytes after it (0: none). Returns (step µs, compute-stream µs without waiting, collective µs)."""
    gathers = [ring_us(u["gather"], world) for u in uses]
    tc = tm = 0.0
    done = [0.0] * len(uses)
    if gathers and gathers[0]:
        tm = done[0] = gathers[0]
    comm_busy = []  # (start, end) of each collective, to stretch compute that overlaps them
    for i, u in enumerate(uses):
        tc = max(tc, done[i])
        if i + 1 < len(uses) and gathers[i + 1]:
            start = max(tm, tc)
            tm = done[i + 1] = start + gathers[i + 1]
            comm_busy.append((start, tm))
        elif i + 1 < len(uses):
            done[i + 1] = 0.0
        c = u["compute"]
        overlap = sum(max(0.0, min(e, tc + c) - max(s, tc)) for s, e in comm_busy)
        tc += c + slowdown * overlap
        if u["reduce"]:
            start = max(tm, tc)
            tm = start + ring_us(u["reduce"], world)
            comm_busy.append((start, tm))
    collectives = sum(gathers) + sum(ring_us(u["reduce"], world) for u in uses)
    return max(tc, tm) + optimizer_us / world, sum(u["compute"] for u in uses) + optimizer_us / world, collectives


def pass_uses(block, rest, L, block_params, emb_params, head_params, tied):
    """The unit uses of one ZeRO-3 step (Model::unit_schedule): embeddings, blocks forward, the head (forward and
    backward at once: the fused head), blocks backward (the last one still resident), the embeddings' backward.
    block/rest: StepParts of one block and of everything else; the rest's forward is the embedding's and the head's,
    its backward the head's and the embedding's: split evenly between the two uses it has (both small)."""
    uses = [dict(compute=rest.forward / 2, gather=2 * emb_params, reduce=0)]
    uses += [dict(compute=block.forward, gather=2 * block_params, reduce=0) for _ in range(L)]
    uses.append(dict(compute=rest.forward / 2 + rest.backward / 2, gather=0 if tied else 2 * head_params,
                     reduce=0 if tied else 4 * head_params))
    for l in range(L - 1, -1, -1):
        uses.append(dict(compute=block.backward, gather=0 if l == L - 1 else 2 * block_params,
                         reduce=4 * block_params))
    uses.append(dict(compute=rest.backward / 2, gather=0, reduce=4 * emb_params))
    return uses


def record_parts(build, model, batch, seq, layers, keep):
    path = os.path.join(keep, f"{model}_L{layers}_B{batch}_T{seq}.jsonl")
    overrides = [f"model_name={model}", f"num_decoder_layers={layers}", f"global_batch_size={batch}",
                 f"max_target_length={seq}", "dtype=bfloat16", "weight_dtype=bfloat16", "remat=true",
                 "gradient_clipping_threshold=0"]
    gpu_cost.record_step(build, overrides, path)
    mark, records = gpu_cost.load(path)
    return mark, StepParts(gpu_cost.cost(records))


def dims_params(mark):
    """Per-block, embedding and head parameter counts from the record's "step begin" mark (the model's dimensions:
    a Llama-family block: q|k|v, o, gate|up, down and two norms)."""
    d = mark
    C, F, V, NH, KVH, HS = d["C"], d["F"], d["V"], d["NH"], d["KVH"], d["HS"]
    qkv = (NH + 2 * KVH) * HS * C + (((NH + 2 * KVH) * HS) if d.get("qkv_bias") else 0)
    block = qkv + C * NH * HS + 2 * F * C + C * F + 2 * C + (2 * HS if d.get("qk_norm") else 0)
    return block, V * C, (0 if d.get("tied") else V * C), bool(d.get("tied"))


def predict(build, model, batch, seq, L_full, gpus, keep, slowdown):
    mark1, one = record_parts(build, model, batch, seq, 1, keep)
    _, two = record_parts(build, model, batch, seq, 2, keep)
    block = two.minus(one)
    rest = one.minus(block)
    block_params, emb_params, head_params, tied = dims_params(mark1)
    L = L_full
    optimizer = rest.optimizer + L * block.optimizer
    tokens = batch * seq
    rows = []
    for w in gpus:
        uses = pass_uses(block, rest, L, block_params, emb_params, head_params, tied)
        step, compute, collectives = simulate(uses, w, optimizer, slowdown)
        rows.append(dict(gpus=w, step_ms=step / 1e3, compute_ms=compute / 1e3, collectives_ms=collectives / 1e3,
                         exposed_ms=(step - compute) / 1e3, tokens_per_s_per_gpu=tokens / (step * 1e-6)))
    one_gpu = rest.forward + rest.backward + L * (block.forward + block.backward) + optimizer
    return dict(model=model, batch=batch, seq=seq, layers=L, block_forward_ms=block.forward / 1e3,
                block_backward_ms=block.backward / 1e3, rest_ms=(rest.forward + rest.backward) / 1e3,
                optimizer_ms_unsharded=optimizer / 1e3, one_gpu_step_ms=one_gpu / 1e3,
                block_params=block_params, rows=rows, torchtitan=TORCHTITAN.get((model, seq), {}))


def report(p):
    out = [f"### {p['model']}, local batch {p['batch']}, T = {p['seq']}, bf16, weight_dtype bfloat16, remat, "
           f"ZeRO-3 (H100 SXM)", "",
           f"Per GPU, from the records: one block {p['block_forward_ms']:.2f} ms forward, "
           f"{p['block_backward_ms']:.2f} ms backward (re-forward included); embedding, head and loss "
           f"{p['rest_ms']:.2f} ms; the optimizer over all parameters {p['optimizer_ms_unsharded']:.2f} ms "
           f"(1/world of it per rank); one GPU's whole step {p['one_gpu_step_ms']:.1f} ms.", "",
           "| GPUs | step ms | compute ms | collectives ms (sum) | exposed ms | tokens/s per GPU |",
           "|--:|--:|--:|--:|--:|--:|"]
    for r in p["rows"]:
        out.append(f"| {r['gpus']} | {r['step_ms']:,.1f} | {r['compute_ms']:,.1f} | {r['collectives_ms']:,.1f} | "
                   f"{r['exposed_ms']:,.1f} | {r['tokens_per_s_per_gpu']:,.0f} |")
    for name, tps in p["torchtitan"].items():
        out.append(f"| torchtitan, 8 GPUs, {name} | | | | | {tps:,} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    global NVLINK_BUS_GBPS, NIC_GBPS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--layers", type=int, default=None, help="the model's layers (default: the preset's)")
    ap.add_argument("--batch", type=int, action="append", help="local batch (rows per GPU per step)")
    ap.add_argument("--seq", type=int, action="append", help="sequence length T (repeatable, with --batch)")
    ap.add_argument("--gpus", type=int, action="append", help="GPUs in the data-parallel group (repeatable)")
    ap.add_argument("--overlap-slowdown", type=float, default=0.0, help="compute stretch beside a collective")
    ap.add_argument("--nvlink-busbw", type=float, help=f"GB/s (default {NVLINK_BUS_GBPS})")
    ap.add_argument("--nic-gbps", type=float, help=f"GB/s per GPU across nodes (default {NIC_GBPS})")
    ap.add_argument("--build", default=None, help="simulator build with bench/gpu_step_record")
    ap.add_argument("--keep", default=None, help="directory to keep the records in")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.nvlink_busbw:
        NVLINK_BUS_GBPS = args.nvlink_busbw
    if args.nic_gbps:
        NIC_GBPS = args.nic_gbps
    shapes = list(zip(args.batch or [2, 1], args.seq or [8192, 32768]))
    gpus = args.gpus or [8, 64]
    build = args.build or gpu_cost.default_build()
    layers = args.layers or {"llama-3.1-8b": 32, "qwen3-8b": 36}.get(args.model)
    if layers is None:
        raise SystemExit(f"gpu_scale: --layers is needed for {args.model}")
    keep = args.keep or tempfile.mkdtemp(prefix="gpu_scale_")
    os.makedirs(keep, exist_ok=True)
    results = [predict(build, args.model, b, t, layers, gpus, keep, args.overlap_slowdown) for b, t in shapes]
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print("\n".join(report(p) for p in results))


if __name__ == "__main__":
    main()
