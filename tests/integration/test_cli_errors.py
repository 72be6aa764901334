"""Bad input of every class (SPEC §2): one `error:` line on stderr naming the key, file or row,
exit status 2, and nothing written or damaged (no output directory appears; an existing
checkpoint keeps its bytes). Multi-rank: a corrupt row seen by one rank ends every rank promptly."""
import hashlib
import os
import shutil
import time

import h5py
import numpy as np

from harness import (Checks, SFT_TRAIN, TINY_MODEL, make_data, run_train, tempdir, write_config,
                     write_init_params)

c = Checks("cli_errors")
d = tempdir()
make_data(f"{d}/train.h5", 40, seed=1)
good = dict(TINY_MODEL, run_name="e", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
            max_target_length=16, global_batch_size=8, steps=2, hardware="cpu")
cfg = write_config(f"{d}/good.yml", **good)


def expect_user_error(name, args, must_mention, np_=1, out_dir=f"{d}/out"):
    t0 = time.time()
    p = run_train(args[0], args[1:], np_=np_, check=False, timeout=120)
    errs = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    c.check(p.returncode == 2, f"{name}: exit status {p.returncode}, want 2\n{p.stdout}{p.stderr}")
    c.check(len(errs) >= 1 and must_mention in errs[0],
            f"{name}: error line should mention '{must_mention}': {errs}")
    c.check(len(errs) == 1, f"{name}: the message is printed once ({len(errs)} lines)")
    c.check(not os.path.exists(out_dir), f"{name}: nothing written under {out_dir}")
    return time.time() - t0


# --- command line and config ---
expect_user_error("missing config file", [f"{d}/nope.yml"], "nope.yml")
expect_user_error("override without =", [cfg, "steps"], "steps")
expect_user_error("unknown key", [cfg, "learning_rat=1e-3"], "learning_rat")
expect_user_error("wrong type", [cfg, "steps=ten"], "steps")
expect_user_error("negative learning rate", [cfg, "learning_rate=-1"], "learning_rate")
expect_user_error("adam_b2 >= 1", [cfg, "adam_b2=1.0"], "adam_b2")
expect_user_error("GA < 1", [cfg, "gradient_accumulation_steps=0"], "gradient_accumulation_steps")
expect_user_error("G not divisible by world x GA", [cfg, "gradient_accumulation_steps=3"], "global_batch_size")
expect_user_error("max_target_length above the position table", [cfg, "max_target_length=32"],
                  "max_target_length")
expect_user_error("both batch keys", [cfg, "per_device_batch_size=4"], "batch_size")
write_config(f"{d}/nobatch.yml", **{k: v for k, v in good.items() if k != "global_batch_size"})
expect_user_error("neither batch key", [f"{d}/nobatch.yml"], "batch_size")
expect_user_error("unknown preset", [cfg, "model_name=gpt5"], "model_name")
expect_user_error("bf16 on the CPU", [cfg, "dtype=bfloat16"], "dtype")
expect_user_error("global batch larger than the data", [cfg, "global_batch_size=64"], "global_batch_size")

# --- data files ---
expect_user_error("missing train file", [cfg, f"train_files={d}/missing.h5"], "missing.h5")
make_data(f"{d}/t32.h5", 40, T=32)
expect_user_error("T != max_target_length", [cfg, f"train_files={d}/t32.h5"], "t32.h5")
shutil.copy(f"{d}/train.h5", f"{d}/float_targets.h5")
with h5py.File(f"{d}/float_targets.h5", "r+") as f:
    t = f["targets"][...]
    del f["targets"]
    f.create_dataset("targets", data=t.astype(np.float64))
expect_user_error("targets of the wrong type", [cfg, f"train_files={d}/float_targets.h5"], "targets")
shutil.copy(f"{d}/train.h5", f"{d}/no_weights.h5")
with h5py.File(f"{d}/no_weights.h5", "r+") as f:
    del f["loss_weights"]
expect_user_error("missing dataset", [cfg, f"train_files={d}/no_weights.h5"], "loss_weights")
with open(f"{d}/text.h5", "w") as f:
    f.write("not hdf5\n")
expect_user_error("not an HDF5 file", [cfg, f"train_files={d}/text.h5"], "text.h5")
shutil.copy(f"{d}/train.h5", f"{d}/bad_token.h5")
with h5py.File(f"{d}/bad_token.h5", "r+") as f:
    f["inputs"][3, 5] = 999
expect_user_error("token id out of range", [cfg, f"train_files={d}/bad_token.h5",
                                            "enable_data_shuffling=false"], "row 3")
shutil.copy(f"{d}/train.h5", f"{d}/nan_weight.h5")
with h5py.File(f"{d}/nan_weight.h5", "r+") as f:
    f["loss_weights"][2, 7] = np.nan
expect_user_error("non-finite weight", [cfg, f"train_files={d}/nan_weight.h5",
                                        "enable_data_shuffling=false"], "row 2")
shutil.copy(f"{d}/train.h5", f"{d}/neg_weight.h5")
with h5py.File(f"{d}/neg_weight.h5", "r+") as f:
    f["loss_weights"][1, 0] = -1.0
expect_user_error("negative weight", [cfg, f"train_files={d}/neg_weight.h5",
                                      "enable_data_shuffling=false"], "row 1")

# --- parameters and checkpoints ---
write_init_params(f"{d}/wide.h5", model=dict(emb_dim=48, mlp_dim=96))
expect_user_error("load_parameters_path of another shape", [cfg, f"load_parameters_path={d}/wide.h5"],
                  "wide.h5")
run_train(cfg, {"base_output_directory": f"{d}/ck"})
ck = f"{d}/ck/e/checkpoints/step_2.h5"
with open(ck, "r+b") as f:  # corrupt the newest checkpoint's superblock
    f.seek(0)
    f.write(b"garbage!")
before = hashlib.sha256(open(ck, "rb").read()).hexdigest()
listing = sorted(os.listdir(f"{d}/ck/e/checkpoints"))
p = run_train(cfg, {"base_output_directory": f"{d}/ck", "steps": 4}, check=False)
c.check(p.returncode == 2 and "step_2.h5" in p.stderr, f"corrupt checkpoint: exit 2 naming it\n{p.stderr}")
c.check(hashlib.sha256(open(ck, "rb").read()).hexdigest() == before, "corrupt checkpoint left as it was")
c.check(sorted(os.listdir(f"{d}/ck/e/checkpoints")) == listing, "no checkpoint written")
# Rank 0 reads the checkpoint for every rank: on 2 ranks the same error, printed once, exit 2.
p = run_train(cfg, {"base_output_directory": f"{d}/ck", "steps": 4}, np_=2, check=False)
errs = [l for l in p.stderr.splitlines() if l.startswith("error:")]
c.check(p.returncode == 2 and len(errs) == 1 and "step_2.h5" in errs[0],
        f"corrupt checkpoint on 2 ranks: exit 2, one line\n{p.stderr}")
c.check(hashlib.sha256(open(ck, "rb").read()).hexdigest() == before, "still untouched after 2 ranks")

# --- several ranks: a corrupt row read by one rank ends every rank, message printed once ---
secs = expect_user_error("corrupt row on one rank of 2", [cfg, f"train_files={d}/bad_token.h5",
                                                          "enable_data_shuffling=false"], "row 3",
                         np_=2, out_dir=f"{d}/out/e/checkpoints")
c.check(secs < 60, f"2 ranks exit promptly ({secs:.1f} s)")
expect_user_error("config error on 4 ranks", [cfg, "adam_b2=2"], "adam_b2", np_=4)
# The bad row 3 is read by rank 1 of 2 when b = 2 (G=4): a rank other than 0 speaks for the job.
expect_user_error("corrupt row on rank 1 of 2", [cfg, f"train_files={d}/bad_token.h5", "global_batch_size=4",
                                                 "enable_data_shuffling=false"], "row 3",
                  np_=2, out_dir=f"{d}/out/e/checkpoints")
# A bad row in the eval set, found by one rank during evaluation, ends every rank too.
expect_user_error("corrupt eval row on rank 1 of 2", [cfg, f"eval_files={d}/bad_token.h5", "global_batch_size=4"], "row 3",
                  np_=2, out_dir=f"{d}/out/e/checkpoints")

# --- output directory ---
expect_user_error("unwritable base_output_directory", [cfg, "base_output_directory=/proc/sftdp"],
                  "base_output_directory", out_dir="/proc/sftdp")
os.makedirs(f"{d}/mdir/e/metrics.jsonl")
expect_user_error("metrics.jsonl is a directory", [cfg, f"base_output_directory={d}/mdir"],
                  "metrics.jsonl", out_dir=f"{d}/mdir/e/checkpoints")
run_train(cfg, {"base_output_directory": f"{d}/old"})
before = sorted(os.listdir(f"{d}/old/e/checkpoints"))
expect_user_error("resume=false over an earlier run's checkpoints",
                  [cfg, f"base_output_directory={d}/old", "resume=false"], "resume",
                  out_dir=f"{d}/old/e/nothing-new")
c.check(sorted(os.listdir(f"{d}/old/e/checkpoints")) == before, "the earlier run's checkpoints are untouched")
c.close()
