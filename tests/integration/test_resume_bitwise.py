"""Resume is bit-perfect (docs/SPEC.md §5): 6 steps straight vs 3 steps, a crash, and an automatic
resume from the step-3 checkpoint for the last 3 give bitwise-identical parameters, AdamW moments
and metrics (loss, lr, grad_norm, weight_sum). sft_train writes sharded checkpoints (step_<S>/,
SPEC §5); the single-file form (sft_export --consolidate) resumes to the same bits. The loss also
falls over 20 steps.

Every check runs for two models: gpt2-tiny, and a Llama-family one (issue 10) on packed rows (two
segments a row, positions restarting at 0): llama-tiny with Qwen2's q/k/v biases and an untied LM
head, so lm_head.weight and the biases' AdamW moments go through the checkpoint too."""
import json
import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

from harness import BUILD, TINY_MODEL, make_data, read_metrics, read_params, run_train, write_config


# model -> (model keys, extra make_data arguments)
MODELS = {
    "gpt2": (TINY_MODEL, {}),
    "llama": (dict(model_name="llama-tiny", decoder_block="qwen2", tie_word_embeddings=False),
              dict(segments=True)),
}
# Tensors whose presence (+) or absence (-) in the checkpoint shows the model keys took effect.
SIGNATURE = {"gpt2": {"wpe": True, "h.1.mlp.fc.bias": True},
             "llama": {"wpe": False, "lm_head.weight": True, "h.1.attn.qkv.bias": True,
                       "h.1.attn.q_norm.weight": False}}


@pytest.fixture(scope="module", params=list(MODELS))
def model(workdir, request):
    """(model name, its work dir)."""
    os.makedirs(f"{workdir}/{request.param}")
    return request.param, f"{workdir}/{request.param}"


@pytest.fixture(scope="module")
def cfg(model):
    name, d = model
    keys, data = MODELS[name]
    make_data(f"{d}/train.h5", 70, seed=1, **data)
    make_data(f"{d}/eval.h5", 20, seed=2, **data)
    base = dict(keys, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
                eval_files=f"{d}/eval.h5", eval_interval=2, max_target_length=16, global_batch_size=8,
                gradient_accumulation_steps=2, steps=6, learning_rate=3e-3, warmup_steps_fraction=0.2,
                enable_data_shuffling=True, data_shuffle_seed=5, checkpoint_period=3, hardware="cpu",
                seed=3)
    return write_config(f"{d}/c.yml", **base)


@pytest.fixture(scope="module")
def runs(model, cfg):
    """(straight run dir, resumed run dir, stdout of the resuming run)."""
    d = model[1]
    run_train(cfg, {"base_output_directory": f"{d}/straight"})
    # The broken run: same 6-step schedule, but the process "dies" after the step-3 checkpoint.
    run_train(cfg, {"base_output_directory": f"{d}/broken"})
    broken = f"{d}/broken/r"
    shutil.rmtree(f"{broken}/checkpoints/step_6")
    with open(f"{broken}/metrics.jsonl") as f:
        lines = f.readlines()
    with open(f"{broken}/metrics.jsonl", "w") as f:  # what a crash at step 5 would leave behind
        f.writelines(l for l in lines if '"step":6' not in l)
    p = run_train(cfg, {"base_output_directory": f"{d}/broken"})
    return f"{d}/straight/r", broken, p.stdout


def test_straight_run_checkpoints(model, runs):
    straight = runs[0]
    listing = sorted(os.listdir(f"{straight}/checkpoints"))
    assert listing == ["step_3", "step_6"], f"checkpoints of the straight run: {listing}"
    params = read_params(f"{straight}/checkpoints/step_6")
    wrong = {k: want for k, want in SIGNATURE[model[0]].items() if (k in params) != want}
    assert not wrong, f"{model[0]}: tensors present (True) / absent (False) as expected: {wrong}"


def test_second_run_resumes_from_step_3(runs):
    stdout = runs[2]
    assert "resuming from" in stdout and "step_3" in stdout, f"no resume from step 3:\n{stdout}"


@pytest.mark.parametrize("group", ["params", "opt/m", "opt/v"])
def test_state_bitwise_equal_after_resume(runs, group):
    straight, broken, _ = runs
    a = read_params(f"{straight}/checkpoints/step_6", group)
    b = read_params(f"{broken}/checkpoints/step_6", group)
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, f"{group} not bitwise equal after resume: {differ}"


def test_single_file_checkpoint_resumes_bitwise(model, cfg, runs):
    """The step-3 checkpoint consolidated into one step_3.h5 (sft_export --consolidate: the old
    format) holds the same floats, and a run resumes from it to the straight run's bits."""
    d, straight = model[1], runs[0]
    ck = f"{d}/single/r/checkpoints"
    os.makedirs(ck)
    p = subprocess.run([f"{BUILD}/sft_export", "--consolidate", f"{straight}/checkpoints/step_3", f"{ck}/step_3.h5"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "single-file checkpoint" in p.stdout, p.stderr
    again = subprocess.run([f"{BUILD}/sft_export", "--consolidate", f"{straight}/checkpoints/step_3", f"{ck}/step_3.h5"],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr, again.stderr
    for group in ("params", "opt/m", "opt/v"):
        a, b = read_params(f"{ck}/step_3.h5", group), read_params(f"{straight}/checkpoints/step_3", group)
        assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in b), group
    with open(f"{straight}/metrics.jsonl") as f:
        lines = [l for l in f if json.loads(l)["step"] <= 3]
    with open(f"{d}/single/r/metrics.jsonl", "w") as f:
        f.writelines(lines)
    p = run_train(cfg, {"base_output_directory": f"{d}/single"})
    assert f"resuming from {ck}/step_3.h5 (step 3" in p.stdout, p.stdout
    for group in ("params", "opt/m", "opt/v"):
        a, b = read_params(f"{ck}/step_6", group), read_params(f"{straight}/checkpoints/step_6", group)
        assert all(np.array_equal(a[k], b[k]) for k in b), f"{group} after resuming from the single file"


def test_metrics_identical(runs):
    straight, broken, _ = runs
    ms, es = read_metrics(straight)
    mb, eb = read_metrics(broken)
    keys = ("step", "loss", "lr", "grad_norm", "weight_sum", "epoch")
    assert [[m[k] for k in keys] for m in ms] == [[m[k] for k in keys] for m in mb], \
        "metrics of every step identical (no duplicate or missing step lines)"
    assert [e["eval_loss"] for e in es] == [e["eval_loss"] for e in eb], "eval losses identical"
    assert [m["step"] for m in ms] == [1, 2, 3, 4, 5, 6], "metrics steps 1..6"


def test_finished_run_is_a_noop(model, cfg, runs):
    p = run_train(cfg, {"base_output_directory": f"{model[1]}/straight"})
    assert "already complete" in p.stdout, f"re-running a finished run is a no-op:\n{p.stdout}"


@pytest.fixture(scope="module")
def learned(model, cfg):
    """20 steps on a learnable task: target = (input + 1) mod V."""
    d = model[1]
    make_data(f"{d}/learn.h5", 160, seed=4, **MODELS[model[0]][1])
    with h5py.File(f"{d}/learn.h5", "r+") as f:
        f["targets"][...] = (f["inputs"][...] + 1) % 64
    run_train(cfg, {"base_output_directory": f"{d}/learn", "train_files": f"{d}/learn.h5",
                    "eval_files": f"{d}/learn.h5", "steps": 20, "checkpoint_period": 0,
                    "learning_rate": 1e-2})
    return read_metrics(f"{d}/learn/r")


def test_loss_falls(learned):
    ml, el = learned
    assert ml[-1]["loss"] < 0.7 * ml[0]["loss"], f"loss falls: {ml[0]['loss']:.3f} -> {ml[-1]['loss']:.3f}"
    assert el[-1]["eval_loss"] < el[0]["eval_loss"], \
        f"eval loss falls: {el[0]['eval_loss']:.3f} -> {el[-1]['eval_loss']:.3f}"
