"""LoRA (issue 17) through sft_train: docs/SPEC.md §1 over the adapters — the same 20-step run as
world × GA in {1×1, 1×4, 2×2, 4×1}, the multi-rank ones with zero_stage 0 and 1 (lora_dropout on,
all-linear adapters of a Llama-family model with Qwen3's q/k norm and an untied head, packed rows,
fully masked rows) gives the same step-1 loss (≤ 1e-6 rel), the same per-step losses (≤ 1e-5 rel)
and the same final adapters (≤ 1e-5 rel); checkpoints hold only the adapters and their base's
identity, and a resume at another world size and GA continues the run; a resume on another base
is refused (exit 2) and changes nothing; sft_export writes PEFT's tensor names, and --merge writes
W + (α/r)·B·A (checked here in numpy, GPT-2's Conv1D transposition included); bad LoRA keys are
one error line and exit 2."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest
from safetensors.numpy import load_file

from harness import (BUILD, TINY_MODEL, checkpoint_state, make_data, max_rel, read_metrics, read_params, run_train,
                     write_config, write_init_params)

LLAMA = dict(model_name="llama-tiny", decoder_block="qwen3", tie_word_embeddings=False, vocab_size=64)
LORA = dict(lora_rank=4, lora_alpha=8, lora_dropout=0.1, lora_target_modules="all-linear")
SPLITS = [(1, 1, 0), (1, 4, 0), (2, 2, 0), (2, 2, 1), (4, 1, 0), (4, 1, 1)]  # world, GA, zero_stage
STEPS = 20


@pytest.fixture(scope="module")
def env(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 165, seed=21, masked_rows={0, 7, 30}, segments=True)
    make_data(f"{d}/eval.h5", 9, seed=22, segments=True)
    make_data(f"{d}/train_gpt2.h5", 40, seed=23)
    write_init_params(f"{d}/base.h5", seed=1)
    write_init_params(f"{d}/other_base.h5", seed=2)
    cfg = write_config(f"{d}/llama.yml", **LLAMA, **LORA, train_files=f"{d}/train.h5", eval_files=f"{d}/eval.h5",
                       max_target_length=16, global_batch_size=8, steps=STEPS, learning_rate=1e-2,
                       enable_data_shuffling=False, hardware="cpu", seed=7, base_output_directory=f"{d}/out")
    gpt2 = write_config(f"{d}/gpt2.yml", **TINY_MODEL, lora_rank=2, lora_alpha=4, lora_target_modules="all-linear",
                        train_files=f"{d}/train_gpt2.h5", max_target_length=16, global_batch_size=4, steps=4,
                        learning_rate=2e-2, hardware="cpu", load_parameters_path=f"{d}/base.h5",
                        base_output_directory=f"{d}/out")
    return d, cfg, gpt2


def final_checkpoint(run_dir, step):
    return f"{run_dir}/checkpoints/step_{step}"


@pytest.fixture(scope="module")
def split_runs(env):
    d, cfg, _ = env
    runs = {}
    for world, ga, zero in SPLITS:
        name = f"w{world}g{ga}z{zero}"
        p = run_train(cfg, {"run_name": name, "gradient_accumulation_steps": ga, "zero_stage": zero}, np_=world)
        runs[(world, ga, zero)] = (p.stdout, f"{d}/out/{name}")
    return runs


def test_every_split_trains_the_same_adapters(split_runs):
    stdout, ref_dir = split_runs[(1, 1, 0)]
    assert "lora: rank 4" in stdout and "base frozen" in stdout, stdout
    ref_loss = [m["loss"] for m in read_metrics(ref_dir)[0]]
    ref = read_params(final_checkpoint(ref_dir, STEPS))
    for split, (_, run_dir) in split_runs.items():
        loss = [m["loss"] for m in read_metrics(run_dir)[0]]
        assert len(loss) == STEPS
        assert abs(loss[0] - ref_loss[0]) <= 1e-6 * ref_loss[0], split
        assert np.allclose(loss, ref_loss, rtol=1e-5, atol=0), (split, loss, ref_loss)
        got = read_params(final_checkpoint(run_dir, STEPS))
        assert max_rel(got, ref) <= 1e-5, (split, max_rel(got, ref))
    assert all(np.abs(v).max() > 1e-3 for k, v in ref.items() if k.endswith("lora_B"))  # trained from B = 0


def test_checkpoint_holds_only_adapters_and_names_the_base(split_runs):
    _, run_dir = split_runs[(1, 1, 0)]
    ck = final_checkpoint(run_dir, STEPS)
    params = read_params(ck)
    names = sorted(params)
    assert names and all(".lora_A" in n or ".lora_B" in n for n in names), names
    assert "h.1.self_attn.k_proj.lora_B" in names and "h.0.mlp.down_proj.lora_A" in names
    assert sorted(read_params(ck, "opt/m")) == names
    attrs = checkpoint_state(ck)
    assert attrs["lora_base"].startswith("seeded initialisation")
    assert len(attrs["lora_base_hash"]) == 16
    assert params["h.0.self_attn.q_proj.lora_A"].shape == (4, 64)  # llama-tiny: C = 64


def test_resume_at_another_world_size_and_ga_continues_the_run(env, split_runs):
    d, cfg, _ = env
    # 4 ranks × GA 1 to the end with a checkpoint at step 10; the last one removed, 2 ranks × GA 2
    # redo steps 11..20 from step 10's (the same schedule: steps stays 20).
    run_train(cfg, {"run_name": "resumed", "checkpoint_period": 10}, np_=4)
    shutil.rmtree(final_checkpoint(f"{d}/out/resumed", STEPS))
    p = run_train(cfg, {"run_name": "resumed", "gradient_accumulation_steps": 2}, np_=2)
    assert "resuming from" in p.stdout and "step_10" in p.stdout, p.stdout
    _, ref_dir = split_runs[(1, 1, 0)]
    got = read_params(final_checkpoint(f"{d}/out/resumed", STEPS))
    assert max_rel(got, read_params(final_checkpoint(ref_dir, STEPS))) <= 1e-5
    ref_loss = [m["loss"] for m in read_metrics(ref_dir)[0]]
    loss = [m["loss"] for m in read_metrics(f"{d}/out/resumed")[0]]
    assert np.allclose(loss, ref_loss, rtol=1e-5, atol=0)


def test_resume_on_another_base_is_refused_and_changes_nothing(env):
    d, _, gpt2 = env
    run_train(gpt2, {"run_name": "base_a", "steps": 2})
    ckpt_dir = f"{d}/out/base_a/checkpoints"
    before = sorted(os.listdir(ckpt_dir))
    p = run_train(gpt2, {"run_name": "base_a", "load_parameters_path": f"{d}/other_base.h5"}, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    err = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "base.h5" in err[0] and "other_base.h5" in err[0] and "hash" in err[0], p.stderr
    assert sorted(os.listdir(ckpt_dir)) == before


def test_export_writes_peft_names_and_merge_adds_scaled_ba(env):
    d, _, gpt2 = env
    run_train(gpt2, {"run_name": "export"})
    ckpt = final_checkpoint(f"{d}/out/export", 4)
    sft_export = os.path.join(BUILD, "sft_export")
    import subprocess
    subprocess.run([sft_export, ckpt, f"{d}/adapter"], check=True, capture_output=True)
    subprocess.run([sft_export, ckpt, f"{d}/merged", "--merge"], check=True, capture_output=True)
    cfg = json.load(open(f"{d}/adapter/adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 2 and cfg["lora_alpha"] == 4 and cfg["fan_in_fan_out"]
    assert cfg["target_modules"] == ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
    ad = load_file(f"{d}/adapter/adapter_model.safetensors")
    assert len(ad) == 2 * 4 * TINY_MODEL["num_decoder_layers"]
    base = read_params(f"{d}/base.h5")
    merged = load_file(f"{d}/merged/model.safetensors")
    scale = 4 / 2
    for l in range(TINY_MODEL["num_decoder_layers"]):
        for hf, spec in [("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.proj"), ("mlp.c_fc", "mlp.fc"),
                         ("mlp.c_proj", "mlp.proj")]:
            pre = f"base_model.model.transformer.h.{l}.{hf}"
            A, B = ad[pre + ".lora_A.weight"], ad[pre + ".lora_B.weight"]
            assert A.shape[0] == 2 and B.shape[1] == 2
            want = base[f"h.{l}.{spec}.weight"].astype(np.float64) + scale * (B.astype(np.float64) @ A)
            got = merged[f"transformer.h.{l}.{hf}.weight"].T  # Conv1D: [in, out]
            assert np.allclose(got, want, rtol=1e-6, atol=1e-7), (l, hf)
            assert np.abs(B).max() > 0  # trained: B left zero
    # Everything else is the base, bitwise.
    assert np.array_equal(merged["transformer.h.0.ln_1.weight"], base["h.0.ln_1.weight"])
    assert np.array_equal(merged["transformer.wte.weight"], base["wte"])


@pytest.mark.parametrize("override,needle", [
    ({"lora_target_modules": "q_proj"}, "lora_target_modules: 'q_proj' names no linear module of a gpt2 block"),
    ({"lora_rank": -1}, "lora_rank: must be >= 0"),
    ({"lora_dropout": 1.0}, "lora_dropout: must be in [0, 1)"),
    ({"lora_rank": 0, "lora_target_modules": "c_attn"}, "lora_target_modules: is set but lora_rank is 0"),
])
def test_bad_lora_keys_exit_2_with_one_error_line(env, override, needle):
    d, _, gpt2 = env
    p = run_train(gpt2, dict(override, run_name="bad"), check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    err = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and needle in err[0], p.stderr
    assert not os.path.exists(f"{d}/out/bad")


def test_a_mismatched_adapter_directory_is_refused(env):
    d, _, gpt2 = env
    run_train(gpt2, {"run_name": "src", "steps": 1})
    import subprocess
    subprocess.run([os.path.join(BUILD, "sft_export"), final_checkpoint(f"{d}/out/src", 1), f"{d}/src_adapter"],
                   check=True, capture_output=True)
    p = run_train(gpt2, {"run_name": "wrong_r", "lora_rank": 3, "load_adapter_path": f"{d}/src_adapter"}, check=False)
    assert p.returncode == 2 and "adapter_config.json: r: 2, but lora_rank is 3" in p.stderr, p.stderr
    # The same directory with the right keys loads: the run starts where the exported one ended.
    p = run_train(gpt2, {"run_name": "from_adapter", "steps": 1, "load_adapter_path": f"{d}/src_adapter",
                         "learning_rate": 0.0})
    a = read_params(final_checkpoint(f"{d}/out/from_adapter", 1))
    b = read_params(final_checkpoint(f"{d}/out/src", 1))
    assert all(np.array_equal(a[k], b[k]) for k in b)
