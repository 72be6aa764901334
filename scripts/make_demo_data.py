#!/usr/bin/env python3
"""Writes the demo SFT data set: 3-digit addition and string reversal, as prompt/completion JSONL.

    "123+456=" -> "579"        "rev:abcde=" -> "edcba"

Both tasks are learnable by a tiny byte-level GPT-2 at max_target_length 64 (every example is
under 20 tokens), and the loss sits on the completion only, so learning shows in the eval loss
within a few hundred steps. Python 3 standard library only; the output is a pure function of
--seed (random.Random with an integer seed is stable across Python versions). Eval prompts never
occur in the training set.

Convert to the SPEC §4 files that configs/tiny.yml reads (scripts/demo.sh does exactly this):

    python3 scripts/make_demo_data.py --out data/generated
    build/sft_prepare --input data/generated/train.jsonl --output data/generated/train.h5 --max-length 64
    build/sft_prepare --input data/generated/eval.jsonl  --output data/generated/eval.h5  --max-length 64
"""
import argparse
import json
import os
import random
import string


def addition(rng):
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    return f"{a}+{b}=", str(a + b)


def reversal(rng):
    text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))
    return f"rev:{text}=", text[::-1]


def examples(rng, count, exclude):
    """count distinct (prompt, completion) pairs, half of each task, none with a prompt in exclude."""
    out, seen = [], set(exclude)
    while len(out) < count:
        prompt, completion = (addition if len(out) % 2 == 0 else reversal)(rng)
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
    parser.add_argument("--train", type=int, default=4000, help="training examples")
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
