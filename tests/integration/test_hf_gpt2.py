"""Hugging Face GPT-2 directories in and out (src/hf): a tiny random GPT2LMHeadModel saved by
transformers (save_pretrained, safetensors) loads through load_parameters_path=<dir> and sft-dp's
first-step loss and gradients equal transformers' (float64) on an SFT batch with masked prompt
tokens; sft_export writes a directory transformers loads with sft-dp's logits, bitwise equal to the
original for fp32; fp16/bf16 files load; bad directories exit 2 naming the file and tensor.

Gradients: one AdamW step with weight decay 0, no clipping, lr = 1e5 and eps = 1e3 moves each
parameter by exactly -lr·g/(|g|+eps) (step 1: m̂ = g, v̂ = g²), so the checkpoint after step 1
minus the imported weights gives sft-dp's gradient g of the token-weighted mean loss."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from harness import (BUILD, make_data, max_rel, read_metrics, read_params, run_train, spec_of_hf_gpt2,
                     weighted_nll, write_config)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../model"))
from reference_gpt2 import logits_of  # noqa: E402

transformers = pytest.importorskip("transformers")
SFT_EXPORT = os.path.join(BUILD, "sft_export")
L, NH, C, V, T = 2, 2, 32, 64, 16


def spec_of_hf(sd):
    """SPEC §5 tensors (numpy) of this file's L-layer HF GPT-2 state dict."""
    return spec_of_hf_gpt2(sd, L)


def hf_model(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=L, n_embd=C, n_head=NH, vocab_size=V, n_positions=T,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = transformers.GPT2LMHeadModel(cfg).float().eval()  # reference_gpt2 sets float64 as default
    with torch.no_grad():  # biases and LayerNorms away from their 0/1 init, so they are tested too
        for name, p in m.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    return m


def hf_loss(model, inputs, targets, weights):
    return weighted_nll(model(torch.tensor(inputs, dtype=torch.long)).logits, targets, weights)


@pytest.fixture(scope="module")
def env(workdir):
    d = workdir
    model = hf_model()
    model.save_pretrained(f"{d}/hf", safe_serialization=True)
    make_data(f"{d}/train.h5", 8, T=T, vocab=V, seed=3)  # each row: a zero-weight prompt, then loss tokens
    make_data(f"{d}/eval.h5", 6, T=T, vocab=V, seed=4)
    base = dict(load_parameters_path=f"{d}/hf", train_files=f"{d}/train.h5", global_batch_size=8,
                max_target_length=T, steps=1, hardware="cpu", enable_data_shuffling=False,
                base_output_directory=f"{d}/out", warmup_steps_fraction=0.0, adam_weight_decay=0.0,
                gradient_clipping_threshold=0.0)
    return d, model, base


def test_import_loss_and_gradients_match_transformers(env, note):
    d, model, base = env
    cfg = write_config(f"{d}/grad.yml", **base, run_name="grad", learning_rate=1e5, adam_eps=1e3)
    run_train(cfg)
    train, _ = read_metrics(f"{d}/out/grad")
    import h5py
    with h5py.File(f"{d}/train.h5") as f:
        inputs, targets, weights = f["inputs"][...], f["targets"][...], f["loss_weights"][...]
    ref = hf_model().double()
    ref.load_state_dict(model.state_dict())
    loss = hf_loss(ref, inputs, targets, weights)
    loss.backward()
    g_hf = spec_of_hf({k: p.grad.numpy() for k, p in ref.named_parameters()})
    loss_rel = abs(train[0]["loss"] - loss.item()) / loss.item()
    assert loss_rel <= 1e-5, (train[0]["loss"], loss.item())

    p0 = spec_of_hf({k: v.numpy() for k, v in model.state_dict().items()})
    p1 = read_params(f"{d}/out/grad/checkpoints/step_1")
    lr, eps = train[0]["lr"], 1e3
    assert lr == 1e5
    expected_delta = {k: -lr * g / (np.abs(g) + eps) for k, g in g_hf.items()}
    delta = {k: np.float64(p1[k]) - p0[k] for k in p0}
    grad_rel = max_rel(delta, expected_delta)
    note(f"test_hf_gpt2: first-step loss rel err {loss_rel:.2e}, gradient rel err {grad_rel:.2e}")
    assert grad_rel <= 1e-5


def test_export_loads_in_transformers_bitwise_round_trip(env, note):
    d, model, base = env
    cfg = write_config(f"{d}/rt.yml", **base, run_name="rt", learning_rate=0.0)
    run_train(cfg)  # lr 0: the step-1 checkpoint holds the imported weights unchanged
    ckpt = f"{d}/out/rt/checkpoints/step_1"
    os.makedirs(f"{d}/tok")
    json.dump({"model_max_length": T}, open(f"{d}/tok/tokenizer_config.json", "w"))
    p = subprocess.run([SFT_EXPORT, ckpt, f"{d}/export/", "--tokenizer", f"{d}/tok"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(f"{d}/export")) == ["config.json", "generation_config.json", "model.safetensors",
                                                 "tokenizer_config.json"]
    orig, back = load_file(f"{d}/hf/model.safetensors"), load_file(f"{d}/export/model.safetensors")
    assert set(orig) == set(back)
    for k in orig:
        assert orig[k].dtype == back[k].dtype == torch.float32
        assert torch.equal(orig[k], back[k]), k  # HF -> sft-dp -> HF is bitwise
    cfg_json = json.load(open(f"{d}/export/config.json"))
    assert cfg_json["architectures"] == ["GPT2LMHeadModel"] and cfg_json["torch_dtype"] == "float32"

    loaded = transformers.AutoModelForCausalLM.from_pretrained(f"{d}/export").eval().double()
    params = {k: torch.tensor(np.float64(v)) for k, v in read_params(ckpt).items()}
    ids = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = loaded(ids).logits
    want = logits_of(params, L, NH, ids, None, torch.arange(T).expand(3, T))
    err = float((got - want).abs().max() / want.abs().max())
    note(f"test_hf_gpt2: exported model's logits vs sft-dp's (float64) max rel {err:.1e}")
    assert err <= 1e-10

    # Exported after training (a real optimizer step): transformers' loss = sft-dp's eval loss.
    cfg = write_config(f"{d}/tr.yml", **dict(base, steps=2), run_name="tr", learning_rate=1e-2,
                       eval_files=f"{d}/eval.h5")
    run_train(cfg)
    assert subprocess.run([SFT_EXPORT, f"{d}/out/tr/checkpoints/step_2", f"{d}/export2"]).returncode == 0
    _, evals = read_metrics(f"{d}/out/tr")
    import h5py
    with h5py.File(f"{d}/eval.h5") as f:
        args = f["inputs"][...], f["targets"][...], f["loss_weights"][...]
    trained = transformers.AutoModelForCausalLM.from_pretrained(f"{d}/export2").eval()
    with torch.no_grad():
        hf_eval = hf_loss(trained, *args).item()
    assert abs(evals[-1]["eval_loss"] - hf_eval) / hf_eval <= 1e-5, (evals[-1], hf_eval)


def test_hf_export_at_end_of_training(env, note):
    """hf_export: true makes sft_train (2 ranks; rank 0 writes) leave <run_dir>/hf/ after the final
    checkpoint: transformers loads it with the final checkpoint's logits, its safetensors equal
    sft_export's of that checkpoint bit for bit, and a longer resumed run replaces it."""
    d, model, base = env
    os.makedirs(f"{d}/tok_end", exist_ok=True)
    json.dump({"model_max_length": T}, open(f"{d}/tok_end/tokenizer_config.json", "w"))
    run = dict(base, steps=2, run_name="end", learning_rate=1e-2)
    # Bad tokenizer sources are set-up errors: exit 2 naming the key, no run directory written.
    for over, key in [({"hf_export_tokenizer": f"{d}/tok_end"}, "hf_export_tokenizer: is set but hf_export"),
                      ({"hf_export": True, "hf_export_tokenizer": f"{d}/no_such_tok"}, "hf_export_tokenizer: ")]:
        p = run_train(write_config(f"{d}/end_bad.yml", **run, **over), check=False)
        assert p.returncode == 2 and key in p.stderr, p.stderr
        assert not os.path.exists(f"{d}/out/end")
    cfg = write_config(f"{d}/end.yml", **run, hf_export=True, hf_export_tokenizer=f"{d}/tok_end")
    run_train(cfg, np_=2)
    out = f"{d}/out/end"
    assert sorted(os.listdir(f"{out}/hf")) == ["config.json", "generation_config.json", "model.safetensors",
                                               "tokenizer_config.json"]
    ckpt = f"{out}/checkpoints/step_2"
    assert subprocess.run([SFT_EXPORT, ckpt, f"{d}/end_export"]).returncode == 0
    ours, theirs = load_file(f"{out}/hf/model.safetensors"), load_file(f"{d}/end_export/model.safetensors")
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)

    loaded = transformers.AutoModelForCausalLM.from_pretrained(f"{out}/hf").eval().double()
    params = {k: torch.tensor(np.float64(v)) for k, v in read_params(ckpt).items()}
    assert not np.array_equal(params["wte"].numpy(), spec_of_hf(model.state_dict())["wte"])  # trained
    ids = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        got = loaded(ids).logits
    want = logits_of(params, L, NH, ids, None, torch.arange(T).expand(3, T))
    err = float((got - want).abs().max() / want.abs().max())
    note(f"test_hf_gpt2: hf_export at the end of training: logits vs the final checkpoint's max rel {err:.1e}")
    assert err <= 1e-10

    # Resumed for one more step: hf/ is replaced by the step-3 model.
    run_train(write_config(f"{d}/end3.yml", **dict(run, steps=3), hf_export=True))
    assert sorted(os.listdir(f"{out}/hf")) == ["config.json", "generation_config.json", "model.safetensors"]
    p3 = read_params(f"{out}/checkpoints/step_3")
    wte = load_file(f"{out}/hf/model.safetensors")["transformer.wte.weight"].numpy()
    assert np.array_equal(wte, p3["wte"])


def test_fp16_bf16_load(env):
    d, model, base = env
    for dtype, tag in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
        shutil.copytree(f"{d}/hf", f"{d}/{tag}", ignore=shutil.ignore_patterns("model.safetensors"))
        sd = {k: v.to(dtype).contiguous() for k, v in load_file(f"{d}/hf/model.safetensors").items()}
        save_file(sd, f"{d}/{tag}/model.safetensors", metadata={"format": "pt"})
        cfg = write_config(f"{d}/{tag}.yml", **dict(base, load_parameters_path=f"{d}/{tag}"), run_name=tag,
                           learning_rate=0.0)
        run_train(cfg)
        got = read_params(f"{d}/out/{tag}/checkpoints/step_1")
        want = spec_of_hf({k: v.float().numpy() for k, v in sd.items()})
        for k in want:
            assert np.array_equal(got[k], want[k]), (tag, k)


def test_sharded_index_and_gpt2model_names(env):
    """transformers' own sharded save (model.safetensors.index.json), and GPT2Model's names
    (no "transformer." prefix, no lm_head), load to the same parameters."""
    d, model, base = env
    model.save_pretrained(f"{d}/sharded", safe_serialization=True, max_shard_size="20KB")
    assert os.path.exists(f"{d}/sharded/model.safetensors.index.json")
    assert not os.path.exists(f"{d}/sharded/model.safetensors")
    model.transformer.save_pretrained(f"{d}/bare", safe_serialization=True)
    assert "wte.weight" in load_file(f"{d}/bare/model.safetensors")
    want = spec_of_hf({k: v.numpy() for k, v in model.state_dict().items()})
    for tag in ["sharded", "bare"]:
        cfg = write_config(f"{d}/{tag}.yml", **dict(base, load_parameters_path=f"{d}/{tag}/"), run_name=tag,
                           learning_rate=0.0)
        run_train(cfg)
        got = read_params(f"{d}/out/{tag}/checkpoints/step_1")
        for k in want:
            assert np.array_equal(got[k], want[k]), (tag, k)


def _bad_dir(d, name, edit_tensors=None, raw=None, config_edit=None):
    out = f"{d}/bad_{name}"
    shutil.copytree(f"{d}/hf", out)
    if edit_tensors:
        sd = load_file(f"{out}/model.safetensors")
        edit_tensors(sd)
        save_file(sd, f"{out}/model.safetensors", metadata={"format": "pt"})
    if raw:
        data = open(f"{out}/model.safetensors", "rb").read()
        open(f"{out}/model.safetensors", "wb").write(raw(data))
    if config_edit:
        c = json.load(open(f"{out}/config.json"))
        config_edit(c)
        json.dump(c, open(f"{out}/config.json", "w"))
    return out


def _header_dtype(data, tensor, dtype):
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])
    h[tensor]["dtype"] = dtype
    text = json.dumps(h, separators=(",", ":")).encode().ljust(n)
    assert len(text) == n
    return data[:8] + text + data[8 + n:]


def test_bad_hf_dirs_exit_2_naming_file_and_tensor(env):
    d, model, base = env
    c_attn = "transformer.h.1.attn.c_attn.weight"
    cases = [
        ("missing", dict(edit_tensors=lambda sd: sd.pop(c_attn)), ["model.safetensors", c_attn, "missing"]),
        ("shape", dict(edit_tensors=lambda sd: sd.update({c_attn: sd[c_attn][:, :-1].contiguous()})),
         ["model.safetensors", c_attn, "[32, 95]"]),
        ("truncated", dict(raw=lambda b: b[:-100]), ["model.safetensors", "truncated"]),
        ("dtype", dict(raw=lambda b: _header_dtype(b, "transformer.wpe.weight", "F64")),
         ["model.safetensors", "transformer.wpe.weight", "F64"]),
        ("header", dict(raw=lambda b: struct.pack("<Q", 1 << 40) + b[8:]), ["model.safetensors", "header length"]),
        ("config", dict(config_edit=lambda c: c.update(activation_function="relu")),
         ["config.json", "activation_function"]),
        ("eps", dict(config_edit=lambda c: c.update(layer_norm_epsilon=1e-6)), ["config.json", "layer_norm_epsilon"]),
        ("nolayer", dict(config_edit=lambda c: c.pop("n_layer")), ["config.json", "n_layer"]),
        ("lm_head", dict(edit_tensors=lambda sd: sd.update({"lm_head.weight": sd["transformer.wte.weight"] + 1})),
         ["model.safetensors", "lm_head.weight"]),
    ]
    for name, kw, words in cases:
        bad = _bad_dir(d, name, **kw)
        cfg = write_config(f"{d}/bad_{name}.yml", **dict(base, load_parameters_path=bad), run_name=f"bad_{name}",
                           learning_rate=0.0)
        p = run_train(cfg, check=False)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
        assert err and err[-1].startswith("error:") or "error:" in p.stderr, (name, p.stderr)
        for w in words:
            assert w in p.stderr, (name, w, p.stderr)
        assert not os.path.exists(f"{d}/out/bad_{name}"), name
    # An explicit dimension that disagrees with config.json names both values.
    cfg = write_config(f"{d}/dims.yml", **base, run_name="dims", emb_dim=64)
    p = run_train(cfg, check=False)
    assert p.returncode == 2 and "emb_dim: 64" in p.stderr and "n_embd = 32" in p.stderr, p.stderr
    # sft_export: bad input writes nothing.
    p = subprocess.run([SFT_EXPORT, f"{d}/train.h5", f"{d}/export_bad"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error:") and "train.h5" in p.stderr, p.stderr
    assert not os.path.exists(f"{d}/export_bad")
    # The HF directory that gave a run its dimensions is gone: exit 2 saying so, nothing written.
    cfg = write_config(f"{d}/gone.yml", **dict(base, load_parameters_path=f"{d}/gone"), run_name="gone",
                       learning_rate=0.0)
    shutil.copytree(f"{d}/hf", f"{d}/gone")
    run_train(cfg)
    shutil.rmtree(f"{d}/gone")
    p = subprocess.run([SFT_EXPORT, f"{d}/out/gone/checkpoints/step_1", f"{d}/export_gone"], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "no longer exists" in p.stderr and "step_1" in p.stderr, p.stderr
    assert not os.path.exists(f"{d}/export_gone")
