"""The GPU cost model (bench/gpu_cost.py) on the CUDA simulator's records (cudasim/record.h) of one
trainer step (bench/gpu_step_record.cpp):
- in every build: every kernel launched in kernels/cuda (SFTDP_LAUNCH) has a formula, whose parameters are
  the kernel's own, by name and in order (a new or changed kernel cannot be costed by a stale formula, or at
  zero); an unknown kernel, a changed argument count, an unknown operation are errors;
- in a simulator build with bench/gpu_step_record: a tiny GPT-2 and a tiny Qwen3-style Llama step (bf16)
  recorded record-only and for real give the same lines for the step; every line is costed; the GEMM FLOPs
  summed from the records equal the Linear layers' 6·rows·IC·OC (forward, dX, dW; the fused LM head on the
  weighted positions only) exactly; the recorder's model FLOPs are bench::train_flops's formula, and the
  predicted time and MFU follow from the costed items; the command line prints the same totals;
- the budgets of issue 34 (GPT-2 124M bf16: bytes and operations) and issue 43 (ZeRO-3 on 2 GPUs, context
  parallelism 2 at T = 8192: bytes and operations beside one GPU's step of the same per-rank shape), each with
  the activations between kernels bf16 where the act16 path keeps them so."""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from harness import BUILD, SOURCE, simulator_build

sys.path.insert(0, os.path.join(SOURCE, "bench"))
import gpu_cost  # noqa: E402

RECORDER = os.path.join(BUILD, "bench", "gpu_step_record")
# Every simulator build has the recorder (CMakeLists.txt adds it even without the benches): missing there, it
# is a failure (records() asserts it), not a skip.
needs_recorder = pytest.mark.skipif(not simulator_build(), reason="needs a CUDA-simulator build (-DSFTDP_CUDA_SIM=ON)")

# Small enough for ASan, large enough for two attention tiles (T = 128) and several head chunks.
STEPS = {
    "gpt2": ["model_name=gpt2-tiny", "global_batch_size=2", "max_target_length=128"],
    "qwen3": ["model_name=llama-tiny", "decoder_block=qwen3", "global_batch_size=2", "max_target_length=128"],
}
# Clipping changes one scalar of AdamW's launch from the real gradient norm (record-only reads 0): off, so
# the two records are equal line for line.
COMMON = ["dtype=bfloat16", "gradient_clipping_threshold=0"]


def kernel_signatures():
    """{kernel name: (file under kernels/cuda, [parameter names])} of every __global__ function in kernels/cuda (its
    .cu files and the headers some write their kernels in, subfolders included)."""
    out = {}
    cuda = os.path.join(SOURCE, "kernels", "cuda")
    for path in glob.glob(os.path.join(cuda, "**", "*.cu"), recursive=True) + glob.glob(
            os.path.join(cuda, "**", "*.cuh"), recursive=True):
        text = re.sub(r"//[^\n]*", "", open(path).read())
        for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(", text):
            i = j = m.end()
            depth = 1
            while depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            params = [p for p in re.split(r",(?![^<]*>)", text[i:j - 1]) if p.strip()]
            out[m.group(1)] = (os.path.relpath(path, cuda), [re.findall(r"\w+", p)[-1] for p in params])
    return out


def test_every_launched_kernel_has_a_formula_with_its_own_parameters():
    launched = set()
    for path in glob.glob(os.path.join(SOURCE, "kernels", "cuda", "**", "*.cu"), recursive=True):
        launched |= set(re.findall(r"SFTDP_LAUNCH\(\s*(\w+)", open(path).read()))  # template arguments left out
    assert launched, "no SFTDP_LAUNCH found in kernels/cuda"
    missing = sorted(launched - set(gpu_cost.KERNELS))
    assert not missing, f"kernels without a formula in bench/cost_model/kernels.py KERNELS: {missing}"
    sigs = kernel_signatures()
    for name, k in gpu_cost.KERNELS.items():
        assert os.path.exists(os.path.join(SOURCE, "kernels", "cuda", k.src)), f"{name}: no kernels/cuda/{k.src}"
        assert name in sigs, f"KERNELS has {name}, which kernels/cuda/{k.src} does not define"
        assert sigs[name] == (k.src, k.params), f"{name}: source {sigs[name]}, KERNELS {(k.src, k.params)}"


def test_unknown_kernels_changed_signatures_and_unknown_operations_are_errors():
    launch = {"op": "kernel", "name": "residual_fwd_kernel", "site": "residual.cu:21", "grid": [4, 1, 1],
              "block": [256, 1, 1], "smem": 0,
              "args": [{"type": "float*", "alloc": 1, "offset": 0}, {"type": "float const*", "alloc": 2, "offset": 0},
                       {"type": "float const*", "alloc": 3, "offset": 0}, {"type": "unsigned long", "value": 1000}]}
    (item,) = gpu_cost.cost([launch])
    assert (item.flops, item.bytes) == (1000, 12000)
    assert item.us == pytest.approx(12000 / (3.35e6 * 0.8) + gpu_cost.LAUNCH_US)
    with pytest.raises(SystemExit, match="no formula for kernel new_kernel"):
        gpu_cost.cost([dict(launch, name="new_kernel")])
    with pytest.raises(SystemExit, match="has 3 arguments"):
        gpu_cost.cost([dict(launch, args=launch["args"][:3])])
    with pytest.raises(SystemExit, match="no cost for a record of op 'graph'"):
        gpu_cost.cost([{"op": "graph"}])


def linear_gemm_flops(m):
    """6·rows·IC·OC over the model's Linear layers (forward, dX, dW), from the recorder's dimensions: every
    block's on all B·T rows, the LM head's on the weighted positions only (the fused head skips the rest; with bf16
    activations, the act16 path, counted in multiples of 128 rows unless every position is weighted)."""
    C, F, L = m["C"], m["F"], m["L"]
    if m["block"] == "gpt2":
        per_layer = 3 * C * C + C * C + C * F + F * C
    else:
        per_layer = C * m["qkv_dim"] + m["attn_dim"] * C + C * 2 * F + F * C
    head = m["weighted_positions"]
    if m["dtype"] == "bfloat16" and head < m["B"] * m["T"]:
        head = -(-head // 128) * 128
    return 6 * (m["B"] * m["T"] * L * per_layer + head * C * m["V"])


def train_flops(m):
    """bench::train_flops (bench/harness.h), restated: 6 per GEMM weight and token, LM head on every token,
    plus 12·L·A·T per token for attention over the full T×T."""
    C, F, L, T = m["C"], m["F"], m["L"], m["T"]
    if m["block"] == "gpt2":
        weights, width = L * (4 * C * C + 2 * C * F) + C * m["V"], C
    else:
        weights = L * (C * m["qkv_dim"] + m["attn_dim"] * C + 3 * C * F) + C * m["V"]
        width = m["attn_dim"]
    return (6 * weights + 12 * L * width * T) * m["B"] * T


@pytest.fixture(scope="module")
def records(workdir):
    """{model: {"only": path, "real": path}}: each step recorded record-only and for real."""
    assert os.path.exists(RECORDER), f"{RECORDER} is missing from this simulator build"
    out = {}
    for name, keys in STEPS.items():
        out[name] = {mode: gpu_cost.record_step(BUILD, keys + COMMON, os.path.join(workdir, f"{name}_{mode}.jsonl"),
                                                real=mode == "real") for mode in ("only", "real")}
    return out


def step_lines(path):
    mark, recs = gpu_cost.load(path)
    assert mark is not None, f"{path}: no step marks"
    strip = lambda r: {k: v for k, v in r.items() if k != "seq"}  # noqa: E731 (lines before the step differ)
    return strip(mark), [strip(r) for r in recs]


@needs_recorder
@pytest.mark.parametrize("name", sorted(STEPS))
def test_record_only_records_what_a_real_step_records(records, name):
    mark_only, only = step_lines(records[name]["only"])
    mark_real, real = step_lines(records[name]["real"])
    assert mark_only == mark_real
    assert len(only) == len(real)
    for i, (a, b) in enumerate(zip(only, real)):
        assert a == b, f"line {i} of the step differs:\nrecord-only {a}\nreal        {b}"
    ops = {r["op"] for r in real}
    assert {"kernel", "gemm", "memset", "memcpy", "nccl"} <= ops
    names = {r["name"] for r in real if r["op"] == "kernel"}
    assert {"adamw_step_kernel", "partial_sums_kernel<Load>"} <= names, names
    assert any(n.startswith("cross_entropy_rows_kernel") for n in names), names


@needs_recorder
@pytest.mark.parametrize("name", sorted(STEPS))
def test_costs_are_consistent_with_the_model(records, name):
    mark, recs = gpu_cost.load(records[name]["only"])
    items = gpu_cost.cost(recs)
    assert len(items) == len(recs)  # every line costed (cost() raises on anything it cannot cost)
    gemm_flops = sum(2 * r["m"] * r["n"] * r["k"] * r["batch"] for r in recs if r["op"] == "gemm")
    assert gemm_flops == linear_gemm_flops(mark)
    assert sum(i.flops for i in items if i.cls.startswith("gemm")) == gemm_flops
    assert mark["train_flops"] == train_flops(mark)
    assert mark["block"] == ("gpt2" if name == "gpt2" else "qwen3")
    s = gpu_cost.summarize(mark, items)
    total_us = sum(i.us for i in items)
    assert s["predicted_ms"] == pytest.approx(total_us / 1e3)
    assert sum(s["by_class_ms"].values()) == pytest.approx(s["predicted_ms"])
    assert s["mfu"] == pytest.approx(mark["train_flops"] / (total_us * 1e-6) / (gpu_cost.PEAK_BF16_TFLOPS * 1e12))
    launched = [i for i in items if i.cls not in ("host_copy", "host")]
    assert all(i.us >= gpu_cost.LAUNCH_US for i in launched)
    # Attention's FLOPs: the kernels' own products over the causal pairs or tiles they visit, at least the
    # forward's 4·HS per causal pair and head (the backward recomputes more).
    causal = mark["B"] * mark["NH"] * mark["T"] * (mark["T"] + 1) // 2 * mark["HS"]
    attention = sum(i.flops for i in items if i.cls.startswith("attention"))
    assert attention >= 4 * causal * mark["L"]


@needs_recorder
def test_the_command_line_prints_the_same_totals(records):
    paths = [records[n]["only"] for n in sorted(STEPS)]
    p = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "gpu_cost.py"), "--json"] + paths,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    for path, g in zip(paths, got):
        mark, recs = gpu_cost.load(path)
        assert g["predicted_ms"] == pytest.approx(gpu_cost.summarize(mark, gpu_cost.cost(recs))["predicted_ms"])
        assert g["model_tflop"] == pytest.approx(mark["train_flops"] / 1e12)
    text = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "gpu_cost.py")] + paths,
                          capture_output=True, text=True, timeout=120).stdout
    assert "Predicted step on an H100 SXM" in text and "Largest items" in text


@needs_recorder
def test_the_gpt2_124m_bf16_step_fits_its_byte_and_launch_budget(workdir, note):
    """Issue 34's budget for one GPT-2 124M bf16 step at B=8, T=1024 (the llm.c comparison's shape; the first
    quarter of each row unweighted), from the simulator's record of it (record-only: nothing runs, 80 GB of untouched
    pages): at most 30 GB through device memory (the cost model's fewest bytes: every input read once, every output
    written once) in at most 400 device operations. Before the act16 path: 57.6 GB in 754."""
    keys = ["model_name=gpt2-124m", "global_batch_size=8", "max_target_length=1024", "dtype=bfloat16"]
    mark, recs = gpu_cost.load(gpu_cost.record_step(BUILD, keys, os.path.join(workdir, "gpt2_124m_bf16.jsonl")))
    bf16_between_kernels(recs)
    items = gpu_cost.cost(recs)
    moved = sum(i.bytes for i in items) / 1e9
    predicted = gpu_cost.summarize(mark, items)["predicted_ms"]
    note(f"gpt2-124m bf16 B=8 T=1024 step: {len(items)} device operations, {moved:.2f} GB, predicted "
         f"{predicted:.2f} ms on an {gpu_cost.DEVICE}")
    assert len(items) <= 400
    assert moved <= 30.0


# Issue 43's budgets per configuration beside (a) above: the step of a rank of a sharded or context-parallel group
# against the data-parallel step of one rank of the same per-rank shape (the same model, rows and positions per
# rank): what the split adds — ZeRO-3's unit gathers and reduce-scatters, context parallelism's key/value gathers,
# their gradients' reduce-scatter and attention over every key — at most 25% more bytes through device memory (the
# cost model's fewest bytes of every operation, summed) and 50% more device operations, on the rank that moves the
# most. And in each, the activations between kernels are bf16 as on the one-rank bf16 path (bf16_between_kernels).
SMOL = ["model_name=smollm2-135m", "dtype=bfloat16", "gradient_clipping_threshold=0"]


def step_totals(paths):
    """(bytes, operations) of the step of each rank's record, the largest of the ranks."""
    totals = []
    for path in paths if isinstance(paths, list) else [paths]:
        _, recs = gpu_cost.load(path)
        items = gpu_cost.cost(recs)
        totals.append((sum(i.bytes for i in items), len(items)))
        bf16_between_kernels(recs)
    return max(t[0] for t in totals), max(t[1] for t in totals)


def bf16_between_kernels(recs):
    """No fp32 activation crosses between the bf16 table's kernels where the act16 path keeps bf16: every GEMM reads
    bf16 A and B, and the tensor-core attention reads bf16 q|k|v (and gathered k|v, dO), writes a bf16 output and a bf16
    query gradient. (fp32 by design: the residual stream and its gradient, the norms' statistics, gradient sums, and
    context parallelism's k/v gradient partials, reduce-scattered in fp32 and rounded once.)"""
    for r in recs:
        if r["op"] == "gemm":
            assert r["a_type"] == "bf16" and r["b_type"] == "bf16", r
        elif r["op"] == "kernel" and r["name"].startswith("attention_tc_") and "delta" not in r["name"] \
                and "segment" not in r["name"]:
            args = dict(zip(gpu_cost.KERNELS[r["name"].split("<")[0]].params, r["args"]))
            for name in ("qkv", "dout"):
                if name in args:
                    assert "bfloat16" in args[name]["type"], (r["name"], name, args[name])
            for fp32_out in ("out", "dqkv"):
                if fp32_out in args:
                    assert args[fp32_out].get("alloc") is None, (r["name"], fp32_out, "an fp32 activation")


@pytest.mark.parametrize("split, keys, one_rank", [
    ("zero3", ["global_batch_size=2", "max_target_length=1024", "weight_dtype=bfloat16", "zero_stage=3"],
     ["global_batch_size=1", "max_target_length=1024", "weight_dtype=bfloat16"]),
    ("cp2", ["global_batch_size=1", "max_target_length=8192", "context_parallelism=2"],
     ["global_batch_size=1", "max_target_length=4096"]),
], ids=["smollm2-135m-zero3-2gpus", "smollm2-135m-cp2-T8192"])
@needs_recorder
def test_a_sharded_or_context_parallel_step_fits_its_budget(workdir, note, split, keys, one_rank):
    """(b) SmolLM2-135M ZeRO-3 on 2 simulated GPUs (T = 1024, a row each) against one GPU's ZeRO-0 step of a row;
    (c) a Llama-family model (SmolLM2-135M) with context parallelism 2 at T = 8192 against one GPU's step of the 4096
    positions a rank holds. Records made record-only (nothing runs)."""
    moved, ops = step_totals(gpu_cost.record_step(BUILD, SMOL + keys, os.path.join(workdir, f"{split}.jsonl"),
                                                  ranks=2))
    ref_moved, ref_ops = step_totals(gpu_cost.record_step(BUILD, SMOL + one_rank,
                                                          os.path.join(workdir, f"{split}_1.jsonl")))
    note(f"smollm2-135m {split} on 2 simulated GPUs: {moved / 1e9:.2f} GB, {ops} device operations per rank; one GPU at "
         f"the same per-rank shape {ref_moved / 1e9:.2f} GB, {ref_ops}: {moved / ref_moved:.2f}x, {ops / ref_ops:.2f}x")
    assert moved <= 1.25 * ref_moved and ops <= 1.5 * ref_ops
