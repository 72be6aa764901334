#!/usr/bin/env python3
"""Writes the demo SFT data set: reversing strings of 3 to 8 lowercase letters, as prompt/completion JSONL.

    "rev:abcde=" -> "edcba"        "rev:demo=" -> "omed"

A task that a small byte-level GPT-2 truly learns rather than memorises: there are 26^3..26^8
strings, so the 20000 training examples cover a vanishing part of them and the eval prompts (never
in the training set) can only be answered by the rule. configs/demo.yml's model (gpt2-tiny widened to
128 channels) gets about 97-100% of the eval prompts exactly right after 600 steps. (Three-digit
addition written most significant digit first, which this demo used before, stayed near 0% exactly
right at this size: its first digit depends on carries the model has not produced yet.) Every example
is at most 23 tokens (<|bos|> + 13 prompt bytes + 8 completion bytes + <|eos|>), so
max_target_length 24 holds it. Python 3 standard library only; the output is a pure function of
--seed (random.Random with an integer seed is stable across Python versions).

Convert to the SPEC §4 files that configs/demo.yml reads (scripts/demo.sh does this, and also writes
train.h5/eval.h5 at --max-length 64 for configs/tiny.yml):

    python3 scripts/make_demo_data.py --out data/generated
    build/sft_prepare --input data/generated/train.jsonl --output data/generated/demo_train.h5 --max-length 24
    build/sft_prepare --input data/generated/eval.jsonl  --output data/generated/demo_eval.h5  --max-length 24
"""
import argparse
import json
import os
import random
import string

MIN_LETTERS, MAX_LETTERS = 3, 8


def reversal(rng):
    text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(MIN_LETTERS, MAX_LETTERS)))
    return f"rev:{text}=", text[::-1]


def examples(rng, count, exclude):
    """count distinct (prompt, completion) pairs, none with a prompt in exclude."""
    out, seen = [], set(exclude)
    while len(out) < count:
        prompt, completion = reversal(rng)
        if prompt in seen:
            continue
        seen.add(prompt)
        out.append({"prompt": prompt, "completion": completion})
    rng.shuffle(out)
    return out


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/generated", help="output directory")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--train", type=int, default=20000, help="training examples")
    parser.add_argument("--eval", type=int, default=256, help="evaluation examples")
    args = parser.parse_args()
    if args.train < 1 or args.eval < 1:
        parser.error("--train and --eval must be >= 1")

    eval_rows = examples(random.Random(args.seed * 2 + 1), args.eval, exclude=())
    train_rows = examples(random.Random(args.seed * 2), args.train,
                          exclude=[r["prompt"] for r in eval_rows])
    os.makedirs(args.out, exist_ok=True)
    write_jsonl(os.path.join(args.out, "train.jsonl"), train_rows)
    write_jsonl(os.path.join(args.out, "eval.jsonl"), eval_rows)
    print(f"make_demo_data: {len(train_rows)} train and {len(eval_rows)} eval examples "
          f"(seed {args.seed}) in {args.out}")


if __name__ == "__main__":
    main()
