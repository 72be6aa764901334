"""What a newcomer meets first at the command line (issue 26, item 7):
- `sft_export CHECKPOINT OUT` creates OUT's missing parent directories, as sft_prepare does for its
  output, and a failed export leaves none of them behind (nothing written);
- `sft_train --help` names the families it trains (GPT-2, SmolLM2, Qwen2.5, Qwen3, Llama 3.x), and
  configs/reference.yml's model_name, load_parameters_path and hf_export comments speak of both families;
- a config error under `mpirun -np 2` ends with exit 2 and the one `error:` line: with `mpirun -q` (the
  flag README and --help give) nothing else, since the banner that follows otherwise is mpirun's own,
  printed after every rank has exited (a rank cannot turn it off)."""
import os
import re
import subprocess

import pytest

from harness import BUILD, MPI_ENV, SFT_TRAIN, SOURCE, TINY_MODEL, make_data, run_train, write_config

SFT_EXPORT = os.path.join(BUILD, "sft_export")
FAMILIES = ["GPT-2", "SmolLM2", "Qwen2.5", "Qwen3", "Llama 3"]
OMPI_BANNER = "mpirun detected that one or more processes exited with non-zero status"


@pytest.fixture(scope="module")
def checkpoint(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 16, seed=1)
    cfg = write_config(f"{d}/c.yml", **TINY_MODEL, run_name="r", base_output_directory=f"{d}/out",
                       train_files=f"{d}/train.h5", max_target_length=16, global_batch_size=4, steps=1,
                       hardware="cpu")
    run_train(cfg)
    return f"{d}/out/r/checkpoints/step_1"


def test_export_creates_missing_parent_directories(checkpoint, workdir):
    out = f"{workdir}/exports/deeper/model"
    assert not os.path.exists(f"{workdir}/exports")
    p = subprocess.run([SFT_EXPORT, checkpoint, out], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors"]


def test_failed_export_leaves_no_parent_directory(workdir):
    p = subprocess.run([SFT_EXPORT, f"{workdir}/no_such.h5", f"{workdir}/gone/deeper/model"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("error:") and "no_such.h5" in p.stderr, p.stderr
    assert not os.path.exists(f"{workdir}/gone")


def test_export_parent_that_is_a_file_is_one_error_line(checkpoint, workdir):
    with open(f"{workdir}/plain_file", "w") as f:
        f.write("x\n")
    for out in ("plain_file/model", "plain_file/deeper/model"):
        p = subprocess.run([SFT_EXPORT, checkpoint, f"{workdir}/{out}"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        assert p.stderr.splitlines() == [f"error: {workdir}/{out}: {workdir}/plain_file is not a directory"]


def test_help_names_every_family():
    p = subprocess.run([SFT_TRAIN, "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "GPT-2-family model" not in text
    for family in FAMILIES:
        assert family in text, f"sft_train --help does not name {family}"
    assert "configs/recipes/" in text and "mpirun -q" in text


def comment_above(text, key):
    """The comment block directly above `key:` in a YAML file, joined into one line."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(f"{key}:"))
    block = []
    for line in reversed(lines[:i]):
        if not line.startswith("#"):
            break
        block.insert(0, line.lstrip("# "))
    return " ".join(block)


def test_reference_yml_speaks_of_both_families():
    with open(os.path.join(SOURCE, "configs", "reference.yml")) as f:
        text = f.read()
    model = comment_above(text, "model_name")
    load = comment_above(text, "load_parameters_path")
    export = comment_above(text, "hf_export")
    for comment in (model, load, export):
        assert re.search("GPT-?2", comment) and re.search("[Ll]lama", comment), comment
    assert "Hugging Face GPT-2 directory" not in load + export
    for model_type in ("gpt2", "llama", "qwen2", "qwen3"):
        assert model_type in load, f"load_parameters_path's comment omits model_type {model_type}"
    assert "PEFT" in export  # what a LoRA run exports


def mpirun(args, workdir):
    return subprocess.run(["mpirun", *args, "-np", "2", "--oversubscribe", SFT_TRAIN, f"{workdir}/bad.yml"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, **MPI_ENV))


def test_config_error_under_mpirun_q_is_the_error_line_alone(workdir):
    write_config(f"{workdir}/bad.yml", **TINY_MODEL, train_files=f"{workdir}/train.h5", global_batch_size=2,
                 max_target_length=16, learning_rat=1)  # one problem: one error line
    expected = "error: learning_rat: unknown key (did you mean learning_rate?)"
    p = mpirun(["-q"], workdir)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [expected] and p.stdout == "", p.stderr
    # Without -q, mpirun adds its banner after the ranks have exited: the reason README and --help
    # give the flag (the error line is still there, once).
    p = mpirun([], workdir)
    assert p.returncode == 2 and p.stderr.count(expected) == 1, p.stderr
    if OMPI_BANNER not in p.stderr:
        pytest.fail("mpirun printed no exit banner without -q: README's advice on mpirun -q needs a look\n"
                    + p.stderr)
    with open(os.path.join(SOURCE, "README.md")) as f:
        readme = " ".join(f.read().split())
    assert "mpirun -q" in readme and "OMPI_MCA_orte_execute_quiet=1" in readme
