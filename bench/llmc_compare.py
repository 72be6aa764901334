#!/usr/bin/env python3
"""bench/llmc_compare.py — sft-dp beside llm.c (karpathy/llm.c, the anchor beside the checkout in
../shared/anchors: read to learn, none of its code copied) at the same shape, on the same machine,
in the same run, so that a speed claim is a measured ratio.

Made here without any download:
  * token files in llm.c's format (its dev/data/data_common.py: a header of 256 int32, magic
    20240520, version 1, the token count, then uint16 ids), train and val, of random ids;
  * the same train tokens as sft-dp's data file (SPEC §4): row r = ids[r*T : r*T+T], targets one
    further along the stream (llm.c's loader reads B*T+1 ids per batch and shifts them the same
    way), every position weighted, as llm.c trains on every token;
  * for llm.c's CPU trainer, which only starts from a checkpoint: gpt2_124M.bin in train_gpt2.c's
    format (256 int32: magic 20240326, version 3, maxT, V, L, NH, C, Vp; then its 16 fp32 tensors
    in fill_in_parameter_sizes' order) with random GPT-2 weights, of any L, NH, C (F = 4C there).
Read here: llm.c's per-step lines, from the printf of train_gpt2.c
  "step %d: train loss %f (took %f ms)"
and of train_gpt2.cu
  "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
(its tok/s is a moving average, so tokens/s here is B*T / ms of each step), and sft_train's
metrics.jsonl (step_time_s of every step). The first steps of each run are warm-up and dropped.

  data DIR --rows N --T T [--vocab V] [--seed S]   DIR/train.bin, val.bin, train.h5 (needs h5py)
  checkpoint FILE --layers L --heads NH --channels C [--vocab V] [--max-seq-len T] [--seed S]
  cpu --llmc BIN --sft-train BIN ...               CPU rounds, llm.c and sft_train in turn (see
                                                   bench/llmc_cpu.sh), then the markdown table
  gpu-report --llmc-log F... --sftdp-metrics F...  the table of scripts/gpu_check.sh's llmc_vs_sftdp step
Exit status: 0 the table was made and every check passed; 1 a run failed or a check did not pass
(the table is still printed with what there is); 2 bad arguments.
"""
import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
CHECKPOINT_MAGIC, CHECKPOINT_VERSION = 20240326, 3
HEADER_INTS = 256

# train_gpt2.c: printf("step %d: train loss %f (took %f ms)\n", ...)
CPU_STEP = re.compile(r"step (\d+): train loss (\S+) \(took (\S+) ms\)")
# train_gpt2.cu: printf0("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms |
#                        %.1f%% bf16 MFU | %.0f tok/s\n", ...)
GPU_STEP = re.compile(r"step\s+(\d+)/(\d+) \| loss\s+(\S+) \((\S+)z\)\| norm\s+(\S+) \((\S+)z\)\| "
                      r"lr\s+(\S+) \| (\S+) ms \| (\S+)% bf16 MFU \| (\S+) tok/s")

# Rated dense bf16 tensor-core peaks, TFLOP/s (datasheets' "with sparsity" figures halved), by a
# substring of the device name; SFTDP_PEAK_TFLOPS (or --peak-tflops) for any other GPU.
RATED_DENSE_BF16 = (("H200", 989.0), ("H100 80GB HBM3", 989.0), ("H100 SXM", 989.0))


# ---- inputs ----

def random_tokens(n, vocab, seed):
    import numpy as np
    return np.random.default_rng(seed).integers(0, vocab, size=n, dtype=np.int64).astype(np.uint16)


def write_tokens(path, tokens):
    """llm.c's token file: 256 int32 (magic, version, count, zeros) then the ids as uint16."""
    import numpy as np
    if len(tokens) >= 2**31:
        raise ValueError("token count too large for the int32 header")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (TOKENS_MAGIC, TOKENS_VERSION, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def read_tokens(path):
    import numpy as np
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:4 * HEADER_INTS], dtype="<i4")
    if header[0] != TOKENS_MAGIC or header[1] != TOKENS_VERSION:
        raise ValueError(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
    tokens = np.frombuffer(raw[4 * HEADER_INTS:], dtype="<u2")
    if len(tokens) != header[2]:
        raise ValueError(f"{path}: header says {header[2]} tokens, file holds {len(tokens)}")
    return tokens


SFT_PROMPT_FRACTION = 0.6  # the SFT-shaped rows: this much of each row is prompt (loss weight 0)


def write_sft_data(path, tokens, T, vocab, prompt_fraction=0.0):
    """SPEC §4 rows of T from the stream: inputs ids[rT : rT+T], targets ids[rT+1 : rT+T+1], weight 1; with
    prompt_fraction, the first round(prompt_fraction·T) positions of every row weight 0 (an SFT row's prompt)."""
    import h5py
    import numpy as np
    rows = (len(tokens) - 1) // T
    ids = np.asarray(tokens[:rows * T + 1], dtype=np.int32)
    weights = np.ones((rows, T), dtype=np.float32)
    weights[:, :round(prompt_fraction * T)] = 0.0
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=ids[:-1].reshape(rows, T))
        f.create_dataset("targets", data=ids[1:].reshape(rows, T))
        f.create_dataset("loss_weights", data=weights)
        f.attrs["vocab_size"] = np.int64(vocab)
    return rows


def make_data(out, rows, T, vocab=50257, seed=1):
    """train.bin + val.bin (llm.c) and train.h5 (sft-dp) in out; the h5 holds train.bin's tokens; train_sft.h5 the
    same rows with their first SFT_PROMPT_FRACTION unweighted (llm.c has no such weights: it trains on them all)."""
    os.makedirs(out, exist_ok=True)
    train = random_tokens(rows * T + 1, vocab, seed)
    write_tokens(os.path.join(out, "train.bin"), train)
    write_tokens(os.path.join(out, "val.bin"), random_tokens(2 * T * 8 + 1, vocab, seed + 1))
    write_sft_data(os.path.join(out, "train.h5"), train, T, vocab)
    write_sft_data(os.path.join(out, "train_sft.h5"), train, T, vocab, SFT_PROMPT_FRACTION)


def padded_vocab(V):
    return (V + 127) // 128 * 128  # llm.c pads V to a multiple of 128 (50257 -> 50304)


def checkpoint_tensors(L, C, V, maxT):
    """(name, element count) in train_gpt2.c's fill_in_parameter_sizes order (F = 4C)."""
    Vp = padded_vocab(V)
    return [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
            ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
            ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
            ("lnfw", C), ("lnfb", C)]


def write_checkpoint(path, L, NH, C, V=50257, maxT=1024, seed=1):
    """Random GPT-2 weights for llm.c's CPU trainer: N(0, 0.02) matrices and embeddings (the padded
    vocabulary rows 0), the two residual projections N(0, 0.02/sqrt(2L)), LayerNorm weights 1,
    every bias 0. Returns the parameter count llm.c will print."""
    import numpy as np
    if C % NH:
        raise ValueError(f"channels {C} not divisible by heads {NH}")
    rng = np.random.default_rng(seed)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = (CHECKPOINT_MAGIC, CHECKPOINT_VERSION, maxT, V, L, NH, C, padded_vocab(V))
    total = 0
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, n in checkpoint_tensors(L, C, V, maxT):
            if name in ("ln1w", "ln2w", "lnfw"):
                t = np.ones(n, dtype="<f4")
            elif name.endswith("b"):
                t = np.zeros(n, dtype="<f4")
            else:
                std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
                t = (rng.standard_normal(n, dtype=np.float32) * np.float32(std)).astype("<f4")
                if name == "wte":
                    t[V * C:] = 0.0
            f.write(t.tobytes())
            total += n
    return total


# ---- parsers ----

def _num(s):
    return float(s)  # float() reads nan, -nan, +inf as printf writes them


def parse_llmc_cpu(text):
    """[{step, loss, ms}] of train_gpt2.c's step lines, in order (other lines ignored)."""
    return [{"step": int(m[1]), "loss": _num(m[2]), "ms": _num(m[3])} for m in CPU_STEP.finditer(text)]


def parse_llmc_gpu(text):
    """[{step, steps, loss, norm, lr, ms, mfu_percent, ema_tok_s}] of train_gpt2.cu's step lines."""
    out = []
    for line in text.splitlines():
        m = GPU_STEP.search(line)
        if m:
            out.append({"step": int(m[1]), "steps": int(m[2]), "loss": _num(m[3]), "norm": _num(m[5]),
                        "lr": _num(m[7]), "ms": _num(m[8]), "mfu_percent": _num(m[9]), "ema_tok_s": _num(m[10])})
    return out


def read_sftdp_metrics(path):
    """[{step, loss, ms}] of the training records of sft_train's metrics.jsonl (eval ones skipped)."""
    out = []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "step_time_s" in j and "eval_loss" not in j:
                out.append({"step": int(j["step"]), "loss": float(j["loss"]), "ms": 1e3 * float(j["step_time_s"])})
    return out


def read_flops(text):
    """flops_per_step of bench_flops' key=value line."""
    m = re.search(r"flops_per_step=(\d+)", text)
    if not m:
        raise ValueError(f"no flops_per_step= in {text!r}")
    return float(m[1])


# ---- statistics and the table ----

def timed(records, skip):
    """ms of the records after the first `skip` (warm-up)."""
    return [r["ms"] for r in records[skip:]]


def summary(ms):
    return {"n": len(ms), "min": min(ms), "median": statistics.median(ms), "max": max(ms)}


def rated_peak(device_name, override=None):
    if override:
        return float(override)
    for key, tflops in RATED_DENSE_BF16:
        if key in (device_name or ""):
            return tflops
    return 0.0


def device_name():
    """nvidia-smi's name of GPU 0, or "" without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def fmt(x, digits=1):
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


class Side:
    """One trainer's runs: the per-run step records, warm-up dropped."""

    def __init__(self, name, runs, skip):
        self.name, self.runs, self.skip = name, runs, skip
        self.ms = [m for r in runs for m in timed(r, skip)]
        self.first_losses = [r[0]["loss"] for r in runs if r]

    def ok(self):
        return bool(self.ms)


def compare(llmc, sftdp, tokens_per_step, flops=None, peak_tflops=0.0, vocab=50257):
    """The numbers of the table: per side min/median/max ms, tokens/s, TFLOP/s, MFU; the ratio
    sft-dp / llm.c of tokens/s (of the medians, and of each round's pair of medians); the checks."""
    res = {"sides": [], "checks": []}
    for side in (llmc, sftdp):
        row = {"name": side.name, "runs": len(side.runs), "steps": [len(r) for r in side.runs]}
        if side.ok():
            s = summary(side.ms)
            row.update(s)
            row["tok_s"] = tokens_per_step / (s["median"] * 1e-3)
            if flops:
                row["tflops"] = flops / (s["median"] * 1e-3) / 1e12
                row["mfu"] = 100.0 * row["tflops"] / peak_tflops if peak_tflops else None
        res["sides"].append(row)
    for side in (llmc, sftdp):  # both start from random weights: the first loss is about ln(V)
        for i, loss in enumerate(side.first_losses):
            res["checks"].append((f"{side.name} run {i + 1}: first step's loss {loss:.4f} vs ln(V) = "
                                  f"{math.log(vocab):.4f}", abs(loss - math.log(vocab)) < 1.0))
        res["checks"].append((f"{side.name}: {len(side.ms)} timed steps", side.ok()))
    if llmc.ok() and sftdp.ok():
        a, b = res["sides"]
        res["ratio"] = a["median"] / b["median"]  # sft-dp tokens/s over llm.c tokens/s
        pairs = [statistics.median(timed(x, llmc.skip)) / statistics.median(timed(y, sftdp.skip))
                 for x, y in zip(llmc.runs, sftdp.runs) if timed(x, llmc.skip) and timed(y, sftdp.skip)]
        res["round_ratios"] = pairs
    return res


def markdown(res, title, facts, commands, heading="#", label="sft-dp / llm.c"):
    lines = [f"{heading} {title}", ""] + [f"{f}" for f in facts] + [""]
    has_flops = any("tflops" in s for s in res["sides"])
    has_mfu = any(s.get("mfu") is not None for s in res["sides"])
    has_own = any("own_mfu" in s for s in res["sides"])
    head = ["trainer", "runs × timed steps", "ms/step min", "median", "max", "tokens/s (median)"]
    if has_flops:
        head.append("TFLOP/s" if has_mfu else "GFLOP/s")
    if has_mfu:
        head.append("MFU")
    if has_own:
        head.append("MFU as llm.c prints it")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" + "--:|" * (len(head) - 1)]
    for s in res["sides"]:
        if "median" not in s:
            lines.append(f"| {s['name']} | no timed step |" + " |" * (len(head) - 2))
            continue
        cells = [s["name"], f"{s['runs']} × {s['n'] // max(s['runs'], 1)}", fmt(s["min"], 2), fmt(s["median"], 2),
                 fmt(s["max"], 2), fmt(s["tok_s"], 0)]
        if has_flops:
            cells.append(fmt(s.get("tflops"), 1) if has_mfu else fmt(s.get("tflops", 0) * 1e3, 1))
        if has_mfu:
            cells.append(fmt(s.get("mfu"), 1) + ("%" if s.get("mfu") is not None else ""))
        if has_own:
            cells.append(s.get("own_mfu", ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if "ratio" in res:
        rr = res["round_ratios"]
        lines.append(f"**Ratio {label} (tokens/s, medians): {res['ratio']:.2f}×**"
                     + (f"; per round (pairs of medians) min {min(rr):.2f}, median {statistics.median(rr):.2f},"
                        f" max {max(rr):.2f} over {len(rr)} rounds." if rr else "."))
    else:
        lines.append(f"**Ratio {label}: not measured** (a side has no timed step; see the checks).")
    lines += ["", "Checks:"] + [f"- {'OK' if ok else 'FAILED'}: {what}" for what, ok in res["checks"]]
    if commands is not None:
        lines += ["", "Commands:", "", "```"] + commands + ["```"]
    return "\n".join(lines + [""])


# ---- running (CPU) ----

def run_llmc_cpu(binary, cwd, env, steps, log_path, timeout_s):
    """Runs llm.c's train_gpt2 in cwd (it reads ./gpt2_124M.bin and the tinyshakespeare token paths)
    with line-buffered stdout (stdbuf), and stops it once it has printed `steps` step lines: its
    main() samples text at step 20 and runs 41 steps with no flag to say otherwise; the per-step
    figure is its own, printed before the stop."""
    cmd = ["stdbuf", "-oL", binary]
    records, t0 = [], time.monotonic()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            for line in p.stdout:
                log.write(line)
                records += parse_llmc_cpu(line)
                if len(records) >= steps or time.monotonic() - t0 > timeout_s:
                    break
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    if len(records) < steps and p.returncode not in (0, -signal.SIGTERM):
        print(f"llm.c exited {p.returncode} after {len(records)} steps; see {log_path}", file=sys.stderr)
    return records, cmd


def run_sft_train(binary, cfg_path, overrides, env, metrics_dir, log_path, timeout_s):
    cmd = [binary, cfg_path] + overrides
    with open(log_path, "w") as log:
        p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    path = os.path.join(metrics_dir, "metrics.jsonl")
    if p.returncode != 0 or not os.path.exists(path):
        print(f"sft_train exited {p.returncode}; see {log_path}", file=sys.stderr)
        return [], cmd
    return read_sftdp_metrics(path), cmd


# name: (llm.c L, NH, C, V, maxT; sft_train's model keys for the same GPT-2; title)
CPU_SHAPES = {
    "l4": (4, 4, 256, 50257, 1024, ["model_name=gpt2-tiny", "num_decoder_layers=4", "num_heads=4", "emb_dim=256",
                                    "mlp_dim=1024", "vocab_size=50257", "max_position_embeddings=1024"],
           "4-layer GPT-2, C=256, NH=4, F=1024, V=50257"),
    "124m": (12, 12, 768, 50257, 1024, ["model_name=gpt2-124m"], "GPT-2 124M (L=12, C=768, NH=12, V=50257)"),
    # seconds, not minutes: for tests/integration/test_llmc_compare.py (llm.c's main() runs T=64)
    "tiny": (2, 4, 64, 512, 64, ["model_name=gpt2-tiny", "num_decoder_layers=2", "num_heads=4", "emb_dim=64",
                                 "mlp_dim=256", "vocab_size=512", "max_position_embeddings=64"],
             "2-layer GPT-2, C=64, NH=4, V=512 (the test's)"),
}


def show(cmd, prefixes, before="", after=""):
    """cmd as one line, each absolute path under a key of `prefixes` written with its value instead,
    the rest relative to the current directory (the repo root): no path of this machine in a report."""
    words = []
    for w in cmd:
        key, _, val = w.rpartition("=") if "=" in w and not w.startswith("/") else ("", "", w)
        if os.path.isabs(val):
            for prefix, name in sorted(prefixes.items(), key=lambda kv: -len(kv[0])):
                if val == prefix or val.startswith(prefix.rstrip("/") + "/"):
                    val = name + val[len(prefix.rstrip("/")):]
                    break
            else:
                val = os.path.relpath(val)
        words.append(f"{key}={val}" if key else val)
    return before + " ".join(words) + after


def cpu_main(a):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    ok, sections = True, []
    for shape in a.shape:
        L, NH, C, V, maxT, model_keys, title = CPU_SHAPES[shape]
        work = os.path.join(a.work, shape)
        data = os.path.join(work, "dev", "data", "tinyshakespeare")  # the path train_gpt2.c's main() reads
        os.makedirs(data, exist_ok=True)
        rows = a.B * (a.steps + 2)
        make_data(data, rows, a.T, V)
        for src, dst in (("train.bin", "tiny_shakespeare_train.bin"), ("val.bin", "tiny_shakespeare_val.bin")):
            os.replace(os.path.join(data, src), os.path.join(data, dst))
        n_params = write_checkpoint(os.path.join(work, "gpt2_124M.bin"), L, NH, C, V, maxT)
        cfg = os.path.join(work, "sft.yml")
        with open(cfg, "w") as f:
            f.write("run_name: llmc_cpu\n")
        keys = model_keys + [f"max_target_length={a.T}", f"global_batch_size={a.B}", f"steps={a.steps}",
                             "hardware=cpu", f"train_files={os.path.join(data, 'train.h5')}",
                             "enable_data_shuffling=false", "checkpoint_period=0", "eval_interval=0",
                             "log_period=1000", "learning_rate=1e-4"]
        flops = None
        if a.bench_flops:
            flops = read_flops(subprocess.run([a.bench_flops, cfg] + keys, capture_output=True, text=True,
                                              check=True).stdout)
        llmc_runs, sft_runs, commands, loads = [], [], [], []
        for r in range(a.rounds):
            loads.append(os.getloadavg()[0])
            order = ("llmc", "sft") if r % 2 == 0 else ("sft", "llmc")
            for who in order:
                if who == "llmc":
                    rec, cmd = run_llmc_cpu(a.llmc, work, env, a.steps, os.path.join(work, f"llmc_{r + 1}.log"),
                                            a.timeout)
                    llmc_runs.append(rec)
                else:
                    run = f"r{r + 1}"
                    over = keys + [f"run_name={run}", f"base_output_directory={os.path.join(work, 'out')}"]
                    rec, cmd = run_sft_train(a.sft_train, cfg, over, env, os.path.join(work, "out", run),
                                             os.path.join(work, f"sft_{r + 1}.log"), a.timeout)
                    sft_runs.append(rec)
                if r == 0:
                    paths = {work: "$WORK", os.path.dirname(os.path.abspath(a.llmc)): "$LLMC"}
                    commands.append(show(cmd, paths, f"(cd $WORK && OMP_NUM_THREADS={a.threads} ", ")")
                                    if who == "llmc" else show(cmd, paths, f"OMP_NUM_THREADS={a.threads} "))
        loads.append(os.getloadavg()[0])
        llmc, sft = Side("llm.c train_gpt2 (fp32)", llmc_runs, a.skip), Side("sft-dp sft_train (fp32)", sft_runs, a.skip)
        res = compare(llmc, sft, a.B * a.T, flops, 0.0, V)
        ok &= all(c for _, c in res["checks"])
        facts = [f"Model: {title}, {n_params} parameters in llm.c's layout (vocabulary padded "
                 f"to {padded_vocab(V)}); B={a.B}, T={a.T}; {a.threads} OpenMP threads each; {a.rounds} rounds, "
                 f"each one run of llm.c and one of sft-dp in alternating order, {a.steps} steps per run, the first "
                 f"{a.skip} dropped as warm-up."]
        facts.append("Load average (1 min) at the start of each round and at the end: "
                     + ", ".join(f"{x:.2f}" for x in loads) + f" ({os.cpu_count()} cores).")
        if flops:
            facts.append(f"GFLOP/s: bench::train_flops = {flops / 1e9:.2f} GFLOP per step (bench_flops), for both.")
        sections.append(markdown(res, f"{shape}: sft-dp vs llm.c on the CPU", facts, commands))
    text = "\n".join(([f"- {f}" for f in a.fact] + [""] if a.fact else []) + sections)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0 if ok else 1


# ---- report (GPU) ----

def llmc_gpu_side(name, logs, skip):
    """llm.c's runs from their logs (a missing log: a run with no step); its own MFU column (llm.c's count,
    6N + 6LCT per token, and its own peak table; -100% = a GPU unknown to it) set by with_own_mfu."""
    runs, own = [], []
    for path in logs:
        recs = parse_llmc_gpu(open(path, errors="replace").read()) if os.path.exists(path) else []
        runs.append(recs)
        own += [r["mfu_percent"] for r in recs[skip:]]
    side = Side(name, runs, skip)
    side.own_mfu = f"{statistics.median(own):.1f}%" if own and statistics.median(own) >= 0 else (
        "unknown GPU to llm.c" if own else "")
    return side


def with_own_mfu(res, side):
    res["sides"][0]["own_mfu"] = side.own_mfu
    for s in res["sides"]:
        s.setdefault("own_mfu", "")
    return res


def gpu_report_main(a):
    sft_runs = [read_sftdp_metrics(p) if os.path.exists(p) else [] for p in a.sftdp_metrics]
    flops = read_flops(open(a.flops).read()) if a.flops else None
    a.device = a.device or device_name()
    peak = rated_peak(a.device, a.peak_tflops or os.environ.get("SFTDP_PEAK_TFLOPS"))
    llmc = llmc_gpu_side("llm.c train_gpt2cu (bf16)", a.llmc_log, a.skip)
    sft = Side("sft-dp sft_train dtype=bfloat16", sft_runs, a.skip)
    res = with_own_mfu(compare(llmc, sft, a.B * a.T, flops, peak), llmc)
    facts = [f"Device: {a.device or 'unknown'}. Model: GPT-2 124M (L=12, C=768, NH=12, V=50257; llm.c `-e d12`, "
             f"sft-dp `model_name=gpt2-124m`), random init; B={a.B}, T={a.T}; bf16. {len(a.llmc_log)} rounds, each "
             f"one run of each trainer in alternating order, the first {a.skip} steps of every run dropped as warm-up.",
             "tokens/s = B·T / ms of each step (llm.c prints a moving average instead). TFLOP/s and MFU: "
             "bench::train_flops (6 per GEMM weight per token plus 12·L·C·T attention; "
             + (f"{flops / 1e12:.3f} TFLOP per step" if flops else "n/a") + ") for both, over the rated dense bf16 "
             "peak (" + (f"{peak:.0f} TFLOP/s" if peak else "unknown for this GPU: set SFTDP_PEAK_TFLOPS")
             + "). llm.c's own MFU uses its own count (6·N + 6·L·C·T per token) and peak table.",
             "Target: sft-dp ≥ 1.0× llm.c."]
    text = markdown(res, "sft-dp vs llm.c on one GPU (same call)", facts, a.command or [])
    ok = all(c for _, c in res["checks"])
    if a.sftdp_sft_metrics:  # the same tokens as SFT rows: sft-dp skips the prompt in the head, llm.c cannot
        sft_side = Side(f"sft-dp sft_train dtype=bfloat16, SFT rows ({SFT_PROMPT_FRACTION:.0%} prompt)",
                        [read_sftdp_metrics(p) if os.path.exists(p) else [] for p in a.sftdp_sft_metrics], a.skip)
        res_sft = compare(llmc, sft_side, a.B * a.T, flops, peak)
        ok &= all(c for _, c in res_sft["checks"])
        text = text.rstrip("\n") + "\n\n" + markdown(
            res_sft, "On SFT-shaped rows", [
                f"The same tokens with the first {SFT_PROMPT_FRACTION:.0%} of every row a prompt (loss weight 0: "
                "train_sft.h5); llm.c trains on every token of them (it has no loss weights), sft-dp's LM head runs "
                "only the weighted positions. tokens/s counts every token of the rows for both, as the work asked "
                "for is the same rows. Target: sft-dp ≥ 1.3× llm.c."], None, heading="##",
            label="sft-dp (SFT rows) / llm.c")
    if a.llmc_cudnn_log:  # the next anchor: llm.c's fastest configuration, its attention by cuDNN
        cudnn = llmc_gpu_side("llm.c train_gpt2cu (bf16, USE_CUDNN=1)", a.llmc_cudnn_log, a.skip)
        res_cudnn = with_own_mfu(compare(cudnn, sft, a.B * a.T, flops, peak), cudnn)
        ok &= all(c for _, c in res_cudnn["checks"])
        facts = ["llm.c built with `USE_CUDNN=1` (its attention by cuDNN's fused flash attention, forward and "
                 "backward), run in each round between the two above with the same arguments: a separate ratio, "
                 "the next anchor."]
        if a.sftdp_sft_metrics and "ratio" in res_sft and "median" in res_cudnn["sides"][0]:
            facts.append(f"On the SFT-shaped rows: sft-dp (SFT rows) / llm.c with cuDNN = "
                         f"{res_cudnn['sides'][0]['median'] / res_sft['sides'][1]['median']:.2f}× (tokens/s, medians).")
        text = text.rstrip("\n") + "\n\n" + markdown(res_cudnn, "Beside llm.c with cuDNN attention", facts, None,
                                                      heading="##", label="sft-dp / llm.c (cuDNN)")
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0 if ok else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("out")
    d.add_argument("--rows", type=int, required=True)
    d.add_argument("--T", type=int, required=True)
    d.add_argument("--vocab", type=int, default=50257)
    d.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("checkpoint")
    c.add_argument("out")
    c.add_argument("--layers", type=int, required=True)
    c.add_argument("--heads", type=int, required=True)
    c.add_argument("--channels", type=int, required=True)
    c.add_argument("--vocab", type=int, default=50257)
    c.add_argument("--max-seq-len", type=int, default=1024)
    c.add_argument("--seed", type=int, default=1)
    u = sub.add_parser("cpu")
    u.add_argument("--llmc", required=True, help="llm.c's train_gpt2")
    u.add_argument("--sft-train", required=True)
    u.add_argument("--bench-flops", help="bench_flops, for the GFLOP/s column")
    u.add_argument("--work", required=True, help="scratch directory (outside the repo)")
    u.add_argument("--shape", action="append", choices=sorted(CPU_SHAPES), help="repeatable; default: l4 and 124m")
    u.add_argument("--B", type=int, default=4)
    u.add_argument("--T", type=int, default=64)
    u.add_argument("--threads", type=int, default=2)
    u.add_argument("--rounds", type=int, default=3)
    u.add_argument("--steps", type=int, default=12, help="per run; at most 20 (llm.c samples text at step 20)")
    u.add_argument("--skip", type=int, default=2)
    u.add_argument("--timeout", type=float, default=900)
    u.add_argument("--fact", action="append", default=[], help="a line for the report's head (repeatable)")
    u.add_argument("--out")
    g = sub.add_parser("gpu-report")
    g.add_argument("--llmc-log", action="append", default=[], required=True)
    g.add_argument("--sftdp-metrics", action="append", default=[], required=True)
    g.add_argument("--sftdp-sft-metrics", action="append", default=[],
                   help="metrics.jsonl of sft_train runs on train_sft.h5 (repeatable): the SFT-shaped section")
    g.add_argument("--llmc-cudnn-log", action="append", default=[],
                   help="llm.c built with USE_CUDNN=1, one log per round (repeatable): its own section and ratio")
    g.add_argument("--flops", help="a file holding bench_flops' line")
    g.add_argument("--device", default="")
    g.add_argument("--peak-tflops", type=float)
    g.add_argument("--B", type=int, required=True)
    g.add_argument("--T", type=int, required=True)
    g.add_argument("--skip", type=int, default=5)
    g.add_argument("--command", action="append", help="a command to list in the report (repeatable)")
    g.add_argument("--out")
    a = p.parse_args(argv)
    if a.cmd == "data":
        make_data(a.out, a.rows, a.T, a.vocab, a.seed)
        print(f"{a.out}: train.bin ({a.rows * a.T + 1} tokens), val.bin, train.h5 ({a.rows} rows of {a.T}), "
              f"train_sft.h5 (the same, {SFT_PROMPT_FRACTION:.0%} of each row prompt)")
        return 0
    if a.cmd == "checkpoint":
        n = write_checkpoint(a.out, a.layers, a.heads, a.channels, a.vocab, a.max_seq_len, a.seed)
        print(f"{a.out}: {n} parameters")
        return 0
    if a.cmd == "cpu":
        a.shape = a.shape or ["l4", "124m"]
        if not 1 <= a.steps <= 20 or a.skip >= a.steps:
            p.error("--steps must be 1..20 and more than --skip")
        return cpu_main(a)
    if len(a.llmc_log) != len(a.sftdp_metrics):
        p.error("give as many --llmc-log as --sftdp-metrics (one of each per round)")
    return gpu_report_main(a)


if __name__ == "__main__":
    sys.exit(main())
