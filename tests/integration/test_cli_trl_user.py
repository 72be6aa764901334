"""What a user coming from TRL, torchtune or axolotl meets (issue 35, items 6-9; docs/SPEC.md §3, §5, §6):
- TRL's names are read as sft-dp's keys, one `config:` line each, and the checkpoint stores sft-dp's keys;
- a resumed run logs every key that changed since its checkpoint and refuses a change of model (exit 2,
  one error line, nothing written or moved);
- with a Hugging Face directory in load_parameters_path, the log says its config.json gives the model and
  what became of model_name; a model_name that is no preset (a Hub id) is an error there too;
- the final evaluation line comes before the Hugging Face export's line.
Tiny GPT-2 runs of 1-4 steps on one CPU rank."""
import hashlib
import os
import shutil
import subprocess

import h5py
import pytest

from harness import BUILD, TINY_MODEL, make_data, run_train, write_config

SFT_EXPORT = os.path.join(BUILD, "sft_export")


@pytest.fixture(scope="module")
def env(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 32, seed=1)
    make_data(f"{d}/eval.h5", 8, seed=2)
    run = dict(TINY_MODEL, run_name="r", train_files=f"{d}/train.h5", max_target_length=16, global_batch_size=4,
               steps=2, hardware="cpu", learning_rate=1e-3)
    return {"d": d, "run": run, "cfg": write_config(f"{d}/c.yml", **run)}


def tree_digest(path):
    """{relative path: sha256} of every file under path: what a refused start must leave as it was."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def error_lines(p):
    return [line for line in p.stderr.splitlines() if line.startswith("error:")]


def test_trl_names_are_read_as_sft_dp_keys_with_a_line_each(env):
    d = env["d"]
    run = {k: v for k, v in env["run"].items() if k not in ("global_batch_size", "max_target_length", "steps")}
    cfg = write_config(f"{d}/trl.yml", **run, per_device_train_batch_size=4, max_seq_length=16, warmup_ratio=0.5,
                       max_steps=2)
    p = run_train(cfg, {"base_output_directory": f"{d}/trl", "lr_scheduler_type": "constant_with_warmup"})
    notes = [line for line in p.stdout.splitlines() if line.startswith("config: ")]
    assert notes == ["config: per_device_train_batch_size=4 read as per_device_batch_size=4",
                     "config: max_seq_length=16 read as max_target_length=16",
                     "config: warmup_ratio=0.5 read as warmup_steps_fraction=0.5",
                     "config: max_steps=2 read as steps=2",
                     "config: lr_scheduler_type=constant_with_warmup read as lr_schedule=constant, "
                     "lr_schedule_convention=transformers",
                     "config: where this config is silent, sft-dp's defaults apply, not TRL's: weight_decay 0.0 -> "
                     "adam_weight_decay 0.1; adam_beta2 0.999 -> adam_b2 0.95; seed 42 -> seed 0"], p.stdout
    with h5py.File(f"{d}/trl/r/checkpoints/step_2/index.h5", "r") as f:
        stored = f.attrs["config"]
        stored = stored.decode() if isinstance(stored, bytes) else stored
    assert "warmup_steps_fraction: 0.5\n" in stored and "per_device_batch_size: 4\n" in stored
    assert "warmup_ratio" not in stored and "max_seq_length" not in stored, "the checkpoint stores sft-dp's keys"
    # An alias beside the key it sets: one error line, nothing written.
    p = run_train(cfg, {"base_output_directory": f"{d}/trl_both", "warmup_steps_fraction": 0.1}, check=False)
    assert p.returncode == 2 and error_lines(p) == [
        "error: warmup_steps_fraction: warmup_ratio is given too, and both set warmup_steps_fraction (warmup_ratio is "
        "TRL's name for it); give one of them"], p.stderr
    assert not os.path.exists(f"{d}/trl_both")


def test_resume_lists_what_changed_and_refuses_another_model(env):
    d, cfg = env["d"], env["cfg"]
    out = {"base_output_directory": f"{d}/resume"}
    run_train(cfg, out)
    before = tree_digest(f"{d}/resume")
    p = run_train(cfg, dict(out, steps=4, num_decoder_layers=3), check=False)
    assert p.returncode == 2 and error_lines(p) == [
        f"error: num_decoder_layers: cannot change when resuming: {d}/resume/r/checkpoints/step_2 was trained "
        "with 2, this run has 3 (its tensors are that model's); set it back, or start a new run under another "
        "run_name"], p.stderr
    assert tree_digest(f"{d}/resume") == before, "a refused resume writes, moves and deletes nothing"
    p = run_train(cfg, dict(out, steps=4, learning_rate=5e-4, warmup_ratio=0.2))
    changed = [line for line in p.stdout.splitlines() if line.startswith("resume: ")]
    assert changed == ["resume: steps 2 -> 4", "resume: learning_rate 0.001 -> 5.0e-04",
                       "resume: warmup_steps_fraction 0.1 -> 0.2"], p.stdout


def test_model_name_beside_a_hugging_face_directory(env):
    d, cfg = env["d"], env["cfg"]
    run_train(cfg, {"base_output_directory": f"{d}/base"})
    hf = f"{d}/hf_tiny"
    subprocess.run([SFT_EXPORT, f"{d}/base/r/checkpoints/step_2", hf], check=True, capture_output=True)
    p = run_train(cfg, {"base_output_directory": f"{d}/hub", "load_parameters_path": hf,
                        "model_name": "Qwen/Qwen2.5-0.5B"}, check=False)
    errs = error_lines(p)
    assert p.returncode == 2 and len(errs) == 1, p.stderr
    assert errs[0].startswith("error: model_name: unknown preset 'Qwen/Qwen2.5-0.5B' (known: gpt2-tiny, ")
    assert errs[0].endswith(f"; load_parameters_path {hf} gives the model (its config.json): leave model_name out "
                            "or set it to \"\""), errs[0]
    assert not os.path.exists(f"{d}/hub")
    # TINY_MODEL's dimensions are the directory's; its model_name gpt2-tiny is a preset of another shape.
    p = run_train(cfg, {"base_output_directory": f"{d}/from_hf", "load_parameters_path": hf})
    assert f"model: gpt2 from {hf}/config.json (2 layers, emb_dim 32, vocab_size 64): the directory's config " \
           "wins; model_name gpt2-tiny is not used (its preset differs: num_heads 2 vs 4, num_kv_heads 2 vs 4, " \
           "emb_dim 32 vs 64, mlp_dim 64 vs 256, vocab_size 64 vs 264, max_position_embeddings 16 vs 256)" \
           in p.stdout.splitlines(), p.stdout


def test_the_final_eval_line_comes_before_the_export_line(env):
    d, cfg = env["d"], env["cfg"]
    p = run_train(cfg, {"base_output_directory": f"{d}/order", "eval_files": f"{d}/eval.h5", "hf_export": True})
    lines = p.stdout.splitlines()
    final_eval = [i for i, line in enumerate(lines) if line.startswith("step 2 | eval_loss ")]
    export = [i for i, line in enumerate(lines) if line.startswith("hugging face model ")]
    checkpoint = [i for i, line in enumerate(lines) if line.startswith("checkpoint ") and "step_2" in line]
    assert len(final_eval) == 1 and len(export) == 1 and len(checkpoint) == 1, p.stdout
    assert checkpoint[0] < final_eval[0] < export[0], "checkpoint, then the final evaluation, then the export\n" + \
        p.stdout


def test_steps_logged_beyond_the_checkpoint_are_said_to_be_trained_again(env):
    """A run that ended without a checkpoint after its last steps (SIGKILL, Ctrl-C twice at mpirun:
    test_stop_signal_mpi.py) loses them; the next start says which."""
    d, cfg = env["d"], env["cfg"]
    out = {"base_output_directory": f"{d}/lost", "steps": 4, "checkpoint_period": 2}
    run_train(cfg, out)
    shutil.rmtree(f"{d}/lost/r/checkpoints/step_4")  # as if killed before writing it
    p = run_train(cfg, out)
    assert (f"warning: {d}/lost/r/metrics.jsonl logged steps up to 4 but the checkpoint resumed from is step 2: "
            "steps 3-4 are trained again (the run that logged them ended without a checkpoint after them: killed, "
            "out of memory, or Ctrl-C twice at mpirun)") in p.stderr.splitlines(), p.stderr
    assert "warning: " not in run_train(cfg, out).stderr, "a finished run has nothing to say"
