"""Checkpoints written in the background (async_checkpointing, SPEC §5, issue 36):
- async = sync bitwise: the same run with async_checkpointing true and false, on 2 ranks at zero_stage
  0 and 3, a checkpoint every step (so every save but the first waits for the one in flight), leaves
  the same checkpoints — parameters, m and v of every step bitwise — and the same losses; each
  checkpoint's log line says how long training waited and, for the background ones, that they were
  written in the background; the final one is committed before the run reports done.
- The default writes in the background and says so; async_checkpointing: true where it cannot be is
  covered by the config check; a bad value is one error line naming the key, exit 2.
- --plan names the checkpoint per rank as the run does (the run's host copy of rank 0's shard), and
  Llama-3.1-8B's on 8 and 64 ranks is 12 bytes per parameter divided by the ranks."""
import os
import re
import subprocess

import numpy as np
import pytest

from harness import MPI_ENV, SFT_TRAIN, TINY_MODEL, make_data, read_metrics, read_params, run_train, write_config

STEPS = 5


@pytest.fixture(scope="module")
def cfg(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 64, seed=1)
    return write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, run_name="r", train_files=f"{d}/train.h5", max_target_length=16, global_batch_size=8,
        steps=STEPS, learning_rate=3e-3, checkpoint_period=1, hardware="cpu", seed=3))


def run_both(workdir, cfg, stage):
    out = {}
    for mode in ("true", "false"):
        base = f"{workdir}/{mode}_{stage}"
        p = run_train(cfg, {"base_output_directory": base, "async_checkpointing": mode == "true",
                            "zero_stage": stage}, np_=2)
        out[mode] = (f"{base}/r", p)
    return out


@pytest.mark.parametrize("stage", [0, 3])
def test_async_equals_sync_bitwise(workdir, cfg, stage):
    runs = run_both(workdir, cfg, stage)
    (a_dir, a), (s_dir, s) = runs["true"], runs["false"]
    for step in range(1, STEPS + 1):
        for group in ("params", "opt/m", "opt/v"):
            x = read_params(f"{a_dir}/checkpoints/step_{step}", group)
            y = read_params(f"{s_dir}/checkpoints/step_{step}", group)
            assert x.keys() == y.keys()
            differ = [k for k in x if not np.array_equal(x[k], y[k])]
            assert not differ, f"step {step} {group}: async differs from sync in {differ}"
    assert [m["loss"] for m in read_metrics(a_dir)[0]] == [m["loss"] for m in read_metrics(s_dir)[0]]
    background = re.findall(r"^checkpoint \S+/step_(\d+) \(shards written in [\d.]+ s in the background; "
                            r"training waited [\d.]+ s\)$", a.stdout, re.M)
    at_boundary = re.findall(r"^checkpoint \S+/step_(\d+) \(shards written in [\d.]+ s; training waited [\d.]+ s\)$",
                             a.stdout, re.M)
    # Steps 1-4 in the background (each committed at a later boundary or by the next save), the final at once.
    assert background == ["1", "2", "3", "4"] and at_boundary == [str(STEPS)], a.stdout
    assert a.stdout.index(f"step_{STEPS} (") < a.stdout.index("done:"), a.stdout
    assert "checkpoints: async_checkpointing true: each rank copies its shard" in a.stdout, a.stdout
    assert "checkpoints: written at the step boundary (async_checkpointing: false" in s.stdout, s.stdout
    assert len(re.findall(r"^checkpoint \S+ \(shards written in [\d.]+ s; training", s.stdout, re.M)) == STEPS


def test_a_bad_value_is_one_error_line(workdir, cfg):
    p = run_train(cfg, {"base_output_directory": f"{workdir}/bad", "async_checkpointing": "maybe"}, check=False)
    assert p.returncode == 2 and "error: async_checkpointing" in p.stderr, p.stderr
    assert not os.path.exists(f"{workdir}/bad"), "nothing written"


def plan(config, *args):
    return subprocess.run([SFT_TRAIN, "--plan", *args, config], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **MPI_ENV))


def test_the_plan_names_the_runs_checkpoint_shard(workdir, cfg):
    stage3 = write_config(f"{workdir}/s3.yml", **dict(
        TINY_MODEL, run_name="r", base_output_directory=f"{workdir}/plan", train_files=f"{workdir}/train.h5",
        max_target_length=16, global_batch_size=8, steps=1, zero_stage=3, hardware="cpu"))
    p = run_train(stage3, np_=2)
    run = re.search(r"copies its shard to host memory \((.+?) on rank 0\)", p.stdout)
    q = plan(stage3, "--ranks", "2")
    assert q.returncode == 0, q.stdout + q.stderr
    planned = re.search(r"^plan: checkpoint \(zero_stage \d\): (.+?) per rank \(up to (.+?)\), (.+?) in all, in 2 "
                        r"shard file\(s\) and an index; async_checkpointing keeps that host copy: up to (.+?) per node",
                        q.stdout, re.M)
    assert run and planned, p.stdout + q.stdout
    assert planned.group(1) == run.group(1), (planned.group(0), run.group(0))


def gib_of(text):
    value, unit = text.split()
    return float(value) * (1 if unit == "GiB" else 1 / 1024)


@pytest.mark.parametrize("ranks", [8, 64])
def test_the_plan_gives_llama_8b_checkpoint_per_rank(workdir, ranks):
    c = write_config(f"{workdir}/l8b_{ranks}.yml", model_name="llama-3.1-8b", max_target_length=4096,
                     global_batch_size=ranks, remat=True, zero_stage=3, hardware="gpu", dtype="bfloat16",
                     weight_dtype="bfloat16", train_files="none.h5")
    p = plan(c, "--ranks", str(ranks), "--ranks-per-node", "8", "--memory-gib", "80")
    assert p.returncode == 0, p.stdout + p.stderr
    params = int(re.search(r"^plan: \S+ \(llama block\), (\d+) parameters", p.stdout, re.M).group(1))
    m = re.search(r"^plan: checkpoint \(zero_stage 3\): (.+?) per rank \(up to (.+?)\), (.+?) in all.*up to (.+?) "
                  r"per node of 8 rank", p.stdout, re.M)
    assert m, p.stdout
    per_rank, largest, total, node = (gib_of(g) for g in m.groups())
    want = 12 * params / ranks / 2**30
    assert abs(per_rank - want) / want < 0.01 and abs(largest - want) / want < 0.01, (per_rank, largest, want)
    assert abs(total - 12 * params / 2**30) / total < 0.01
    assert abs(node - 8 * largest) / node < 0.01
