"""Checkpoints under faults (SPEC §5, README "Failures"); sft_train writes sharded checkpoints,
step_<S>/ with shard_<r>.h5 and index.h5. A disk that fills up mid-run: the job exits 1 naming the
shard file and "No space left on device" (on 2 ranks: one such line, the ranks agree), the previous
checkpoint stays loadable, no temporary file is left and the new directory has no index (no
checkpoint), metrics.jsonl stays valid, and a later run removes it and resumes from that checkpoint.
A damaged newest checkpoint: the run warns naming the shard file, why and the checkpoint used, moves
the damaged one aside (step_<S>.corrupt) and trains on from the previous one to the same final state
as an uninterrupted run; when no checkpoint loads, one `error:` line naming them, exit 2, nothing
touched. A checkpoint write killed midway (a step_<S>/ without index, or an old-format
.step_<S>.h5.tmp.<pid>) is removed by the next run.
The full disk is a small tmpfs (mounting needs root; the test skips where mounting is refused)."""
import contextlib
import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from harness import TINY_MODEL, make_data, read_params, run_train, write_config

STEPS, PERIOD = 6, 2  # checkpoints at steps 2, 4, 6
# One checkpoint of this model is ~460 KiB: 700 KiB hold the step-2 one but not step 4's as well.
SMALL_FS_KIB, BIG_FS_KIB = 700, 4096


@pytest.fixture(scope="module")
def cfg(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 70, seed=1)
    base = dict(TINY_MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
                max_target_length=16, global_batch_size=8, steps=STEPS, learning_rate=3e-3,
                warmup_steps_fraction=0.2, enable_data_shuffling=True, data_shuffle_seed=5,
                checkpoint_period=PERIOD, hardware="cpu", seed=3)
    return write_config(f"{d}/c.yml", **base)


@pytest.fixture(scope="module")
def straight(workdir, cfg):
    """The run dir of an uninterrupted run (checkpoints at 2, 4, 6)."""
    run_train(cfg, {"base_output_directory": f"{workdir}/straight"})
    return f"{workdir}/straight/r"


def metric_steps(run_dir):
    """Steps of metrics.jsonl; every line must be one JSON object."""
    with open(f"{run_dir}/metrics.jsonl") as f:
        lines = f.read().splitlines()
    return [json.loads(line)["step"] for line in lines]


def assert_params_equal(a_path, b_path):
    for group in ("params", "opt/m", "opt/v"):
        a, b = read_params(a_path, group), read_params(b_path, group)
        differ = [k for k in b if not np.array_equal(a[k], b[k])]
        assert not differ, f"{group} of {a_path} and {b_path} differ: {differ}"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tree(path):
    """{relative path: sha256} of every file below path."""
    return {os.path.relpath(os.path.join(r, n), path): sha256(os.path.join(r, n))
            for r, _, names in os.walk(path) for n in names}


# ---------------------------------------------------------------- disk full while checkpointing
@contextlib.contextmanager
def small_tmpfs(mnt):
    """A SMALL_FS_KIB tmpfs at mnt, unmounted at the end; skips where mounting is refused."""
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_FS_KIB}k", "tmpfs", mnt],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


@pytest.fixture(scope="module")
def small_fs(workdir):
    with small_tmpfs(f"{workdir}/small") as mnt:
        yield mnt


@pytest.fixture(scope="module")
def disk_full(cfg, small_fs):
    """(run dir, CompletedProcess) of a run whose step-4 checkpoint does not fit."""
    p = run_train(cfg, {"base_output_directory": small_fs}, check=False)
    return f"{small_fs}/r", p


def test_disk_full_exits_1_naming_checkpoint_and_os_reason(disk_full):
    run, p = disk_full
    assert p.returncode == 1, f"disk full: exit 1 expected, got {p.returncode}\n{p.stderr}"
    assert f"cannot write checkpoint {run}/checkpoints/step_4/shard_0.h5: No space left on device" in p.stderr, \
        f"message names the shard file and the OS reason first:\n{p.stderr}"
    assert "temporary file removed" in p.stderr, p.stderr


def test_disk_full_leaves_no_temporary_and_keeps_previous(disk_full, straight):
    run, _ = disk_full
    assert sorted(os.listdir(f"{run}/checkpoints")) == ["step_2", "step_4"], os.listdir(f"{run}/checkpoints")
    assert os.listdir(f"{run}/checkpoints/step_4") == [], "no temporary file and no index: not a checkpoint"
    assert_params_equal(f"{run}/checkpoints/step_2", f"{straight}/checkpoints/step_2")


def test_disk_full_leaves_metrics_valid(disk_full):
    """The step-4 checkpoint is written in the background (async_checkpointing, the default here): its
    failure ends the job at the first step boundary after the write ended, step 5's or the final
    step 6's (which waits for it)."""
    run, _ = disk_full
    steps = metric_steps(run)
    assert steps in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]), f"metrics.jsonl: one valid line per step done: {steps}"


def test_disk_full_written_at_the_boundary_ends_the_job_there(cfg, workdir):
    """async_checkpointing: false: the step-4 write fails before step 5 starts; same message, same state."""
    with small_tmpfs(f"{workdir}/small_sync") as mnt:
        p = run_train(cfg, {"base_output_directory": mnt, "async_checkpointing": False}, check=False)
        run = f"{mnt}/r"
        assert p.returncode == 1, p.stderr
        assert f"cannot write checkpoint {run}/checkpoints/step_4/shard_0.h5: No space left on device" in p.stderr
        assert metric_steps(run) == [1, 2, 3, 4]
        assert "checkpoints: written at the step boundary (async_checkpointing: false" in p.stdout, p.stdout
        assert os.listdir(f"{run}/checkpoints/step_4") == []


def test_resume_after_disk_full_reaches_the_straight_result(disk_full, small_fs, cfg, straight):
    run, _ = disk_full
    subprocess.run(["mount", "-o", f"remount,size={BIG_FS_KIB}k", small_fs], check=True)
    p = run_train(cfg, {"base_output_directory": small_fs})
    assert f"removed {run}/checkpoints/step_4 (0 bytes): a checkpoint write that never finished" in p.stdout, p.stdout
    assert f"resuming from {run}/checkpoints/step_2 " in p.stdout, p.stdout
    assert_params_equal(f"{run}/checkpoints/step_{STEPS}", f"{straight}/checkpoints/step_{STEPS}")
    assert metric_steps(run) == list(range(1, STEPS + 1))


@pytest.fixture(scope="module")
def small_fs_2(workdir):
    """A second one, for the 2-rank run."""
    with small_tmpfs(f"{workdir}/small2") as mnt:
        yield mnt


def test_disk_full_on_two_ranks_is_agreed(cfg, small_fs_2):
    """Both ranks write their shard; a failed one fails the checkpoint on every rank: one report, exit 1."""
    p = run_train(cfg, {"base_output_directory": small_fs_2}, np_=2, check=False)
    run = f"{small_fs_2}/r"
    lines = [l for l in p.stderr.splitlines() if "cannot write checkpoint" in l]
    assert p.returncode == 1 and len(lines) == 1, f"exit 1, one report:\n{p.stderr}"
    assert f"cannot write checkpoint {run}/checkpoints/step_4/shard_" in lines[0] and \
        "No space left on device" in lines[0], lines[0]
    assert not os.path.exists(f"{run}/checkpoints/step_4/index.h5"), "no index: not a checkpoint"
    assert sorted(os.listdir(f"{run}/checkpoints/step_2")) == ["index.h5", "shard_0.h5", "shard_1.h5"]


# ---------------------------------------------------------------- damaged newest checkpoint
def crashed_copy(straight, dest):
    """The straight run as a crash after the step-4 checkpoint would leave it."""
    shutil.copytree(straight, dest)
    shutil.rmtree(f"{dest}/checkpoints/step_6")
    with open(f"{dest}/metrics.jsonl") as f:
        lines = [l for l in f if json.loads(l)["step"] <= 5]
    with open(f"{dest}/metrics.jsonl", "w") as f:
        f.writelines(lines)


def truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


@pytest.fixture(scope="module")
def fallback(workdir, cfg, straight):
    """(run dir, CompletedProcess): step_4's shard truncated, the run resumed."""
    crashed_copy(straight, f"{workdir}/fb/r")
    truncate(f"{workdir}/fb/r/checkpoints/step_4/shard_0.h5")
    return f"{workdir}/fb/r", run_train(cfg, {"base_output_directory": f"{workdir}/fb"})


def test_damaged_newest_warns_naming_both_files(fallback):
    run, p = fallback
    ck = f"{run}/checkpoints"
    warnings = [l for l in p.stderr.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 2, p.stderr
    w = warnings[0]
    assert f"{ck}/step_4/shard_0.h5: not a readable HDF5 shard" in w, w
    assert f"resuming from the older {ck}/step_2 instead" in w and f"kept as {ck}/step_4.corrupt" in w, w
    assert f"resuming from {ck}/step_2 " in p.stdout, p.stdout
    # The crashed run had logged steps up to 5: the ones after step 2 are trained again, and it says so (issue 35).
    assert warnings[1].startswith(f"warning: {run}/metrics.jsonl logged steps up to 5 but the checkpoint resumed "
                                  "from is step 2: steps 3-5 are trained again"), warnings[1]


def test_damaged_newest_is_moved_aside(fallback):
    run, _ = fallback
    assert sorted(os.listdir(f"{run}/checkpoints")) == \
        ["step_2", "step_4", "step_4.corrupt", "step_6"], os.listdir(f"{run}/checkpoints")


def test_fallback_trains_to_the_straight_result(fallback, straight):
    run, _ = fallback
    assert_params_equal(f"{run}/checkpoints/step_{STEPS}", f"{straight}/checkpoints/step_{STEPS}")
    assert metric_steps(run) == list(range(1, STEPS + 1)), "metrics: steps 3..6 redone once each"


def test_a_write_killed_midway_is_removed_by_the_next_run(workdir, cfg, straight):
    # a rank SIGKILLed while writing step 6 leaves step_6/ without its index (and an older build
    # .step_6.h5.tmp.<pid>); the resumed run removes both (saying so), resumes from step 4 and ends
    # as the straight run.
    crashed_copy(straight, f"{workdir}/killed/r")
    ck = f"{workdir}/killed/r/checkpoints"
    os.makedirs(f"{ck}/step_6")
    with open(f"{straight}/checkpoints/step_6/shard_0.h5", "rb") as src:
        half = src.read()[:1000]
    for name in ("step_6/.shard_0.h5.tmp.4242", ".step_6.h5.tmp.4242"):
        with open(f"{ck}/{name}", "wb") as dst:
            dst.write(half)
    p = run_train(cfg, {"base_output_directory": f"{workdir}/killed"})
    for name in ("step_6", ".step_6.h5.tmp.4242"):
        assert f"removed {ck}/{name} (1000 bytes): a checkpoint write that never finished" in p.stdout, p.stdout
    assert f"resuming from {ck}/step_4 " in p.stdout, p.stdout
    assert sorted(os.listdir(ck)) == ["step_2", "step_4", "step_6"], os.listdir(ck)
    assert_params_equal(f"{ck}/step_{STEPS}", f"{straight}/checkpoints/step_{STEPS}")


def test_no_loadable_checkpoint_is_exit_2_naming_them(workdir, cfg, straight):
    crashed_copy(straight, f"{workdir}/none/r")
    ck = f"{workdir}/none/r/checkpoints"
    truncate(f"{ck}/step_4/shard_0.h5")
    with open(f"{ck}/step_2/index.h5", "r+b") as f:
        f.write(b"garbage!")
    os.makedirs(f"{ck}/step_6")  # a refused start removes no unfinished write either
    with open(f"{ck}/step_6/.shard_0.h5.tmp.4242", "wb") as f:
        f.write(b"half")
    before = tree(ck)
    p = run_train(cfg, {"base_output_directory": f"{workdir}/none"}, check=False)
    errors = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1, f"exit 2, one error line:\n{p.stderr}"
    assert f"{ck}/step_4/shard_0.h5: not a readable HDF5 shard" in errors[0] and \
        f"{ck}/step_2/index.h5: not a readable HDF5" in errors[0], errors[0]
    assert tree(ck) == before, "checkpoints untouched"
