"""Hugging Face Llama-family directories in and out (src/hf/llama_hf.cpp): tiny random
LlamaForCausalLM (grouped-query attention, untied / tied / llama3 RoPE scaling) and Qwen2ForCausalLM
(q/k/v biases) models saved by transformers, and a hand-made Qwen3 directory (transformers 4.44 has
no Qwen3: config.json with model_type qwen3 and safetensors under Qwen3ForCausalLM's names), load
through load_parameters_path=<dir>. sft-dp's first-step loss and every gradient equal transformers'
(float64) and this file's float64 reference `ref_logits` (the only reference for Qwen3), on a batch
with zero-weight prompt tokens and on one with packed segments (positions restart at 0 per
segment, attention within a segment: transformers runs each segment on its own). sft_export and
hf_export write directories transformers loads with the checkpoint's logits; bad directories exit
2 naming the file and the key or tensor.

Gradients: one AdamW step with weight decay 0, no clipping, lr = 1e5 and eps = 1e3 moves each
parameter by exactly -lr·g/(|g|+eps), so the step-1 checkpoint minus the imported weights gives
sft-dp's gradient (see test_hf_gpt2.py).

Precision of the references: transformers 4.44 computes RMSNorm and the attention softmax in fp32
even in a float64 model, and rounds *ForCausalLM's logits to fp32; here RMSNorm runs in float64
(rms64), softmax keeps float64 input in float64 (softmax64) and the logits are lm_head(model(...))
(hf_forward). RoPE's angles and cos/sin stay fp32 as in transformers: that is the model's
definition (sft-dp computes them in double from the same fp32 inverse frequencies)."""
import json
import math
import os
import shutil
import subprocess
import types

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from harness import (BUILD, make_data, max_rel, read_metrics, read_params, run_train, spec_of_hf_llama,
                     weighted_nll, write_config)

transformers = pytest.importorskip("transformers")
SFT_EXPORT = os.path.join(BUILD, "sft_export")
L, C, NH, KVH, F, V, T = 2, 32, 4, 2, 48, 64, 16
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}  # with HS = 8: one frequency kept, one smoothed, two divided
# name -> (family, transformers config keys); qwen3 is written by hand (head_dim 16 != C/NH).
VARIANTS = {
    "llama": ("llama", dict(tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=10000.0)),
    "llama_tied": ("llama", dict(tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=500.0)),
    "llama3": ("llama", dict(tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=LLAMA3)),
    "qwen2": ("qwen2", dict(tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000.0)),
    "qwen3": ("qwen3", dict(tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=1000000.0, head_dim=16)),
}


# ---- the float64 reference ----

def inv_freq(cfg):
    """transformers' RoPE inverse frequencies (fp32, as _compute_default/_compute_llama3_parameters)."""
    hs = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    rs = cfg.get("rope_scaling")
    if rs:
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def ref_logits(p, cfg, ids, pos, seg=None):
    """Logits (B,T,V) of SPEC-named float64 torch parameters p: RMSNorm, RoPE (rotate_half),
    grouped-query causal attention within equal segment ids, SwiGLU, optional q/k/v biases and q/k
    norms, tied or untied head."""
    B, Tn = ids.shape
    hs, kvh, eps = cfg["head_dim"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rot(x, cos, sin):  # x (B,T,H,hs)
        x1, x2 = x[..., :hs // 2], x[..., hs // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    ang = inv_freq(cfg)[None, None, :] * pos.float()[..., None]  # fp32, as transformers
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().double()[:, :, None, :], emb.sin().double()[:, :, None, :]
    allowed = torch.ones(Tn, Tn, dtype=torch.bool).tril()[None]
    if seg is not None:
        allowed = allowed & (seg[:, :, None] == seg[:, None, :])
    x = p["wte"][ids]
    for l in range(cfg["num_hidden_layers"]):
        h = f"h.{l}."
        a = rms(x, p[h + "ln_1.weight"]) @ p[h + "attn.qkv.weight"].T
        if h + "attn.qkv.bias" in p:
            a = a + p[h + "attn.qkv.bias"]
        q = a[..., :NH * hs].reshape(B, Tn, NH, hs)
        k = a[..., NH * hs:(NH + kvh) * hs].reshape(B, Tn, kvh, hs)
        v = a[..., (NH + kvh) * hs:].reshape(B, Tn, kvh, hs)
        if h + "attn.q_norm.weight" in p:
            q, k = rms(q, p[h + "attn.q_norm.weight"]), rms(k, p[h + "attn.k_norm.weight"])
        q, k = rot(q, cos, sin), rot(k, cos, sin)
        k, v = (t.repeat_interleave(NH // kvh, dim=2) for t in (k, v))  # query head j uses kv head j // (NH/kvh)
        s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hs)
        s = s.masked_fill(~allowed[:, None], float("-inf"))
        y = torch.einsum("bhts,bshd->bthd", torch.softmax(s, -1), v).reshape(B, Tn, NH * hs)
        x = x + y @ p[h + "attn.proj.weight"].T
        gu = rms(x, p[h + "ln_2.weight"]) @ p[h + "mlp.fc.weight"].T
        g, u = gu[..., :cfg["intermediate_size"]], gu[..., cfg["intermediate_size"]:]
        x = x + (torch.nn.functional.silu(g) * u) @ p[h + "mlp.proj.weight"].T
    x = rms(x, p["ln_f.weight"])
    return x @ p.get("lm_head.weight", p["wte"]).T


def rms64(self, x):  # transformers' RMSNorm without its fp32 round trip
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def eager64(model):
    """model in float64 with float64 RMSNorms (the softmax: see softmax64)."""
    model = model.double()
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.forward = types.MethodType(rms64, m)
    return model


@pytest.fixture(autouse=True)
def softmax64(monkeypatch):
    """transformers' eager attention asks softmax for fp32 output; float64 input keeps float64."""
    softmax = torch.nn.functional.softmax

    def patched(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)
    monkeypatch.setattr(torch.nn.functional, "softmax", patched)


def hf_forward(model, ids, **kw):
    """*ForCausalLM's logits without its final .float() (transformers 4.44 rounds them to fp32)."""
    return model.lm_head(model.model(ids, **kw).last_hidden_state)


def hf_logits(model, ids, pos, seg=None):
    """transformers' logits; with segments, each segment of each row runs on its own (positions
    restart, no attention across segments) and the pieces are put back in place."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    if seg is None:
        return hf_forward(model, ids, position_ids=torch.as_tensor(pos, dtype=torch.long))
    rows = []
    for r in range(ids.shape[0]):
        pieces, s = [], np.asarray(seg[r])
        for start in np.flatnonzero(np.r_[True, s[1:] != s[:-1]]):
            end = start + 1
            while end < len(s) and s[end] == s[start]:
                end += 1
            pieces.append(hf_forward(model, ids[r:r + 1, start:end])[0])  # positions 0.. (the data's restart)
        rows.append(torch.cat(pieces))
    return torch.stack(rows)


# ---- the models ----

def hf_config(name):
    family, keys = VARIANTS[name]
    c = dict(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
             num_key_value_heads=KVH, max_position_embeddings=128, hidden_act="silu", initializer_range=0.15,
             head_dim=C // NH)
    c.update(keys)
    return family, c


def make_hf_dir(name, out, seed):
    """save_pretrained of a random transformers model (norms and biases moved off their init), or
    for qwen3 the same by hand. Returns (SPEC numpy params, cfg dict)."""
    family, cfg = hf_config(name)
    torch.manual_seed(seed)
    if family == "qwen3":
        hs = cfg["head_dim"]
        g = torch.Generator().manual_seed(seed)

        def w(*shape, scale=0.15):
            return (scale * torch.randn(*shape, generator=g)).float()
        sd = {"model.embed_tokens.weight": w(V, C), "model.norm.weight": 1 + w(C, scale=0.1), "lm_head.weight": w(V, C)}
        for l in range(L):
            a = f"model.layers.{l}."
            sd.update({a + "input_layernorm.weight": 1 + w(C, scale=0.1),
                       a + "post_attention_layernorm.weight": 1 + w(C, scale=0.1),
                       a + "self_attn.q_proj.weight": w(NH * hs, C), a + "self_attn.k_proj.weight": w(KVH * hs, C),
                       a + "self_attn.v_proj.weight": w(KVH * hs, C), a + "self_attn.o_proj.weight": w(C, NH * hs),
                       a + "self_attn.q_norm.weight": 1 + w(hs, scale=0.3),
                       a + "self_attn.k_norm.weight": 1 + w(hs, scale=0.3),
                       a + "mlp.gate_proj.weight": w(F, C), a + "mlp.up_proj.weight": w(F, C),
                       a + "mlp.down_proj.weight": w(C, F)})
        os.makedirs(out)
        save_file(sd, f"{out}/model.safetensors", metadata={"format": "pt"})
        json.dump(dict(cfg, model_type="qwen3", architectures=["Qwen3ForCausalLM"], attention_bias=False,
                       use_sliding_window=False, torch_dtype="float32", bos_token_id=None, eos_token_id=5),
                  open(f"{out}/config.json", "w"), indent=2)
        json.dump({"eos_token_id": [5, 6], "temperature": 0.7}, open(f"{out}/generation_config.json", "w"))
        return spec_of_hf_llama({k: v.numpy() for k, v in sd.items()}, L), cfg
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[family]
    m = cls[1](cls[0](**cfg, attn_implementation="eager")).float().eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n or n.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    m.save_pretrained(out, safe_serialization=True)  # tied: no lm_head.weight in the file
    return spec_of_hf_llama({k: v.numpy() for k, v in load_file(f"{out}/model.safetensors").items()}, L), cfg


def load_hf(path):
    return eager64(transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval())


def torch_params(spec, grad=False):
    return {k: torch.tensor(np.float64(v), requires_grad=grad) for k, v in spec.items()}


def read_batch(path):
    with h5py.File(path) as f:
        ids, tg, w = f["inputs"][...], f["targets"][...], f["loss_weights"][...]
        seg = f["segment_ids"][...] if "segment_ids" in f else None
        pos = f["positions"][...] if "positions" in f else np.tile(np.arange(T), (len(ids), 1))
    return ids, tg, w, pos, seg


@pytest.fixture(scope="module")
def env(workdir):
    d = workdir
    make_data(f"{d}/masked.h5", 8, T=T, vocab=V, seed=3)  # each row: a zero-weight prompt, then loss tokens
    make_data(f"{d}/packed.h5", 8, T=T, vocab=V, seed=5, segments=True)  # two segments per row
    make_data(f"{d}/eval.h5", 6, T=T, vocab=V, seed=4)
    models = {name: make_hf_dir(name, f"{d}/{name}", seed=i) for i, name in enumerate(VARIANTS)}
    base = dict(global_batch_size=8, max_target_length=T, steps=1, hardware="cpu", enable_data_shuffling=False,
                base_output_directory=f"{d}/out", warmup_steps_fraction=0.0, adam_weight_decay=0.0,
                gradient_clipping_threshold=0.0)
    return d, models, base


@pytest.mark.parametrize("name", list(VARIANTS))
def test_loss_and_gradients_match_transformers(env, note, name):
    d, models, base = env
    p0, cfg = models[name]
    family = VARIANTS[name][0]
    worst = []
    for batch in ("masked", "packed"):
        run = f"{name}_{batch}"
        run_train(write_config(f"{d}/{run}.yml", **base, load_parameters_path=f"{d}/{name}",
                               train_files=f"{d}/{batch}.h5", run_name=run, learning_rate=1e5, adam_eps=1e3))
        train, _ = read_metrics(f"{d}/out/{run}")
        ids, tg, w, pos, seg = read_batch(f"{d}/{batch}.h5")

        p = torch_params(p0, grad=True)  # this file's reference
        ref_loss = weighted_nll(ref_logits(p, cfg, torch.as_tensor(ids, dtype=torch.long), torch.as_tensor(pos),
                                           None if seg is None else torch.as_tensor(seg)), tg, w)
        ref_loss.backward()
        grads = {"reference": {k: t.grad.numpy() for k, t in p.items()}}
        losses = {"reference": ref_loss.item()}
        if family != "qwen3":  # transformers itself
            m = load_hf(f"{d}/{name}")
            hf_loss = weighted_nll(hf_logits(m, ids, pos, seg), tg, w)
            hf_loss.backward()
            grads["transformers"] = spec_of_hf_llama({k: t.grad.numpy() for k, t in m.named_parameters()}, L)
            losses["transformers"] = hf_loss.item()
            assert abs(losses["reference"] - hf_loss.item()) <= 1e-12 * hf_loss.item()  # the reference is right
            assert max_rel(grads["reference"], grads["transformers"]) <= 1e-12

        p1 = read_params(f"{d}/out/{run}/checkpoints/step_1")
        assert set(p1) == set(p0), (sorted(set(p1) ^ set(p0)))
        lr = train[0]["lr"]
        assert lr == 1e5
        delta = {k: np.float64(p1[k]) - p0[k] for k in p0}
        for who, g in grads.items():
            loss_rel = abs(train[0]["loss"] - losses[who]) / losses[who]
            grad_rel = max_rel(delta, {k: -lr * x / (np.abs(x) + 1e3) for k, x in g.items()})
            worst.append((grad_rel, loss_rel, batch, who))
            assert loss_rel <= 1e-5, (batch, who, train[0]["loss"], losses[who])
            assert grad_rel <= 1e-5, (batch, who, grad_rel)
    g, l_, batch, who = max(worst)
    note(f"test_hf_llama[{name}]: worst of masked/packed vs {', '.join(sorted({x[3] for x in worst}))}: "
         f"gradient rel {g:.1e}, first-step loss rel {max(x[1] for x in worst):.1e}")


@pytest.mark.parametrize("name", ["llama", "llama3", "qwen2", "qwen3"])
def test_export_round_trip_and_trained_model(env, note, name):
    d, models, base = env
    p0, cfg = models[name]
    family = VARIANTS[name][0]
    src = f"{d}/{name}"
    # lr 0: the step-1 checkpoint holds the imported weights; exported, they are the same bits.
    run = f"{name}_rt"
    run_train(write_config(f"{d}/{run}.yml", **base, load_parameters_path=src, train_files=f"{d}/masked.h5",
                           run_name=run, learning_rate=0.0))
    out = f"{d}/{name}_export"
    p = subprocess.run([SFT_EXPORT, f"{d}/out/{run}/checkpoints/step_1", out], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors"]
    orig, back = load_file(f"{src}/model.safetensors"), load_file(f"{out}/model.safetensors")
    assert set(orig) == set(back)
    for k in orig:
        assert back[k].dtype == torch.float32 and torch.equal(orig[k], back[k]), k
    cj, oj = json.load(open(f"{out}/config.json")), json.load(open(f"{src}/config.json"))
    assert cj["model_type"] == family and cj["torch_dtype"] == "float32"
    for key in ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
                "hidden_act", "rope_scaling"]:
        assert cj[key] == oj.get(key), (key, cj[key], oj.get(key))
    if family == "qwen3":
        assert cj["architectures"] == ["Qwen3ForCausalLM"] and cj["head_dim"] == 16
    # Special token ids and generation_config.json come from the directory the run started from.
    for key in ["bos_token_id", "eos_token_id", "pad_token_id"]:
        assert cj.get(key) == oj.get(key), (key, cj.get(key), oj.get(key))
    assert json.load(open(f"{out}/generation_config.json")) == json.load(open(f"{src}/generation_config.json"))

    # Trained for 2 steps with hf_export: <run>/hf equals sft_export of the final checkpoint, and its
    # eval loss (transformers or, for qwen3, the reference on the exported tensors) is sft-dp's.
    run = f"{name}_tr"
    run_train(write_config(f"{d}/{run}.yml", **dict(base, steps=2), load_parameters_path=src,
                           train_files=f"{d}/masked.h5", run_name=run, learning_rate=1e-2,
                           eval_files=f"{d}/eval.h5", hf_export=True))
    ckpt = f"{d}/out/{run}/checkpoints/step_2"
    out2 = f"{d}/{name}_export2"
    assert subprocess.run([SFT_EXPORT, ckpt, out2]).returncode == 0
    ours, theirs = load_file(f"{d}/out/{run}/hf/model.safetensors"), load_file(f"{out2}/model.safetensors")
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    trained = read_params(ckpt)
    assert not np.array_equal(trained["wte"], p0["wte"])
    _, evals = read_metrics(f"{d}/out/{run}")
    ids, tg, w, pos, _ = read_batch(f"{d}/eval.h5")
    ids_t = torch.as_tensor(ids, dtype=torch.long)
    want = ref_logits(torch_params(trained), cfg, ids_t, torch.as_tensor(pos))
    with torch.no_grad():
        if family == "qwen3":
            exported = spec_of_hf_llama({k: v.numpy() for k, v in load_file(f"{out2}/model.safetensors").items()}, L)
            got = ref_logits(torch_params(exported), dict(cfg, **{k: cj[k] for k in cfg if k in cj}), ids_t,
                             torch.as_tensor(pos))
        else:
            got = hf_forward(load_hf(out2), ids_t)
    err = float((got - want).abs().max() / want.abs().max())
    hf_eval = weighted_nll(got, tg, w).item()
    eval_rel = abs(evals[-1]["eval_loss"] - hf_eval) / hf_eval
    note(f"test_hf_llama[{name}] export: logits vs the checkpoint's (float64) max rel {err:.1e}; "
         f"sft-dp eval loss vs {'reference' if family == 'qwen3' else 'transformers'} on the export rel {eval_rel:.1e}")
    assert err <= 1e-10
    assert eval_rel <= 1e-5, (evals[-1], hf_eval)


def test_mistral_sharded_bare_names_and_defaults(env):
    """A mistral config.json with sliding_window null, transformers' sharded save, LlamaModel's
    names (no "model." prefix, no lm_head: tied) and a config.json without the keys LlamaConfig
    has defaults for (equal to this model's values) load to the same parameters as the original,
    and train with the same first-step loss."""
    d, models, base = env
    p0, _ = models["llama"]
    shutil.copytree(f"{d}/llama", f"{d}/defaults")
    c = json.load(open(f"{d}/defaults/config.json"))
    for key in ["tie_word_embeddings", "rope_theta", "rope_scaling", "head_dim", "hidden_act", "attention_bias",
                "mlp_bias", "max_position_embeddings"]:
        c.pop(key, None)
    json.dump(c, open(f"{d}/defaults/config.json", "w"))
    m = transformers.LlamaForCausalLM.from_pretrained(f"{d}/llama")
    m.save_pretrained(f"{d}/sharded", safe_serialization=True, max_shard_size="20KB")
    assert os.path.exists(f"{d}/sharded/model.safetensors.index.json")
    shutil.copytree(f"{d}/llama", f"{d}/mistral")
    c = json.load(open(f"{d}/mistral/config.json"))
    c.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=None)
    json.dump(c, open(f"{d}/mistral/config.json", "w"))
    pt, _ = models["llama_tied"]
    transformers.LlamaForCausalLM.from_pretrained(f"{d}/llama_tied").model.save_pretrained(f"{d}/bare")
    assert "embed_tokens.weight" in load_file(f"{d}/bare/model.safetensors")
    for tag, want in [("sharded", p0), ("mistral", p0), ("defaults", p0), ("bare", pt)]:
        run_train(write_config(f"{d}/{tag}.yml", **base, load_parameters_path=f"{d}/{tag}/",
                               train_files=f"{d}/masked.h5", run_name=tag, learning_rate=0.0))
        got = read_params(f"{d}/out/{tag}/checkpoints/step_1")
        assert set(got) == set(want), tag
        for k in want:
            assert np.array_equal(got[k], want[k]), (tag, k)
    losses = {tag: read_metrics(f"{d}/out/{tag}")[0][0]["loss"] for tag in ["sharded", "mistral", "defaults"]}
    assert len(set(losses.values())) == 1, losses


def _bad_dir(d, src, name, edit_tensors=None, config_edit=None):
    out = f"{d}/bad_{name}"
    shutil.copytree(f"{d}/{src}", out)
    if edit_tensors:
        sd = load_file(f"{out}/model.safetensors")
        edit_tensors(sd)
        save_file(sd, f"{out}/model.safetensors", metadata={"format": "pt"})
    if config_edit:
        c = json.load(open(f"{out}/config.json"))
        config_edit(c)
        json.dump(c, open(f"{out}/config.json", "w"))
    return out


def test_bad_dirs_exit_2_naming_file_and_key(env):
    d, models, base = env
    k1 = "model.layers.1.self_attn.k_proj.weight"
    up0 = "model.layers.0.mlp.up_proj.weight"
    cases = [
        ("llama", "attn_bias", dict(config_edit=lambda c: c.update(attention_bias=True)),
         ["config.json", "attention_bias", "o_proj"]),
        ("llama", "mlp_bias", dict(config_edit=lambda c: c.update(mlp_bias=True)), ["config.json", "mlp_bias"]),
        ("llama", "act", dict(config_edit=lambda c: c.update(hidden_act="gelu")), ["config.json", "hidden_act"]),
        ("llama", "yarn", dict(config_edit=lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0})),
         ["config.json", "rope_scaling", "yarn"]),
        ("llama", "llama3_part", dict(config_edit=lambda c: c.update(rope_scaling={"rope_type": "llama3", "factor": 8.0})),
         ["config.json", "rope_scaling", "low_freq_factor"]),
        ("llama", "mistral_window", dict(config_edit=lambda c: c.update(model_type="mistral", sliding_window=4096)),
         ["config.json", "sliding_window"]),
        ("qwen2", "qwen_window", dict(config_edit=lambda c: c.update(use_sliding_window=True)),
         ["config.json", "use_sliding_window"]),
        ("llama", "no_layers", dict(config_edit=lambda c: c.pop("num_hidden_layers")),
         ["config.json", "num_hidden_layers", "missing"]),
        ("llama", "kv_heads", dict(config_edit=lambda c: c.update(num_key_value_heads=3)),
         ["config.json", "num_key_value_heads"]),
        ("llama", "type", dict(config_edit=lambda c: c.update(model_type="gemma")), ["config.json", "gemma"]),
        ("llama", "missing", dict(edit_tensors=lambda sd: sd.pop(k1)), ["model.safetensors", k1, "missing"]),
        ("llama", "shape", dict(edit_tensors=lambda sd: sd.update({up0: sd[up0][:-1].contiguous()})),
         ["model.safetensors", up0, "[47, 32]", "[48, 32]"]),
        ("llama", "no_head", dict(edit_tensors=lambda sd: sd.pop("lm_head.weight")),
         ["model.safetensors", "lm_head.weight", "tie_word_embeddings"]),
        ("llama", "extra_bias", dict(edit_tensors=lambda sd: sd.update(
            {"model.layers.0.self_attn.q_proj.bias": torch.zeros(C)})),
         ["model.safetensors", "model.layers.0.self_attn.q_proj.bias", "not part of a llama model"]),
        ("llama_tied", "tied_head", dict(edit_tensors=lambda sd: sd.update(
            {"lm_head.weight": sd["model.embed_tokens.weight"] + 1})),
         ["model.safetensors", "lm_head.weight", "tie_word_embeddings true"]),
        ("qwen2", "no_bias", dict(edit_tensors=lambda sd: sd.pop("model.layers.0.self_attn.v_proj.bias")),
         ["model.safetensors", "model.layers.0.self_attn.v_proj.bias", "qwen2"]),
        ("qwen3", "no_qnorm", dict(edit_tensors=lambda sd: sd.pop("model.layers.1.self_attn.q_norm.weight")),
         ["model.safetensors", "model.layers.1.self_attn.q_norm.weight", "qwen3"]),
    ]
    for src, name, kw, words in cases:
        bad = _bad_dir(d, src, name, **kw)
        cfg = write_config(f"{d}/bad_{name}.yml", **base, load_parameters_path=bad, train_files=f"{d}/masked.h5",
                           run_name=f"bad_{name}", learning_rate=0.0)
        p = run_train(cfg, check=False)
        assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
        assert "error:" in p.stderr, (name, p.stderr)
        for word in words:
            assert word in p.stderr, (name, word, p.stderr)
        assert not os.path.exists(f"{d}/out/bad_{name}"), name
