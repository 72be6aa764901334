"""bench/cost_model/measured.py — a profile of the same step on a GPU (kernels/cuda/profile.cuh) joined line by
line with its record and the prediction: measured vs predicted per operation, class and kernel, idle gaps and
host-bound operations, and each class's efficiency as measured."""
import difflib
import json
from collections import defaultdict

from cost_model import device as dev
from cost_model.step import class_names, cost


# ---- a profile of the same step on a GPU, joined with its record ----------------------------------------
HOST_BOUND_GAP_US = 1.0  # an idle gap longer than this while the host had not yet queued the op: host-bound


def load_profile(path):
    """(header, operations, footer) of a profile file (kernels/cuda/profile.cuh): its one window."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    heads = [i for i, r in enumerate(lines) if r["op"] == "profile"]
    ends = [i for i, r in enumerate(lines) if r["op"] == "profile_end"]
    if len(heads) != 1 or len(ends) != 1 or ends[0] < heads[0]:
        raise SystemExit(f"gpu_cost: {path} holds {len(heads)} profile windows ({len(ends)} closed): one is expected "
                         "(remove the file before profiling; one file per rank: SFTDP_GPU_PROFILE=prof_%r.jsonl)")
    ops = lines[heads[0] + 1:ends[0]]
    if len(ops) != lines[ends[0]]["ops"]:
        raise SystemExit(f"gpu_cost: {path}: the footer counts {lines[ends[0]]['ops']} operations, the file has "
                         f"{len(ops)}")
    return lines[heads[0]], ops, lines[ends[0]]


def record_key(r):
    """What a record line and a profile line of the same operation share: the op and its name."""
    name = {"kernel": lambda: r["name"], "gemm": lambda: "cublasLtMatmul", "memcpy": lambda: r["kind"],
            "memset": lambda: "cudaMemsetAsync", "nccl": lambda: r["call"]}[r["op"]]()
    return r["op"], name


def join(records, profiled):
    """[(record or None, profile line or None)] in step order: equal (op, name) runs matched in order
    (difflib's longest matching blocks), so a launch only one side has (cuBLASLt finding no fused-bias algorithm
    on the GPU, say: an add_bias_kernel the simulator did not need) stays unmatched instead of shifting the rest."""
    a = [record_key(r) for r in records]
    b = [(p["op"], p["name"]) for p in profiled]
    out, i, j = [], 0, 0
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        out += [(records[k], None) for k in range(i, block.a)] + [(None, profiled[k]) for k in range(j, block.b)]
        out += [(records[block.a + k], profiled[block.b + k]) for k in range(block.size)]
        i, j = block.a + block.size, block.b + block.size
    return out


class Measured:
    """One profiled operation: its group (as the cost tables group), class, measured µs, the idle gap before it
    (device time since every earlier operation ended, any stream), whether the host queued it late (host-bound),
    and its predicted Item (None when the record has no such line)."""

    def __init__(self, p, item, gap_us, host_bound):
        self.p, self.item, self.us, self.gap_us, self.host_bound = p, item, p["us"], gap_us, host_bound
        self.group = item.group if item else (p["name"] if p["op"] == "kernel" else f"{p['op']} {p['name']}")
        self.cls = item.cls if item else "unrecorded"


def measure(pairs):
    """Measured items of the joined lines, in the profile's order, with their gaps and host-bound flags."""
    out, busy_until = [], 0.0
    for r, p in pairs:
        if p is None:
            continue
        gap = max(0.0, p["start_us"] - busy_until)
        # The device sat idle and the host queued this op only after the device had run out of work.
        host_bound = gap > HOST_BOUND_GAP_US and p["enqueue_us"] >= busy_until - HOST_BOUND_GAP_US
        out.append(Measured(p, cost([r])[0] if r else None, gap, host_bound))
        busy_until = max(busy_until, p["start_us"] + p["us"])
    return out


def rate(x, us, unit):
    return f"{x / (us * 1e-6) / unit:,.1f}" if us > 0 and x else ""


def profile_report(title, head, foot, pairs, top=8):
    """Markdown: the measured step beside the prediction, per class, per kernel, the largest gaps, what did
    not join, and each class's efficiency as measured; and the totals as a dict."""
    ms = measure(pairs)
    busy = sum(m.us for m in ms)
    idle = sum(m.gap_us for m in ms)
    host_idle = sum(m.gap_us for m in ms if m.host_bound)
    matched = [m for m in ms if m.item]
    predicted = sum(m.item.us for m in matched)
    unmatched_records = [r for r, p in pairs if p is None]
    s = {"device_name": head.get("device"), "constants": dev.DEVICE, "operations": len(ms),
         "measured_ms": foot["device_us"] / 1e3, "busy_ms": busy / 1e3, "idle_ms": idle / 1e3,
         "host_bound_idle_ms": host_idle / 1e3, "host_ms": foot["host_us"] / 1e3,
         "predicted_ms": predicted / 1e3 if matched else None, "joined": len(matched),
         "unmatched_profile": len(ms) - len(matched), "unmatched_record": len(unmatched_records)}
    out = [f"### {title}", ""]
    out.append(f"Profiled on **{head.get('device')}** ({head.get('sms')} SMs), predicted with {dev.DEVICE}'s constants."
               + (f" Warm-up steps before it: {', '.join(f'{x:.1f}' for x in head.get('warmup_ms', []))} ms."
                  if head.get("warmup_ms") else ""))
    out.append(f"Step on the device: **{s['measured_ms']:.2f} ms** from the window's start to the last operation's "
               f"end ({len(ms)} operations: busy {busy / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms, of it "
               f"{host_idle / 1e3:.2f} ms waiting for the host); the host queued it in {s['host_ms']:.2f} ms."
               + (f" Predicted for the joined operations: {predicted / 1e3:.2f} ms (busy/predicted "
                  f"{busy / predicted:.2f})." if matched and predicted else ""))
    if s["unmatched_profile"] or s["unmatched_record"]:
        out.append(f"Not joined: {s['unmatched_profile']} profiled operation(s) without a record line, "
                   f"{s['unmatched_record']} record line(s) not profiled.")
    out += ["", "| class | operations | measured ms | predicted ms | measured / predicted | achieved TB/s | "
            "achieved TFLOP/s |", "|---|--:|--:|--:|--:|--:|--:|"]
    labels = dict(class_names(), unrecorded="operations the record does not have")
    for c, label in labels.items():
        sel = [m for m in ms if m.cls == c]
        if not sel:
            continue
        mus = sum(m.us for m in sel)
        pus = sum(m.item.us for m in sel if m.item)
        b = sum(m.item.bytes for m in sel if m.item)
        f = sum(m.item.flops for m in sel if m.item)
        out.append(f"| {label} | {len(sel)} | {mus / 1e3:.3f} | {pus / 1e3:.3f} | "
                   f"{mus / pus if pus else float('nan'):.2f} | {rate(b, mus, 1e12)} | {rate(f, mus, 1e12)} |")
    groups = defaultdict(list)
    for m in ms:
        groups[m.group].append(m)
    out += ["", "| kernel / operation | launches | measured µs | predicted µs | measured / predicted | GB/s | "
            "TFLOP/s | idle before, µs | host-bound |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for g, sel in sorted(groups.items(), key=lambda kv: -sum(m.us for m in kv[1])):
        mus = sum(m.us for m in sel)
        pus = sum(m.item.us for m in sel if m.item)
        b = sum(m.item.bytes for m in sel if m.item)
        f = sum(m.item.flops for m in sel if m.item)
        out.append(f"| {g} | {len(sel)} | {mus:,.1f} | {pus:,.1f} | {mus / pus if pus else float('nan'):.2f} | "
                   f"{rate(b, mus, 1e9)} | {rate(f, mus, 1e12)} | {sum(m.gap_us for m in sel):,.1f} | "
                   f"{sum(m.host_bound for m in sel)} |")
    out += ["", "Largest idle gaps (the operation after the gap):", ""]
    for n, m in enumerate(sorted(ms, key=lambda m: -m.gap_us)[:top], 1):
        if m.gap_us <= 0:
            break
        out.append(f"{n}. {m.gap_us:,.1f} µs before {m.group} ({m.p['site']}, operation {m.p['i']})"
                   + (": the host queued it late" if m.host_bound else ""))
    out += ["", "Efficiency as measured (what each class's constant would be for the prediction to match):", ""]
    for c, const, peak in (("memory", "dev.BANDWIDTH_EFFICIENCY", dev.HBM_TBPS * 1e12),
                           ("gemm_bf16", "dev.GEMM_EFFICIENCY (bf16)", dev.PEAK_BF16_TFLOPS * 1e12),
                           ("gemm_fp32", "dev.GEMM_EFFICIENCY (fp32)", dev.PEAK_FP32_TFLOPS * 1e12),
                           ("attention_tc", "dev.ATTN_TC_TFLOPS", 1e12), ("attention_cuda", "dev.ATTN_CUDA_TFLOPS", 1e12)):
        sel = [m for m in matched if m.cls == c]
        mus = sum(max(m.us, 1e-3) for m in sel)
        amount = sum((m.item.bytes if c == "memory" else m.item.flops) for m in sel)
        if sel and amount:
            value = amount / (mus * 1e-6) / peak
            s[f"measured_{c}"] = value
            out.append(f"- {const}: {value:.3g}" + (f" of {peak / 1e12:g} TB/s" if c == "memory" else
                                                    "" if c.startswith("attention") else f" of {peak / 1e12:g} TFLOP/s")
                       + f" ({len(sel)} operations)")
    short = sorted(m.us for m in ms if m.p["op"] == "kernel")
    if short:
        s["shortest_kernel_us"] = short[0]
        out.append(f"- the shortest kernel took {short[0]:.1f} µs; the median idle gap between operations "
                   f"{sorted(m.gap_us for m in ms)[len(ms) // 2]:.1f} µs (dev.LAUNCH_US is {dev.LAUNCH_US:g})")
    return "\n".join(out) + "\n", s


def write_ops_csv(path, pairs):
    """Every joined line: index, op, name, site, measured and predicted µs, gap, host-bound, bytes, FLOPs."""
    ms = {id(m.p): m for m in measure(pairs)}
    with open(path, "w") as f:
        f.write("i,op,name,site,measured_us,predicted_us,gap_us,host_bound,bytes,flops\n")
        for r, p in pairs:
            m = ms.get(id(p)) if p else None
            item = m.item if m else (cost([r])[0] if r else None)
            name = (p["name"] if p else record_key(r)[1]).replace('"', "'")
            f.write(",".join(str(x) for x in (
                p["i"] if p else "", p["op"] if p else r["op"], f'"{name}"', p["site"] if p else r.get("site", ""),
                f"{m.us:.3f}" if m else "", f"{item.us:.3f}" if item else "", f"{m.gap_us:.3f}" if m else "",
                int(m.host_bound) if m else "", item.bytes if item else "", item.flops if item else "")) + "\n")
