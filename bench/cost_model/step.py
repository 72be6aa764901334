"""bench/cost_model/step.py — a recorded step costed: each record line (kernel, cuBLASLt GEMM, copy, memset, NCCL
collective) given FLOPs, bytes and predicted µs on the device of bench/cost_model/device.py, and the step's
tables."""
import json
from collections import OrderedDict, defaultdict

from cost_model import device as dev
from cost_model.kernels import KERNELS, Args


# ---- costing ------------------------------------------------------------------------------------------
def elem_bytes(t):
    return {"bf16": 2, "fp32": 4}[t]


def roofline_us(flops, bytes_, tflops):
    """(µs, whether the FLOPs rather than the bytes set it) at `tflops` and the usable HBM bandwidth."""
    flop_us, byte_us = flops / (tflops * 1e6), bytes_ / (dev.HBM_TBPS * dev.BANDWIDTH_EFFICIENCY * 1e6)
    return max(flop_us, byte_us), flop_us > byte_us


class Item:
    """One costed operation: the group it is tabled under, its class, FLOPs, bytes, predicted µs (launch
    overhead included), whether FLOPs bound it, and a shape detail for the largest-items list."""

    def __init__(self, group, cls, flops, bytes_, roof, launch_us, detail=""):
        self.group, self.cls, self.flops, self.bytes, self.detail = group, cls, flops, bytes_, detail
        self.us, self.flop_bound = roof[0] + launch_us, roof[1]


def cost_kernel(r):
    name = r["name"]  # as written at the launch, template arguments included
    k = KERNELS.get(name.split("<")[0])
    if k is None:
        raise SystemExit(f"gpu_cost: no formula for kernel {name} (launched at {r['site']}): add it to KERNELS "
                         "in bench/cost_model/kernels.py, written from the kernel's source")
    if len(k.params) != len(r["args"]):
        raise SystemExit(f"gpu_cost: kernel {name} ({r['site']}) has {len(r['args'])} arguments, KERNELS names "
                         f"{len(k.params)} ({' '.join(k.params)}): its signature changed, update its formula")
    a = Args(k.params, r)
    flops, bytes_ = k.flops(a), k.bytes(a)
    rate = {"memory": dev.PEAK_FP32_TFLOPS, "attention_cuda": dev.ATTN_CUDA_TFLOPS, "attention_tc": dev.ATTN_TC_TFLOPS}[k.cls]
    scalars = " ".join(f"{n}={getattr(a, n)}" for n in k.params if isinstance(getattr(a, n), (int, float))
                       and not isinstance(getattr(a, n), bool) and a.types[n] in ("int", "unsigned long", "long"))
    return Item(name, k.cls, flops, bytes_, roofline_us(flops, bytes_, rate), dev.LAUNCH_US, scalars)


def cost_gemm(r):
    if r["a_type"] != r["b_type"]:
        raise SystemExit(f"gpu_cost: a GEMM with A {r['a_type']} and B {r['b_type']}")
    m, n, k, batch = r["m"], r["n"], r["k"], r["batch"]
    flops = 2 * m * n * k * batch
    # A and B read, D written, C read when beta != 0 (in its own type), the epilogue's vector (a bias read, a
    # bias gradient written: m elements, n for BGRADB) and aux matrix (m·n, written by GELU_AUX*, read by DGELU*).
    bytes_ = batch * (elem_bytes(r["a_type"]) * m * k + elem_bytes(r["b_type"]) * k * n
                      + elem_bytes(r["d_type"]) * m * n
                      + (elem_bytes(r.get("c_type", r["d_type"])) * m * n if r["beta"] != 0 else 0))
    if "bias" in r:
        bytes_ += batch * elem_bytes(r["bias_type"]) * (n if r["epilogue"] == "bgradb" else m)
    if "aux" in r:
        bytes_ += batch * elem_bytes(r["aux_type"]) * m * n
    peak = dev.PEAK_BF16_TFLOPS if r["a_type"] == "bf16" else dev.PEAK_FP32_TFLOPS
    return Item(f"cuBLASLt GEMM, {r['a_type']} inputs", "gemm_" + r["a_type"], flops, bytes_,
                roofline_us(flops, bytes_, peak * dev.GEMM_EFFICIENCY), dev.LAUNCH_US,
                f"m={m} n={n} k={k}" + (f" batch={batch}" if batch > 1 else "") + (" beta=1" if r["beta"] else ""))


def cost_memcpy(r):
    b = r["bytes"]
    if r["kind"] == "DtoD":
        return Item("cudaMemcpyAsync DtoD", "memory", 0, 2 * b, roofline_us(0, 2 * b, 1), dev.LAUNCH_US)
    if r["kind"] == "HtoH":
        return Item("cudaMemcpy HtoH", "host", 0, 0, (0.0, False), 0.0)
    return Item(f"cudaMemcpyAsync {r['kind']}", "host_copy", 0, 0, (b / (dev.PCIE_GBPS * 1e3), False), dev.COPY_LATENCY_US,
                f"{b} bytes")


def cost_memset(r):
    return Item("cudaMemsetAsync", "memory", 0, r["bytes"], roofline_us(0, r["bytes"], 1), dev.LAUNCH_US)


def cost_nccl(r):
    w, bytes_ = r["ranks"], r["count"] * {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8, "int64": 8,
                                           "uint64": 8, "int32": 4, "uint32": 4, "int8": 1, "uint8": 1}[r["dtype"]]
    factor = {"ncclAllReduce": 2.0 * (w - 1) / w, "ncclReduceScatter": (w - 1.0), "ncclAllGather": (w - 1.0),
              "ncclBroadcast": 1.0 if w > 1 else 0.0, "ncclReduce": 1.0 if w > 1 else 0.0}[r["call"]]
    return Item(f"{r['call']} ({w} rank{'s' if w > 1 else ''})", "collective", 0, 0,
                (factor * bytes_ / (dev.NVLINK_BUS_GBPS * 1e3), False), dev.LAUNCH_US, f"count={r['count']}")


COST = {"kernel": cost_kernel, "gemm": cost_gemm, "memcpy": cost_memcpy, "memset": cost_memset, "nccl": cost_nccl}


def load(path):
    """(the "step begin" mark or None, the step's operation records) of one record file."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    starts = [r for r in lines if r["op"] == "start"]
    if len(starts) != 1:
        raise SystemExit(f"gpu_cost: {path} holds {len(starts)} processes' records (remove it before recording; "
                         "one file per rank: SFTDP_SIM_RECORD=step_%r.jsonl)")
    begin = next((i for i, r in enumerate(lines) if r["op"] == "mark" and r["label"] == "step begin"), None)
    end = next((i for i, r in enumerate(lines) if r["op"] == "mark" and r["label"] == "step end"), None)
    if begin is None or end is None or end < begin:
        return None, [r for r in lines if r["op"] not in ("start", "mark")]
    return lines[begin], [r for r in lines[begin + 1:end] if r["op"] != "mark"]


def cost(records):
    items = []
    for r in records:
        f = COST.get(r["op"])
        if f is None:
            raise SystemExit(f"gpu_cost: no cost for a record of op {r['op']!r}")
        items.append(f(r))
    return items


def class_names():
    return OrderedDict([
        ("gemm_bf16", f"GEMMs, bf16 inputs (tensor cores, {dev.GEMM_EFFICIENCY:.0%} of {dev.PEAK_BF16_TFLOPS:.0f} TFLOP/s)"),
        ("gemm_fp32", f"GEMMs, fp32 inputs (CUDA cores, {dev.GEMM_EFFICIENCY:.0%} of {dev.PEAK_FP32_TFLOPS:.0f} TFLOP/s)"),
        ("attention_tc", f"attention, tensor cores ({dev.ATTN_TC_TFLOPS:.0f} TFLOP/s)"),
        ("attention_cuda", f"attention, CUDA cores ({dev.ATTN_CUDA_TFLOPS:.0f} TFLOP/s)"),
        ("memory", f"memory-bound kernels, memsets, device copies ({dev.BANDWIDTH_EFFICIENCY:.0%} of {dev.HBM_TBPS} TB/s)"),
        ("collective", "NCCL collectives"),
        ("host_copy", "host<->device copies"),
        ("host", "host-only copies"),
    ])


def summarize(mark, items):
    total_us = sum(i.us for i in items)
    flops = mark["train_flops"] if mark else None
    launched = sum(1 for i in items if i.cls not in ("host_copy", "host"))
    return {"device": dev.DEVICE, "predicted_ms": total_us / 1e3, "operations": len(items),
            "launch_overhead_ms": launched * dev.LAUNCH_US / 1e3,
            "model_tflop": flops / 1e12 if flops else None,
            "mfu": flops / (total_us * 1e-6) / (dev.PEAK_BF16_TFLOPS * 1e12) if flops else None,
            "gemm_tflop": sum(i.flops for i in items if i.cls.startswith("gemm")) / 1e12,
            "by_class_ms": {c: sum(i.us for i in items if i.cls == c) / 1e3 for c in class_names()
                            if any(i.cls == c for i in items)}}


def fmt(x, digits=1):
    return f"{x:,.{digits}f}"


def report(title, mark, items, top=8):
    s = summarize(mark, items)
    total = s["predicted_ms"] * 1e3
    out = [f"### {title}", ""]
    if mark:
        out.append(f"{mark['model_name']} ({mark['block']}: L={mark['L']} C={mark['C']} F={mark['F']} V={mark['V']} "
                   f"NH={mark['NH']} KVH={mark['KVH']} HS={mark['HS']}), B={mark['B']}, T={mark['T']}, dtype "
                   f"{mark['dtype']}, {mark['weighted_positions']} of {mark['B'] * mark['T']} positions weighted.")
    out.append(f"Predicted step on an {dev.DEVICE} ({dev.LAUNCH_US:g} µs per launch): **{fmt(s['predicted_ms'], 2)} ms**"
               + (f", MFU **{100 * s['mfu']:.1f}%** ({fmt(s['model_tflop'], 2)} TFLOP of model FLOPs per step, "
                  "bench::train_flops)" if mark else "") +
               f"; {s['operations']} device operations, {fmt(s['launch_overhead_ms'], 2)} ms of it launch overhead.")
    out += ["", "| class | operations | TFLOP | GB moved | predicted ms | share |", "|---|--:|--:|--:|--:|--:|"]
    for c, label in class_names().items():
        sel = [i for i in items if i.cls == c]
        if not sel:
            continue
        us = sum(i.us for i in sel)
        out.append(f"| {label} | {len(sel)} | {fmt(sum(i.flops for i in sel) / 1e12, 3)} | "
                   f"{fmt(sum(i.bytes for i in sel) / 1e9, 2)} | {fmt(us / 1e3, 2)} | {100 * us / total:.1f}% |")
    groups = defaultdict(list)
    for i in items:
        groups[i.group].append(i)
    out += ["", "| kernel / operation | launches | GFLOP | MB moved | predicted µs | share |",
            "|---|--:|--:|--:|--:|--:|"]
    for g, sel in sorted(groups.items(), key=lambda kv: -sum(i.us for i in kv[1])):
        us = sum(i.us for i in sel)
        out.append(f"| {g} | {len(sel)} | {fmt(sum(i.flops for i in sel) / 1e9, 2)} | "
                   f"{fmt(sum(i.bytes for i in sel) / 1e6, 1)} | {fmt(us, 1)} | {100 * us / total:.1f}% |")
    shapes = defaultdict(list)
    for i in items:
        shapes[(i.group, i.detail)].append(i)
    out += ["", "Largest items (one kernel at one shape, all its launches):", ""]
    for n, ((g, d), sel) in enumerate(sorted(shapes.items(), key=lambda kv: -sum(i.us for i in kv[1]))[:top], 1):
        us = sum(i.us for i in sel)
        bound = "FLOP-bound" if sel[0].flop_bound else "byte-bound"
        out.append(f"{n}. {g}" + (f" ({d})" if d else "") + f": {len(sel)}× → {fmt(us / 1e3, 2)} ms "
                   f"({100 * us / total:.1f}%)" + ("" if sel[0].cls.startswith("host") else f", {bound}"))
    return "\n".join(out) + "\n", s
