"""Resume is bit-perfect (SPEC §5): 6 steps straight vs 3 steps, a crash, and an automatic
resume from the step-3 checkpoint for the last 3 give bitwise-identical parameters, AdamW moments
and metrics (loss, lr, grad_norm, weight_sum). The loss also falls over 20 steps."""
import os
import shutil

import numpy as np

from harness import (Checks, TINY_MODEL, make_data, read_metrics, read_params, run_train,
                     tempdir, write_config)

c = Checks("resume_bitwise")
d = tempdir()
make_data(f"{d}/train.h5", 70, seed=1)
make_data(f"{d}/eval.h5", 20, seed=2)
base = dict(TINY_MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
            eval_files=f"{d}/eval.h5", eval_interval=2, max_target_length=16, global_batch_size=8,
            gradient_accumulation_steps=2, steps=6, learning_rate=3e-3, warmup_steps_fraction=0.2,
            enable_data_shuffling=True, data_shuffle_seed=5, checkpoint_period=3, hardware="cpu",
            seed=3)
cfg = write_config(f"{d}/c.yml", **base)

run_train(cfg, {"base_output_directory": f"{d}/straight"})
straight = f"{d}/straight/r"
c.check(sorted(os.listdir(f"{straight}/checkpoints")) == ["step_3.h5", "step_6.h5"],
        f"checkpoints of the straight run: {os.listdir(f'{straight}/checkpoints')}")

# The broken run: same 6-step schedule, but the process "dies" after the step-3 checkpoint.
run_train(cfg, {"base_output_directory": f"{d}/broken"})
broken = f"{d}/broken/r"
os.remove(f"{broken}/checkpoints/step_6.h5")
with open(f"{broken}/metrics.jsonl") as f:
    lines = f.readlines()
with open(f"{broken}/metrics.jsonl", "w") as f:  # what a crash at step 5 would leave behind
    f.writelines(l for l in lines if '"step":6' not in l)
p = run_train(cfg, {"base_output_directory": f"{d}/broken"})
c.check("resuming from" in p.stdout and "step_3.h5" in p.stdout, "the second run resumes from step 3")

a = read_params(f"{straight}/checkpoints/step_6.h5")
b = read_params(f"{broken}/checkpoints/step_6.h5")
c.check(all(np.array_equal(a[k], b[k]) for k in a), "params bitwise equal after resume")
for g in ("opt/m", "opt/v"):
    a = read_params(f"{straight}/checkpoints/step_6.h5", g)
    b = read_params(f"{broken}/checkpoints/step_6.h5", g)
    c.check(all(np.array_equal(a[k], b[k]) for k in a), f"{g} bitwise equal after resume")

ms, es = read_metrics(straight)
mb, eb = read_metrics(broken)
keys = ("step", "loss", "lr", "grad_norm", "weight_sum", "epoch")
c.check([[m[k] for k in keys] for m in ms] == [[m[k] for k in keys] for m in mb],
        "metrics of every step identical (no duplicate or missing step lines)")
c.check([e["eval_loss"] for e in es] == [e["eval_loss"] for e in eb], "eval losses identical")
c.check([m["step"] for m in ms] == [1, 2, 3, 4, 5, 6], "metrics steps 1..6")

# A finished run resumed again does nothing and changes nothing.
p = run_train(cfg, {"base_output_directory": f"{d}/straight"})
c.check("already complete" in p.stdout, "re-running a finished run is a no-op")

# The loss falls over 20 steps on a learnable task (targets = inputs shifted copy).
make_data(f"{d}/learn.h5", 160, seed=4)
import h5py
with h5py.File(f"{d}/learn.h5", "r+") as f:  # a learnable mapping: target = (input + 1) mod V
    f["targets"][...] = (f["inputs"][...] + 1) % 64
run_train(cfg, {"base_output_directory": f"{d}/learn", "train_files": f"{d}/learn.h5",
                "eval_files": f"{d}/learn.h5", "steps": 20, "checkpoint_period": 0,
                "learning_rate": 1e-2})
ml, el = read_metrics(f"{d}/learn/r")
c.check(ml[-1]["loss"] < 0.7 * ml[0]["loss"], f"loss falls: {ml[0]['loss']:.3f} -> {ml[-1]['loss']:.3f}")
c.check(el[-1]["eval_loss"] < el[0]["eval_loss"], "eval loss falls")
c.close()
