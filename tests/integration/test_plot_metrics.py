"""scripts/plot_metrics.py overlays several runs (docs/SPEC.md §6): given two metrics files it writes one
PNG whose panels hold, per run, loss and eval_loss, grad_norm, lr, tokens_per_s and tflops (where a file
has it), labelled by run.
What is drawn is checked through panel_lines (the data the figure is made of), not through pixels."""
import importlib.util
import json
import os
import subprocess
import sys

from harness import SOURCE

SCRIPT = os.path.join(SOURCE, "scripts", "plot_metrics.py")


def load_script():
    spec = importlib.util.spec_from_file_location("plot_metrics", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(run_dir, lines):
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for j in lines:
            f.write(json.dumps(j) + "\n")
    return run_dir


def step(s, loss, lr, norm, tps):
    return {"step": s, "loss": loss, "lr": lr, "grad_norm": norm, "weight_sum": 10.0, "tokens_per_s": tps,
            "step_time_s": 0.1, "epoch": 0}


RUN_A = [{"step": 0, "eval_loss": 4.0, "eval_weight_sum": 8.0}, step(1, 3.5, 1e-4, 2.0, 900.0),
         step(2, 3.0, 2e-4, 1.5, 950.0),
         {"step": 3, "loss": None, "lr": 3e-4, "grad_norm": 0.0, "weight_sum": 0, "tokens_per_s": 0.0,
          "step_time_s": 0.1, "epoch": 0, "skipped": True},
         {"step": 3, "eval_loss": 2.9, "eval_weight_sum": 8.0}]
RUN_B = [dict(step(1, 3.6, 5e-5, 2.5, 400.0), tflops=0.5), dict(step(2, 3.4, 5e-5, 2.2, 410.0), tflops=0.52)]


def lines_of(panels):
    """{(panel, legend label): (steps, values)}"""
    return {(title, label): (steps, values) for title, _, lines in panels for label, _, steps, values in lines}


def test_two_runs_overlaid_with_every_series(tmp_path):
    a = write_run(str(tmp_path / "lr1e-4"), RUN_A)
    b = write_run(str(tmp_path / "lr5e-5"), RUN_B)
    out = str(tmp_path / "both.png")
    p = subprocess.run([sys.executable, SCRIPT, a, os.path.join(b, "metrics.jsonl"), "-o", out],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "lr1e-4: 2 loss, 2 eval_loss points" in p.stdout and "lr5e-5: 2 loss, 0 eval_loss points" in p.stdout

    pm = load_script()
    paths = [os.path.join(a, "metrics.jsonl"), os.path.join(b, "metrics.jsonl")]
    labels = pm.run_labels(paths)
    assert labels == ["lr1e-4", "lr5e-5"]
    panels = pm.panel_lines([(label, pm.read_metrics(path)) for label, path in zip(labels, paths)])
    assert [title for title, _, _ in panels] == ["loss", "grad_norm", "lr", "tokens_per_s", "tflops"]
    got = lines_of(panels)
    assert got == {
        ("loss", "lr1e-4 train"): ([1, 2], [3.5, 3.0]),
        ("loss", "lr1e-4 eval"): ([0, 3], [4.0, 2.9]),
        ("loss", "lr5e-5 train"): ([1, 2], [3.6, 3.4]),
        ("grad_norm", "lr1e-4"): ([1, 2], [2.0, 1.5]),  # the skipped step 3's norm says nothing
        ("grad_norm", "lr5e-5"): ([1, 2], [2.5, 2.2]),
        ("lr", "lr1e-4"): ([1, 2, 3], [1e-4, 2e-4, 3e-4]),  # a skipped step still had its lr
        ("lr", "lr5e-5"): ([1, 2], [5e-5, 5e-5]),
        ("tokens_per_s", "lr1e-4"): ([1, 2], [900.0, 950.0]),
        ("tokens_per_s", "lr5e-5"): ([1, 2], [400.0, 410.0]),
        ("tflops", "lr5e-5"): ([1, 2], [0.5, 0.52]),  # only run B's file has the column
    }


def test_runs_with_the_same_name_are_told_apart_and_labels_can_be_given(tmp_path):
    a = write_run(str(tmp_path / "cpu" / "sft"), RUN_B)
    b = write_run(str(tmp_path / "gpu" / "sft"), RUN_B)
    pm = load_script()
    assert pm.run_labels([a + "/metrics.jsonl", b + "/metrics.jsonl"]) == ["cpu/sft", "gpu/sft"]
    out = str(tmp_path / "named.png")
    p = subprocess.run([sys.executable, SCRIPT, a, b, "--labels", "one,two", "-o", out], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "one: 2 loss" in p.stdout and "two: 2 loss" in p.stdout, p.stderr
    p = subprocess.run([sys.executable, SCRIPT, a, b, "--labels", "one", "-o", str(tmp_path / "x.png")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: --labels") and not os.path.exists(tmp_path / "x.png")
