#!/usr/bin/env python3
"""Draws the curves of one or several runs against the step to a PNG (docs/SPEC.md §6): loss and
eval_loss, grad_norm, lr, tokens_per_s and (in files that have it) tflops, one panel each, one colour
per run with a legend by run.

    scripts/plot_metrics.py RUN [RUN ...] [-o metrics.png] [--labels A,B,...]

Each RUN is a run directory <base_output_directory>/<run_name> (its metrics.jsonl is read) or a
metrics.jsonl. A run is labelled by its directory's name (--labels names them instead). The default
output is loss.png beside the metrics.jsonl of a single run, and metrics.png in the current directory
for several. Skipped steps (loss null) are left out of loss, grad_norm, tokens_per_s and tflops (their
norm and speed say nothing), kept in lr. Needs matplotlib (Debian's python3-matplotlib, installed by
scripts/install_deps.sh); draws with the Agg backend (no display).
Bad input: one `error:` line on stderr, exit 2, nothing written."""
import argparse
import json
import os
import sys

# (panel title, y axis label, series drawn in it: (metrics key, line style, label suffix))
PANELS = [
    ("loss", "nats per token", [("loss", "-", "train"), ("eval_loss", "o--", "eval")]),
    ("grad_norm", "global norm before clipping", [("grad_norm", "-", "")]),
    ("lr", "learning rate", [("lr", "-", "")]),
    ("tokens_per_s", "tokens / s", [("tokens_per_s", "-", "")]),
    ("tflops", "model TFLOP/s (whole job)", [("tflops", "-", "")]),
]
STEP_KEYS = ("loss", "grad_norm", "lr", "tokens_per_s", "tflops")  # the per-step keys read


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_metrics(path):
    """{key: [(step, value)]} of a metrics.jsonl for loss, eval_loss, grad_norm, lr, tokens_per_s, tflops."""
    series = {k: [] for k in STEP_KEYS + ("eval_loss",)}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    j = json.loads(line)
                    step = int(j["step"])
                    if "eval_loss" in j:
                        series["eval_loss"].append((step, float(j["eval_loss"])))
                        continue
                    skipped = j.get("loss") is None
                    for k in STEP_KEYS:
                        if k in j and j[k] is not None and (k == "lr" or not skipped):
                            series[k].append((step, float(j[k])))
                except (ValueError, KeyError, TypeError, AttributeError):
                    fail(f"{path}:{n}: not a metrics line (a JSON object with an integer step and numbers)")
    except OSError as e:
        fail(f"{path}: cannot read metrics file: {e.strerror}")
    if not series["loss"] and not series["eval_loss"]:
        fail(f"{path}: holds no loss or eval_loss line")
    return series


def metrics_path(run):
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        fail(f"{path}: no such metrics file")
    return path


def run_labels(paths):
    """Each run's name: its directory's (the run_name), with parent directories added until the names differ."""
    parts = [os.path.abspath(p).split(os.sep)[:-1] for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [os.path.abspath(p) for p in paths]


def panel_lines(runs):
    """What the figure draws: [(panel title, y label, [(legend label, style, steps, values)])] for runs =
    [(run label, series)]; a panel with no point in any run is left out."""
    panels = []
    for title, ylabel, keys in PANELS:
        lines = []
        for label, series in runs:
            for key, style, suffix in keys:
                points = series.get(key, [])
                if points:
                    name = f"{label} {suffix}".strip() if len(keys) > 1 else label
                    lines.append((name, style, [s for s, _ in points], [v for _, v in points]))
        if lines:
            panels.append((title, ylabel, lines))
    return panels


def plot(panels, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4 * rows), dpi=100, squeeze=False)
    colours = {}
    for ax, (name, ylabel, lines) in zip(axes.flat, panels):
        for label, style, steps, values in lines:
            run = label.rsplit(" ", 1)[0] if label.endswith((" train", " eval")) else label
            colour = colours.setdefault(run, f"C{len(colours) % 10}")
            ax.plot(steps, values, style, color=colour, label=label, lw=1.2, ms=4)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        if name == "lr":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (<base_output_directory>/<run_name>) "
                    "or metrics.jsonl files")
    ap.add_argument("-o", "--output", help="PNG to write (default: loss.png beside the metrics.jsonl of one "
                    "run, metrics.png here for several)")
    ap.add_argument("--labels", help="comma-separated legend names, one per run")
    args = ap.parse_args(argv)
    paths = [metrics_path(r) for r in args.runs]
    labels = run_labels(paths)
    if args.labels is not None:
        labels = args.labels.split(",")
        if len(labels) != len(paths):
            fail(f"--labels: {len(labels)} names for {len(paths)} runs")
    runs = [(label, read_metrics(p)) for label, p in zip(labels, paths)]
    if args.output:
        out = args.output
    elif len(paths) == 1:
        out = os.path.join(os.path.dirname(os.path.abspath(paths[0])), "loss.png")
    else:
        out = "metrics.png"
    try:
        plot(panel_lines(runs), out, ", ".join(labels))
    except OSError as e:
        fail(f"{out}: cannot write the plot: {e.strerror}")
    counts = "; ".join(f"{label}: {len(s['loss'])} loss, {len(s['eval_loss'])} eval_loss points" for label, s in runs)
    print(f"plot_metrics: {counts} -> {out}")


if __name__ == "__main__":
    main()
