"""Bad input of every class (docs/SPEC.md §2): one `error:` line on stderr naming the key, file or
row, exit status 2, and nothing written or damaged (no output directory appears; an existing
checkpoint keeps its bytes). Multi-rank: a corrupt row seen by one rank ends every rank promptly.
The cases run in the order listed and share one directory, as one run of sft_train after another."""
import hashlib
import os
import shutil
import subprocess
import time

import h5py
import numpy as np
import pytest

from harness import MPI_ENV, SFT_TRAIN, TINY_MODEL, make_data, run_train, write_config, write_init_params


def _copy_and_edit(d, name, edit):
    shutil.copy(f"{d}/train.h5", f"{d}/{name}")
    with h5py.File(f"{d}/{name}", "r+") as f:
        edit(f)


def _float_targets(f):
    t = f["targets"][...]
    del f["targets"]
    f.create_dataset("targets", data=t.astype(np.float64))


def _set(dataset, index, value):
    def edit(f):
        f[dataset][index] = value
    return edit


@pytest.fixture(scope="module")
def env(workdir):
    """The work dir, with a good config and every bad file the cases below name."""
    d = workdir
    make_data(f"{d}/train.h5", 40, seed=1)
    good = dict(TINY_MODEL, run_name="e", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
                max_target_length=16, global_batch_size=8, steps=2, hardware="cpu")
    write_config(f"{d}/good.yml", **good)
    write_config(f"{d}/nobatch.yml", **{k: v for k, v in good.items() if k != "global_batch_size"})
    make_data(f"{d}/t32.h5", 40, T=32)
    _copy_and_edit(d, "float_targets.h5", _float_targets)
    _copy_and_edit(d, "no_weights.h5", lambda f: f.__delitem__("loss_weights"))
    with open(f"{d}/text.h5", "w") as f:
        f.write("not hdf5\n")
    _copy_and_edit(d, "bad_token.h5", _set("inputs", (3, 5), 999))
    _copy_and_edit(d, "nan_weight.h5", _set("loss_weights", (2, 7), np.nan))
    _copy_and_edit(d, "neg_weight.h5", _set("loss_weights", (1, 0), -1.0))
    write_init_params(f"{d}/wide.h5", model=dict(emb_dim=48, mlp_dim=96))
    return {"d": d, "cfg": f"{d}/good.yml"}


def expect_user_error(env, args, must_mention, np_=1, out_dir="{d}/out"):
    """Runs sft_train with args ({d} and {cfg} filled in); returns the seconds it took."""
    args = [a.format(**env) for a in args]
    out_dir = out_dir.format(**env)
    t0 = time.time()
    p = run_train(args[0], args[1:], np_=np_, check=False, timeout=120)
    secs = time.time() - t0
    errs = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    assert p.returncode == 2, f"exit status {p.returncode}, want 2\n{p.stdout}{p.stderr}"
    assert len(errs) >= 1 and must_mention in errs[0], f"error line should mention '{must_mention}': {errs}"
    assert len(errs) == 1, f"the message is printed once ({len(errs)} lines): {errs}"
    assert not os.path.exists(out_dir), f"something was written under {out_dir}"
    return secs


def case(name, args, must_mention, np_=1, out_dir="{d}/out"):
    return pytest.param(args, must_mention, np_, out_dir, id=name)


SHUFFLE_OFF = "enable_data_shuffling=false"


@pytest.mark.parametrize("args, must_mention, np_, out_dir", [
    # --- command line and config ---
    case("missing config file", ["{d}/nope.yml"], "nope.yml"),
    case("override without =", ["{cfg}", "steps"], "steps"),
    case("unknown key", ["{cfg}", "learning_rat=1e-3"], "learning_rat"),
    case("wrong type", ["{cfg}", "steps=ten"], "steps"),
    case("negative learning rate", ["{cfg}", "learning_rate=-1"], "learning_rate"),
    case("adam_b2 >= 1", ["{cfg}", "adam_b2=1.0"], "adam_b2"),
    case("GA < 1", ["{cfg}", "gradient_accumulation_steps=0"], "gradient_accumulation_steps"),
    case("G not divisible by world x GA", ["{cfg}", "gradient_accumulation_steps=3"], "global_batch_size"),
    case("max_target_length above the position table", ["{cfg}", "max_target_length=32"],
         "max_target_length"),
    case("both batch keys", ["{cfg}", "per_device_batch_size=4"], "batch_size"),
    case("neither batch key", ["{d}/nobatch.yml"], "batch_size"),
    case("unknown preset", ["{cfg}", "model_name=gpt5"], "model_name"),
    case("bf16 on the CPU", ["{cfg}", "dtype=bfloat16"], "dtype"),
    case("global batch larger than the data", ["{cfg}", "global_batch_size=64"], "global_batch_size"),
    case("context_parallelism not dividing the ranks", ["{cfg}", "context_parallelism=2"], "context_parallelism"),
    case("T not divisible by 2 x context_parallelism", ["{cfg}", "context_parallelism=3"], "context_parallelism"),
    # --- data files ---
    case("missing train file", ["{cfg}", "train_files={d}/missing.h5"], "missing.h5"),
    case("T != max_target_length", ["{cfg}", "train_files={d}/t32.h5"], "t32.h5"),
    case("targets of the wrong type", ["{cfg}", "train_files={d}/float_targets.h5"], "targets"),
    case("missing dataset", ["{cfg}", "train_files={d}/no_weights.h5"], "loss_weights"),
    case("not an HDF5 file", ["{cfg}", "train_files={d}/text.h5"], "text.h5"),
    case("token id out of range", ["{cfg}", "train_files={d}/bad_token.h5", SHUFFLE_OFF], "row 3"),
    case("non-finite weight", ["{cfg}", "train_files={d}/nan_weight.h5", SHUFFLE_OFF], "row 2"),
    case("negative weight", ["{cfg}", "train_files={d}/neg_weight.h5", SHUFFLE_OFF], "row 1"),
    # --- parameters ---
    case("load_parameters_path of another shape", ["{cfg}", "load_parameters_path={d}/wide.h5"], "wide.h5"),
])
def test_user_error(env, args, must_mention, np_, out_dir):
    expect_user_error(env, args, must_mention, np_, out_dir)


@pytest.fixture(scope="module")
def corrupt_checkpoint(env):
    """A finished 2-step run whose newest checkpoint's shard file has its superblock overwritten."""
    d = env["d"]
    run_train(env["cfg"], {"base_output_directory": f"{d}/ck"})
    ck = f"{d}/ck/e/checkpoints/step_2/shard_0.h5"
    with open(ck, "r+b") as f:
        f.seek(0)
        f.write(b"garbage!")
    return ck, sha256(ck), sorted(os.listdir(f"{d}/ck/e/checkpoints"))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_corrupt_checkpoint(env, corrupt_checkpoint):
    d, (ck, before, listing) = env["d"], corrupt_checkpoint
    p = run_train(env["cfg"], {"base_output_directory": f"{d}/ck", "steps": 4}, check=False)
    assert p.returncode == 2 and "step_2/shard_0.h5" in p.stderr, f"corrupt checkpoint: exit 2 naming its shard\n{p.stderr}"
    assert sha256(ck) == before, "corrupt checkpoint left as it was"
    assert sorted(os.listdir(f"{d}/ck/e/checkpoints")) == listing, "no checkpoint written"


def test_corrupt_checkpoint_two_ranks(env, corrupt_checkpoint):
    """Every rank reads its part; the ranks agree on the refusal: on 2 ranks one error line, exit 2."""
    d, (ck, before, _) = env["d"], corrupt_checkpoint
    p = run_train(env["cfg"], {"base_output_directory": f"{d}/ck", "steps": 4}, np_=2, check=False)
    errs = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    assert p.returncode == 2 and len(errs) == 1 and "step_2/shard_0.h5" in errs[0], \
        f"corrupt checkpoint on 2 ranks: exit 2, one line\n{p.stderr}"
    assert sha256(ck) == before, "still untouched after 2 ranks"


def test_corrupt_row_on_one_rank_of_2(env, note):
    """A corrupt row read by one rank ends every rank, promptly; the message printed once."""
    secs = expect_user_error(env, ["{cfg}", "train_files={d}/bad_token.h5", SHUFFLE_OFF], "row 3",
                             np_=2, out_dir="{d}/out/e/checkpoints")
    note(f"corrupt row on one rank of 2: every rank ended in {secs:.1f} s")
    assert secs < 60, f"2 ranks exit promptly ({secs:.1f} s)"


@pytest.mark.parametrize("args, must_mention, np_, out_dir", [
    case("config error on 4 ranks", ["{cfg}", "adam_b2=2"], "adam_b2", np_=4),
    # The bad row 3 is read by rank 1 of 2 when b = 2 (G=4): a rank other than 0 speaks for the job.
    case("corrupt row on rank 1 of 2", ["{cfg}", "train_files={d}/bad_token.h5", "global_batch_size=4",
                                        SHUFFLE_OFF], "row 3", np_=2, out_dir="{d}/out/e/checkpoints"),
    # A bad row in the eval set, found by one rank during evaluation, ends every rank too.
    case("corrupt eval row on rank 1 of 2", ["{cfg}", "eval_files={d}/bad_token.h5", "global_batch_size=4"],
         "row 3", np_=2, out_dir="{d}/out/e/checkpoints"),
    # --- output directory ---
    case("unwritable base_output_directory", ["{cfg}", "base_output_directory=/proc/sftdp"],
         "base_output_directory", out_dir="/proc/sftdp"),
])
def test_user_error_many_ranks_and_output(env, args, must_mention, np_, out_dir):
    expect_user_error(env, args, must_mention, np_, out_dir)


def test_metrics_jsonl_is_a_directory(env):
    os.makedirs(f"{env['d']}/mdir/e/metrics.jsonl")
    expect_user_error(env, ["{cfg}", "base_output_directory={d}/mdir"], "metrics.jsonl",
                      out_dir="{d}/mdir/e/checkpoints")


def test_resume_false_over_earlier_checkpoints(env):
    d = env["d"]
    run_train(env["cfg"], {"base_output_directory": f"{d}/old"})
    before = sorted(os.listdir(f"{d}/old/e/checkpoints"))
    expect_user_error(env, ["{cfg}", "base_output_directory={d}/old", "resume=false"], "resume",
                      out_dir="{d}/old/e/nothing-new")
    assert sorted(os.listdir(f"{d}/old/e/checkpoints")) == before, "the earlier run's checkpoints are untouched"


def test_a_closed_output_pipe_does_not_end_the_run(env):
    # `sft_train ... | head -1`, or a log reader that went away: writes to the closed pipe fail
    # (EPIPE) and the run goes on to its end and its own exit status, 0 here, instead of dying of
    # SIGPIPE at its first log line (status 141; a Slurm job's exit code would read 141). One rank
    # started plainly: under mpirun the ranks write to mpirun, and mpirun to the pipe.
    d = env["d"]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        p = subprocess.run([SFT_TRAIN, env["cfg"], f"base_output_directory={d}/closed"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=120, env=dict(os.environ, **MPI_ENV))
    finally:
        os.close(write_end)
    assert p.returncode == 0, f"exit status {p.returncode}, want 0\n{p.stderr[-3000:]}"
    assert "step_2" in os.listdir(f"{d}/closed/e/checkpoints"), "the run reached its end"
