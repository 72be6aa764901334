#!/usr/bin/env python3
"""Draws the loss and eval_loss curves of a run against the step to a PNG (docs/SPEC.md §6).

    scripts/plot_metrics.py RUN_DIR_or_metrics.jsonl [-o loss.png]

RUN_DIR is <base_output_directory>/<run_name> (its metrics.jsonl is read); the default output is
loss.png beside metrics.jsonl. Skipped steps (loss null) are left out. Needs matplotlib (Debian's
python3-matplotlib, installed by scripts/install_deps.sh); draws with the Agg backend (no display).
Bad input: one `error:` line on stderr, exit 2, nothing written."""
import argparse
import json
import os
import sys


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_metrics(path):
    """([(step, loss)], [(step, eval_loss)]) from a metrics.jsonl."""
    train, evals = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    j = json.loads(line)
                    step = int(j["step"])
                except (ValueError, KeyError, TypeError):
                    fail(f"{path}:{n}: not a metrics line (a JSON object with an integer step)")
                if "eval_loss" in j:
                    evals.append((step, float(j["eval_loss"])))
                elif j.get("loss") is not None:
                    train.append((step, float(j["loss"])))
    except OSError as e:
        fail(f"{path}: cannot read metrics file: {e.strerror}")
    if not train and not evals:
        fail(f"{path}: holds no loss or eval_loss line")
    return train, evals


def plot(train, evals, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], label="loss (train)", lw=1.2)
    if evals:
        ax.plot([s for s, _ in evals], [v for _, v in evals], "o-", label="eval_loss", lw=1.5, ms=4)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="run directory (<base_output_directory>/<run_name>) "
                    "or a metrics.jsonl")
    ap.add_argument("-o", "--output", help="PNG to write (default: loss.png beside metrics.jsonl)")
    args = ap.parse_args(argv)
    path = os.path.join(args.run, "metrics.jsonl") if os.path.isdir(args.run) else args.run
    if not os.path.isfile(path):
        fail(f"{path}: no such metrics file")
    train, evals = read_metrics(path)
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(path)), "loss.png")
    try:
        plot(train, evals, out, os.path.basename(os.path.dirname(os.path.abspath(path))))
    except OSError as e:
        fail(f"{out}: cannot write the plot: {e.strerror}")
    print(f"plot_metrics: {len(train)} loss and {len(evals)} eval_loss points -> {out}")


if __name__ == "__main__":
    main()
