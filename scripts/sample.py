#!/usr/bin/python3
"""Greedy completions from a trained checkpoint, to see what the demo learned.

usage: sample.py CHECKPOINT.h5 EVAL.jsonl [N]
Reads the first N prompt/completion lines of EVAL.jsonl, encodes each prompt with the byte
tokenizer (<|bos|> + UTF-8 bytes, as sft_prepare does), decodes greedily until <|eos|> with the
float64 reference GPT-2 of tests/model/reference_gpt2.py, and prints prompt, expected and got."""
import json
import os
import sys

import h5py
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/model"))
from reference_gpt2 import logits_of  # noqa: E402

BOS, EOS = 256, 257


def num_heads(config_yaml):
    """num_heads from the checkpoint's resolved config; a preset's value is written as
    `num_heads: null  # resolved: 4`."""
    line = next(l for l in config_yaml.splitlines() if l.startswith("num_heads:"))
    value = line.split(":", 1)[1].split("#")[0].strip()
    return int(value) if value not in ("null", "~", "") else int(line.split("resolved:")[1])


def main():
    ckpt, eval_path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    with h5py.File(ckpt, "r") as f:
        p = {k: torch.tensor(f["params"][k][...], dtype=torch.float64) for k in f["params"].keys()}
    L = 1 + max(int(k.split(".")[1]) for k in p if k.startswith("h."))
    NH = num_heads(h5py.File(ckpt, "r").attrs["config"])
    max_t = p["wpe"].shape[0]
    right = 0
    lines = [json.loads(l) for l in open(eval_path)][:n]
    for ex in lines:
        tokens = [BOS] + list(ex["prompt"].encode())
        out = []
        while len(tokens) < max_t and len(out) < 64:
            x = torch.tensor([tokens])
            nxt = int(logits_of(p, L, NH, x, None, torch.arange(len(tokens))[None])[0, -1].argmax())
            if nxt == EOS:
                break
            tokens.append(nxt)
            out.append(nxt)
        got = bytes(t for t in out if t < 256).decode(errors="replace")
        right += got == ex["completion"]
        print(f"  {ex['prompt']!r:>22} -> {got!r:<14} (expected {ex['completion']!r})")
    print(f"{right} of {len(lines)} exactly right")


if __name__ == "__main__":
    main()
