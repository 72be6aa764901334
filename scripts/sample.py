#!/usr/bin/python3
"""Greedy completions from a trained checkpoint, to see what the demo learned: a thin wrapper over
sft_generate (through scripts/generate.py's byte tokenizer).

usage: sample.py CHECKPOINT.h5 EVAL.jsonl [N]
Reads the first N prompt/completion lines of EVAL.jsonl, encodes each prompt with the byte
tokenizer (<|bos|> + UTF-8 bytes, as sft_prepare does), lets sft_generate ($SFTDP_BUILD_DIR, else
build/) decode greedily until <|eos|> (at most 64 tokens), and prints prompt, expected and got,
then "K of N exactly right"."""
import json
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate import ByteTokenizer, generate, strip_stop  # noqa: E402


def main():
    ckpt, eval_path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    lines = [json.loads(l) for l in open(eval_path)][:n]
    tok = ByteTokenizer()
    stops = tok.stop_ids(chat=False)
    args = SimpleNamespace(model=ckpt, adapter=None, max_new_tokens=64, max_length=None, temperature=None,
                           top_k=None, top_p=None, seed=None, hardware="cpu")
    outputs = generate(args, [tok.encode_prompt(ex["prompt"]) for ex in lines], stops)
    right = 0
    for ex, out in zip(lines, outputs):
        got = tok.decode(strip_stop(out, stops))
        right += got == ex["completion"]
        print(f"  {ex['prompt']!r:>22} -> {got!r:<14} (expected {ex['completion']!r})")
    print(f"{right} of {len(lines)} exactly right")


if __name__ == "__main__":
    main()
