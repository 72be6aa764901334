#!/usr/bin/env python3
"""Generation speed of sft_generate on the CPU (or --hardware gpu): prefill tokens/s (the prompt's
forward in one call) and decode tokens/s (one forward per new token over the key/value cache), greedy,
for random models of three shapes saved by transformers (nothing is downloaded): gpt2-tiny (sft-dp's
preset: 2 layers, C 64, vocab 264), gpt2-124m (GPT-2 small) and smollm2-135m (the Llama-family preset:
30 layers, C 576, grouped-query 9/3 heads, vocab 49152). Each run: a prompt of --prompt tokens, then
--new tokens (no stop id); best and median of --repeats runs, from sft_generate --timing. Beside it,
the same model in transformers (torch, fp32, the same thread count): the prompt's forward, and
generate(use_cache=True) of --new tokens less that forward over --new - 1 decoding steps (best of
--repeats). Prints a markdown table (and writes it to --out).

    .pyref/bin/python bench/generate_speed.py [--build build] [--threads 2] [--repeats 3] [--out FILE]
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time

import torch
import transformers

SHAPES = {
    "gpt2-tiny": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=64, n_inner=256, vocab_size=264, n_positions=256)),
    "gpt2-124m": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()),
    "smollm2-135m": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
        intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True,
        rope_theta=100000.0)),
}
TIMING = re.compile(r"prefill (\d+) tokens ([\d.]+) s \(([\d.]+) tokens/s\), decode (\d+) tokens ([\d.]+) s "
                    r"\(([\d.]+) tokens/s\)")


def transformers_speed(model, a):
    """transformers' prefill and decode tokens/s (best of a.repeats), greedy, its own KV cache."""
    torch.set_num_threads(a.threads)
    ids = torch.tensor([[(7 * i + 3) % 264 for i in range(a.prompt)]])
    mask = torch.ones_like(ids)
    prefill, decode = [], []
    with torch.no_grad():
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            model(ids, attention_mask=mask)
            t1 = time.perf_counter()
            model.generate(ids, attention_mask=mask, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False,
                           pad_token_id=0)
            t2 = time.perf_counter()
            prefill.append(a.prompt / (t1 - t0))
            decode.append((a.new - 1) / max(t2 - t1 - (t1 - t0), 1e-9))
    return max(prefill), max(decode)


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--hardware", default="cpu")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.shapes.split(","):
            torch.manual_seed(0)
            model = SHAPES[name]()
            n_params = sum(p.numel() for p in model.parameters())
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            hf_prefill, hf_decode = transformers_speed(model.eval(), a)
            del model
            vocab = 264 if name == "gpt2-tiny" else 1000
            prompt = " ".join(str((7 * i + 3) % vocab) for i in range(a.prompt))
            prefill, decode = [], []
            for _ in range(a.repeats):
                r = subprocess.run([os.path.join(a.build, "sft_generate"), "--model", d, "--prompt-ids", prompt,
                                    "--max-new-tokens", str(a.new), "--stop-id", "-1", "--hardware", a.hardware,
                                    "--max-length", str(a.prompt + a.new), "--timing"],
                                   capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads),
                                                                            OPENBLAS_NUM_THREADS=str(a.threads)))
                assert r.returncode == 0, r.stderr
                m = TIMING.search(r.stderr)
                prefill.append(float(m.group(3)))
                decode.append(float(m.group(6)))
            rows.append((name, n_params, max(prefill), statistics.median(prefill), max(decode),
                         statistics.median(decode), hf_prefill, hf_decode))
            print(f"{name}: prefill {max(prefill):.0f} tok/s, decode {max(decode):.1f} tok/s", flush=True)
    head = (f"sft_generate, {a.hardware}, {a.threads} threads, prompt {a.prompt} tokens, {a.new} new tokens, greedy, "
            f"fp32; {a.repeats} runs each; {platform.processor() or platform.machine()}, "
            f"{datetime.date.today().isoformat()}\n\n"
            "| model | parameters | prefill tok/s best | prefill median | decode tok/s best | decode median | "
            "transformers prefill | transformers decode |\n|---|---|---|---|---|---|---|---|\n")
    table = head + "".join(f"| {n} | {p / 1e6:.1f}M | {pb:.0f} | {pm:.0f} | {db:.1f} | {dm:.1f} | {hp:.0f} | "
                           f"{hd:.1f} |\n" for n, p, pb, pm, db, dm, hp, hd in rows)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
