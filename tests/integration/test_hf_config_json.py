"""config.json as real writers write it (issue 42; SPEC §5 "config.json, key by key"). For every supported
model_type, the same tiny random weights beside two config.json files: one saved by the pinned transformers
(4.44, this interpreter; Qwen3, which 4.44 lacks, in the top-level spelling 4.5x writes) and one by the
newest (>= 5, the torch-free .pynew venv, through tests/integration/hf_config_writer.py), with RoPE theta
!= 10000 and, for Llama, llama3 scaling. Checked:
- transformers >= 5 writes no top-level rope_theta (rope_parameters instead): the case sft-dp read as 10000;
- both configs give bitwise the same step-0 eval loss, and it is not the loss with theta forced to 10000;
- `--plan` prints the right theta and scaling, and no key of either file is unknown to sft-dp (every key of
  either transformers' to_dict() is in the tables: no "keys sft-dp does not read" line);
- sft-dp's export is read with the right RoPE by the newest transformers (its config class, torch-free) and
  by the pinned one;
- the errors: both spellings disagreeing, a yarn rope_parameters, a sliding-window layer_types."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from harness import BUILD, SOURCE, make_data, read_metrics, run_train, write_config

transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

WRITER = os.path.join(os.path.dirname(__file__), "hf_config_writer.py")
NEWEST = os.path.join(SOURCE, ".pynew", "bin", "python")
SFT_TRAIN = os.path.join(BUILD, "sft_train")
SFT_EXPORT = os.path.join(BUILD, "sft_export")
L, C, NH, KVH, F, V, T = 2, 32, 4, 2, 64, 64, 16
HS = C // NH
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
DIMS = dict(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
            num_key_value_heads=KVH, max_position_embeddings=128)
# family: (config class kwargs, what --plan must print about RoPE)
FAMILIES = {
    "gpt2": (dict(vocab_size=V, n_embd=C, n_layer=L, n_head=NH, n_positions=128, n_inner=F), None),
    "llama": (dict(DIMS, rope_theta=500000.0, rope_scaling=LLAMA3),
              "rope_theta 500000, rms_norm_eps 1e-06, llama3 rope scaling (factor 8, low 1, high 4, original 32)"),
    "mistral": (dict(DIMS, rope_theta=1000000.0, sliding_window=None), "rope_theta 1e+06, rms_norm_eps 1e-06, head"),
    "qwen2": (dict(DIMS, rope_theta=1000000.0), "rope_theta 1e+06, rms_norm_eps 1e-06, head"),
    "qwen3": (dict(DIMS, rope_theta=1000000.0, head_dim=16), "rope_theta 1e+06, rms_norm_eps 1e-06, head"),
}


def writer_jobs(python, jobs):
    """Runs hf_config_writer.py's jobs under `python` in one process; returns its stdout lines."""
    if not jobs:
        return []
    if not os.path.exists(python):
        pytest.fail(f"{python} is missing (bash scripts/setup_pynew.sh makes it; scripts/test.sh runs it)")
    p = subprocess.run([python, WRITER, json.dumps(jobs)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


WRITERS = {"newest": NEWEST, "pinned": sys.executable}


def weights(family, kwargs, path, seed):
    """model.safetensors under the family's Hugging Face names, random (numpy, fixed seed)."""
    rng = np.random.default_rng(seed)

    def w(*shape, scale=0.2, one=False):
        return ((1.0 if one else 0.0) + scale * rng.standard_normal(shape)).astype(np.float32)
    if family == "gpt2":
        sd = {"wte.weight": w(V, C), "wpe.weight": w(128, C, scale=0.05), "ln_f.weight": w(C, one=True, scale=0.1),
              "ln_f.bias": w(C, scale=0.1)}
        for layer in range(L):
            a = f"h.{layer}."
            sd.update({a + "ln_1.weight": w(C, one=True, scale=0.1), a + "ln_1.bias": w(C, scale=0.1),
                       a + "attn.c_attn.weight": w(C, 3 * C), a + "attn.c_attn.bias": w(3 * C, scale=0.1),
                       a + "attn.c_proj.weight": w(C, C), a + "attn.c_proj.bias": w(C, scale=0.1),
                       a + "ln_2.weight": w(C, one=True, scale=0.1), a + "ln_2.bias": w(C, scale=0.1),
                       a + "mlp.c_fc.weight": w(C, F), a + "mlp.c_fc.bias": w(F, scale=0.1),
                       a + "mlp.c_proj.weight": w(F, C), a + "mlp.c_proj.bias": w(C, scale=0.1)})
    else:
        hs = kwargs.get("head_dim", HS)
        sd = {"model.embed_tokens.weight": w(V, C), "model.norm.weight": w(C, one=True, scale=0.1),
              "lm_head.weight": w(V, C)}
        for layer in range(L):
            a = f"model.layers.{layer}."
            sd.update({a + "input_layernorm.weight": w(C, one=True, scale=0.1),
                       a + "post_attention_layernorm.weight": w(C, one=True, scale=0.1),
                       a + "self_attn.q_proj.weight": w(NH * hs, C), a + "self_attn.k_proj.weight": w(KVH * hs, C),
                       a + "self_attn.v_proj.weight": w(KVH * hs, C), a + "self_attn.o_proj.weight": w(C, NH * hs),
                       a + "mlp.gate_proj.weight": w(F, C), a + "mlp.up_proj.weight": w(F, C),
                       a + "mlp.down_proj.weight": w(C, F)})
            if family == "qwen2":
                sd.update({a + "self_attn.q_proj.bias": w(NH * hs, scale=0.1),
                           a + "self_attn.k_proj.bias": w(KVH * hs, scale=0.1),
                           a + "self_attn.v_proj.bias": w(KVH * hs, scale=0.1)})
            if family == "qwen3":
                sd.update({a + "self_attn.q_norm.weight": w(hs, one=True, scale=0.3),
                           a + "self_attn.k_norm.weight": w(hs, one=True, scale=0.3)})
    safetensors_numpy.save_file(sd, path, metadata={"format": "pt"})


def model_dir(root, name, family, kwargs, writer, seed, jobs):
    """A Hugging Face directory: the family's weights (same seed: same tensors) and, once `jobs` run, writer's
    config.json."""
    d = os.path.join(root, name)
    os.makedirs(d)
    weights(family, kwargs, os.path.join(d, "model.safetensors"), seed)
    if writer == "pinned" and family == "qwen3":  # 4.44 has no Qwen3Config: the keys 4.5x writes, by hand
        config = dict(kwargs, model_type="qwen3", architectures=["Qwen3ForCausalLM"], attention_bias=False,
                      use_sliding_window=False, sliding_window=None, max_window_layers=L, tie_word_embeddings=False,
                      hidden_act="silu", rms_norm_eps=1e-6, torch_dtype="float32", transformers_version="4.51.0")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
    else:
        jobs[writer].append(["write", family, d, kwargs])
    return d


def plan(model, cfg):
    return subprocess.run([SFT_TRAIN, "--plan", "--memory-gib", "8", cfg, f"load_parameters_path={model}"],
                          capture_output=True, text=True, timeout=120)


def step0_eval_loss(env, model, name):
    out = os.path.join(env["d"], "runs")
    run_train(env["cfg"], {"load_parameters_path": model, "base_output_directory": out, "run_name": name})
    _, evals = read_metrics(os.path.join(out, name))
    assert evals[0]["step"] == 0, evals
    return evals[0]["eval_loss"]


@pytest.fixture(scope="module")
def env(workdir):
    """Every directory the tests read, the configs written by one process per transformers."""
    d = workdir
    make_data(f"{d}/train.h5", 8, T=T, vocab=V, seed=1)
    make_data(f"{d}/eval.h5", 8, T=T, vocab=V, seed=2)
    cfg = write_config(f"{d}/c.yml", model_name="", train_files=f"{d}/train.h5", eval_files=f"{d}/eval.h5",
                       max_target_length=T, global_batch_size=4, steps=1, hardware="cpu", learning_rate=1e-3)
    jobs = {"newest": [], "pinned": []}
    dirs = {}
    for family, (kwargs, _) in FAMILIES.items():
        root = os.path.join(d, family)
        dirs[family] = {w: model_dir(root, w, family, kwargs, w, 7, jobs) for w in ("pinned", "newest")}
        if family != "gpt2":
            dirs[family]["theta_1e4"] = model_dir(root, "theta_1e4", family, dict(kwargs, rope_theta=10000.0),
                                                  "pinned", 7, jobs)
        for w in ("newest", "pinned") if family != "qwen3" else ("newest",):  # to_dict(): every key it can write
            full = os.path.join(d, "full_" + family, w)
            jobs[w].append(["full", family, full, kwargs])
            dirs[family]["full_" + w] = full
    dirs["export_src"] = model_dir(os.path.join(d, "export"), "src", "llama", FAMILIES["llama"][0], "newest", 3, jobs)
    for w, python in WRITERS.items():
        writer_jobs(python, jobs[w])
    for family, (kwargs, _) in FAMILIES.items():  # the weights beside each to_dict() config
        for w in ("newest", "pinned"):
            if "full_" + w in dirs[family]:
                weights(family, kwargs, os.path.join(dirs[family]["full_" + w], "model.safetensors"), 7)
    return {"d": d, "cfg": cfg, "dirs": dirs}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_both_writers_give_the_same_model(env, family, note):
    kwargs, rope_line = FAMILIES[family]
    old, new = env["dirs"][family]["pinned"], env["dirs"][family]["newest"]
    with open(os.path.join(new, "config.json")) as f:
        new_cfg = json.load(f)
    if family != "gpt2":  # what sft-dp read as rope_theta 10000 before issue 42
        assert "rope_theta" not in new_cfg and new_cfg["rope_parameters"]["rope_theta"] == kwargs["rope_theta"], new_cfg
    for d in (old, new):
        p = plan(d, env["cfg"])
        assert p.returncode == 0, p.stderr
        assert "does not read" not in p.stdout, p.stdout  # every key either transformers writes is in the tables
        if rope_line:
            assert rope_line in p.stdout, p.stdout
    losses = [step0_eval_loss(env, d, f"{family}_{w}") for d, w in ((old, "pinned"), (new, "newest"))]
    assert losses[0] == losses[1], f"{family}: the two config.json files give different models: {losses}"
    if family != "gpt2":  # theta read as 10000 (the old reading of the newest file) is another model
        assert step0_eval_loss(env, env["dirs"][family]["theta_1e4"], f"{family}_1e4") != losses[0]
    note(f"config.json {family}: step-0 eval loss {losses[0]!r} under both writers")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_key_of_either_transformers_is_accounted_for(env, family):
    """to_dict() holds every key a config class can write (save_pretrained writes a subset)."""
    for w in ("newest", "pinned"):
        d = env["dirs"][family].get("full_" + w)
        if d is None:  # Qwen3 under 4.44: no class
            continue
        p = plan(d, env["cfg"])
        assert p.returncode == 0, f"{family} ({w} transformers' to_dict()): {p.stderr}"
        assert "does not read" not in p.stdout, p.stdout


def test_the_export_reads_right_in_both_transformers(env, note):
    out = os.path.join(env["d"], "export", "runs")
    run_train(env["cfg"], {"load_parameters_path": env["dirs"]["export_src"], "base_output_directory": out,
                           "run_name": "r"})
    exported = os.path.join(env["d"], "export", "hf")
    subprocess.run([SFT_EXPORT, os.path.join(out, "r", "checkpoints", "step_1"), exported], check=True,
                   capture_output=True)
    want = dict(LLAMA3, rope_theta=500000.0)
    for w, python in WRITERS.items():
        got = json.loads(writer_jobs(python, [["read", exported]])[-1])
        assert got["rope"] == want, f"transformers {got['version']} reads {got['rope']}"
        note(f"export read by transformers {got['version']}: {got['rope']}")


def test_refused_configs_name_the_key(env):
    base = env["dirs"]["export_src"]

    def bad(name, edit):
        d = os.path.join(env["d"], "bad", name)
        shutil.copytree(base, d)
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        edit(c)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f)
        p = plan(d, env["cfg"])
        errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
        assert p.returncode == 2 and len(errors) >= 1, p.stderr
        return errors
    errors = bad("disagree", lambda c: c.update(rope_theta=10000.0))
    assert "disagree" in errors[0] and "rope_parameters" in errors[0], errors
    errors = bad("yarn", lambda c: c.update(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                                               "original_max_position_embeddings": 32}))
    assert 'rope_parameters: rope_type "yarn" is not supported' in errors[0], errors
    errors = bad("two", lambda c: c.update(attention_bias=True, mlp_bias=True))
    assert len(errors) == 2 and "attention_bias true" in errors[0] and "mlp_bias true" in errors[1], errors
