"""TensorBoard event files and loss plots (docs/SPEC.md §6): a 6-step run with evaluation writes
<run>/tensorboard/events.out.tfevents.*; tensorboard's own EventAccumulator reads every scalar tag
back with the steps and (float32) values of metrics.jsonl. A crash after the step-3 checkpoint and
a resume add a second file whose SessionLog START makes TensorBoard drop the dead run's later
points, so each step shows once with the resumed run's values. scripts/plot_metrics.py draws a PNG.
Needs the tensorboard package (the .pyref venv of scripts/setup_pyref.sh) and matplotlib."""
import glob
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from harness import SOURCE, TINY_MODEL, make_data, read_metrics, run_train, write_config

TAGS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
        "train/tokens_per_s": "tokens_per_s"}


@pytest.fixture(scope="module")
def cfg(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 40, seed=1)
    make_data(f"{d}/eval.h5", 8, seed=2)
    return write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
        eval_files=f"{d}/eval.h5", eval_interval=2, max_target_length=16, global_batch_size=4,
        steps=6, learning_rate=3e-3, warmup_steps_fraction=0.3, checkpoint_period=3,
        keep_checkpoints=5, hardware="cpu", seed=3))


def load_scalars(run_dir):
    acc = event_accumulator.EventAccumulator(os.path.join(run_dir, "tensorboard"),
                                             size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expected(run_dir):
    train, evals = read_metrics(run_dir)
    want = {tag: [(m["step"], np.float32(m[key]).item()) for m in train if not m.get("skipped")]
            for tag, key in TAGS.items()}
    want["eval/loss"] = [(m["step"], np.float32(m["eval_loss"]).item()) for m in evals]
    return want


def check_equal(got, want):
    assert sorted(got) == sorted(want), f"scalar tags {sorted(got)}, expected {sorted(want)}"
    for tag in want:
        assert got[tag] == want[tag], f"{tag}: event file {got[tag]} != metrics.jsonl {want[tag]}"


@pytest.fixture(scope="module")
def run(workdir, cfg):
    run_train(cfg)
    return f"{workdir}/out/r"


def test_event_file_beside_metrics(run):
    files = glob.glob(f"{run}/tensorboard/events.out.tfevents.*.sftdp")
    assert len(files) == 1, f"event files: {os.listdir(run + '/tensorboard')}"


def test_scalars_equal_metrics_jsonl(run):
    got, want = load_scalars(run), expected(run)
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in want["eval/loss"]] == [0, 2, 4, 6]
    check_equal(got, want)


def test_resume_after_crash_shows_each_step_once(workdir, cfg):
    d = f"{workdir}/crash"
    run_train(cfg, {"base_output_directory": d})
    run_dir = f"{d}/r"
    shutil.rmtree(f"{run_dir}/checkpoints/step_6")  # the run "died" after the step-3 checkpoint
    with open(f"{run_dir}/metrics.jsonl") as f:
        lines = f.readlines()
    with open(f"{run_dir}/metrics.jsonl", "w") as f:
        f.writelines(l for l in lines if '"step":6' not in l)
    time.sleep(1.1)  # event file names carry whole seconds: the resumed run's sorts after
    p = run_train(cfg, {"base_output_directory": d})
    assert "step_3" in p.stdout, f"did not resume from step 3:\n{p.stdout}"
    assert len(glob.glob(f"{run_dir}/tensorboard/events.out.tfevents.*")) == 2
    got, want = load_scalars(run_dir), expected(run_dir)
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3, 4, 5, 6]
    # tokens_per_s of steps 4-6 differ between the two runs: equality means the dead run's
    # points were dropped, not merely duplicated.
    check_equal(got, want)


def test_fresh_run_replaces_event_files(workdir, cfg):
    d = f"{workdir}/fresh"
    run_train(cfg, {"base_output_directory": d, "steps": 2})
    for ck in glob.glob(f"{d}/r/checkpoints/*.h5"):
        os.remove(ck)
    run_train(cfg, {"base_output_directory": d, "steps": 2})
    assert len(glob.glob(f"{d}/r/tensorboard/events.out.tfevents.*")) == 1
    check_equal(load_scalars(f"{d}/r"), expected(f"{d}/r"))


def plot(*args):
    return subprocess.run([sys.executable, os.path.join(SOURCE, "scripts/plot_metrics.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_plot_metrics_writes_png(run, workdir):
    out = f"{workdir}/loss.png"
    p = plot(run, "-o", out)
    assert p.returncode == 0, p.stderr
    with open(out, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, f"not a PNG plot ({len(png)} bytes)"
    p = plot(f"{run}/metrics.jsonl")  # a metrics.jsonl path; default output beside it
    assert p.returncode == 0, p.stderr
    assert os.path.getsize(f"{run}/loss.png") > 5000


def test_plot_metrics_bad_input(workdir):
    p = plot(f"{workdir}/missing")
    assert p.returncode == 2 and p.stderr.startswith("error:") and "missing" in p.stderr, p.stderr
    bad = f"{workdir}/bad.jsonl"
    with open(bad, "w") as f:
        f.write('{"step": 1, "loss": 2.0}\nnot json\n')
    p = plot(bad, "-o", f"{workdir}/bad.png")
    assert p.returncode == 2 and "bad.jsonl:2" in p.stderr, p.stderr
    assert not os.path.exists(f"{workdir}/bad.png")
