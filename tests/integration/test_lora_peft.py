"""LoRA against the real thing (issue 17): PEFT 0.12 on tiny random transformers models — GPT-2
(Conv1D layers), Llama with GQA and an untied head, Qwen2 with q/k/v biases — in float64 torch, on
SFT rows with masked prompts and a fully masked row.

- load_adapter_path: an adapter PEFT initialised at random (init_lora_weights=False: B != 0) and
  saved with save_pretrained loads into sft_train; its step-0 eval loss is PeftModel's (≤ 1e-5
  rel); step 1's loss is PeftModel's on the step's rows, and step 1's adapter gradients equal
  PEFT's (≤ 1e-5 rel over all adapters). The gradient is read back from the one AdamW step: with
  weight decay 0, no clipping, lr = 1e5 and eps = 1e3 it moves each element by exactly
  -lr·g/(|g|+eps) (step 1: m̂ = g, v̂ = g²), so g = -Δ·eps/(lr - |Δ|).
- Out: after 3 training steps sft_export's adapter directory loads with
  PeftModel.from_pretrained(base, dir), whose logits are those of the --merge export loaded by
  AutoModelForCausalLM (≤ 1e-5 × max |logit|) and whose eval loss is sft_train's final one (≤ 1e-5
  rel); PEFT's merge_and_unload() of it equals the --merge export's weights (≤ 1e-6 rel)."""
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from harness import BUILD, make_data, read_metrics, read_params, run_train, weighted_nll, write_config

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
V, C, L, NH, KVH, F, T = 64, 32, 2, 4, 2, 48, 16
LLAMA_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# family -> (PEFT target_modules, sft-dp lora_target_modules, adapters per block)
FAMILIES = {
    "gpt2": (["c_attn", "c_proj", "c_fc"], "[c_attn, c_proj, c_fc]", 4),  # c_proj: attn's and the MLP's
    "llama": (LLAMA_LINEAR, "all-linear", 7),
    "qwen2": (["q_proj", "v_proj", "down_proj"], "[q_proj, v_proj, down_proj]", 3),
}


def make_base(family, out, seed):
    torch.manual_seed(seed)
    llama_like = dict(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=KVH, max_position_embeddings=64, tie_word_embeddings=False,
                      initializer_range=0.15, attn_implementation="eager")
    if family == "gpt2":
        m = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=L, n_embd=C, n_head=NH, vocab_size=V, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0))
    elif family == "llama":
        m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**llama_like))
    else:
        m = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**llama_like))
    with torch.no_grad():  # biases and norms off their 0/1 init, so that they matter
        for name, p in m.named_parameters():
            if "norm" in name or "ln_" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    m.float().save_pretrained(out, safe_serialization=True)


def load_base(d, family):
    kw = {} if family == "gpt2" else {"attn_implementation": "eager"}
    return transformers.AutoModelForCausalLM.from_pretrained(f"{d}/{family}", **kw).float().eval()


def rows(path, which=slice(None)):
    with h5py.File(path) as f:
        ids, tg, w = f["inputs"][which], f["targets"][which], f["loss_weights"][which]
    return torch.as_tensor(ids, dtype=torch.long), tg, w


def loss_of(model, data):
    ids, tg, w = data
    return weighted_nll(model(input_ids=ids).logits, tg, w)


def sftdp_name(peft_name):
    """base_model.model.(transformer.h|model.layers).<l>.<module>.lora_X.weight -> h.<l>.<module>.lora_X"""
    rest = peft_name.removeprefix("base_model.model.").removesuffix(".weight")
    rest = rest.removeprefix("transformer.h.").removeprefix("model.layers.")
    layer, rest = rest.split(".", 1)
    return f"h.{layer}.{rest.replace('.default', '')}"


@pytest.fixture(scope="module")
def env(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 24, T=T, vocab=V, seed=31, masked_rows={2})  # step 1 holds a fully masked row
    make_data(f"{d}/eval.h5", 6, T=T, vocab=V, seed=32)
    for i, family in enumerate(FAMILIES):
        make_base(family, f"{d}/{family}", seed=i)
    return d


def config(d, family, **keys):
    return write_config(f"{d}/{family}_{keys['run_name']}.yml", load_parameters_path=f"{d}/{family}",
                        lora_rank=4, lora_alpha=8, lora_target_modules=FAMILIES[family][1],
                        train_files=f"{d}/train.h5", eval_files=f"{d}/eval.h5", max_target_length=T,
                        global_batch_size=8, enable_data_shuffling=False, hardware="cpu",
                        base_output_directory=f"{d}/out", warmup_steps_fraction=0.0,
                        gradient_clipping_threshold=0.0, **keys)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_peft_adapter_loads_and_its_gradients_are_pefts(env, family, note):
    d = env
    torch.manual_seed(5)
    lora_cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=FAMILIES[family][0], lora_dropout=0.0,
                               init_lora_weights=False)  # random A and B: every path carries signal
    model = peft.get_peft_model(load_base(d, family), lora_cfg)
    model.save_pretrained(f"{d}/{family}_peft")
    model = model.double().eval()
    lr, eps = 1e5, 1e3
    run_train(config(d, family, run_name=f"{family}_in", steps=1, load_adapter_path=f"{d}/{family}_peft", learning_rate=lr,
                     adam_eps=eps, adam_weight_decay=0.0))
    train, evals = read_metrics(f"{d}/out/{family}_in")
    with torch.no_grad():
        want_eval = float(loss_of(model, rows(f"{d}/eval.h5")))
    assert evals[0]["step"] == 0 and abs(evals[0]["eval_loss"] - want_eval) <= 1e-5 * want_eval, (evals[0], want_eval)
    loss = loss_of(model, rows(f"{d}/train.h5", slice(0, 8)))  # step 1: rows 0..7 (no shuffling), row 2 masked
    loss.backward()
    assert abs(train[0]["loss"] - float(loss)) <= 1e-5 * float(loss)
    torch_grads = {sftdp_name(n): p.grad.numpy() for n, p in model.named_parameters() if "lora_" in n}
    assert len(torch_grads) == 2 * L * FAMILIES[family][2]
    before = {sftdp_name(k): v for k, v in load_file(f"{d}/{family}_peft/adapter_model.safetensors").items()}
    after = read_params(f"{d}/out/{family}_in/checkpoints/step_1")
    assert sorted(after) == sorted(torch_grads)
    num = den = 0.0
    for k, want in torch_grads.items():
        delta = after[k].astype(np.float64) - before[k]
        got = -np.sign(delta) * eps * np.abs(delta) / (lr - np.abs(delta))
        num += float(np.sum((got - want) ** 2))
        den += float(np.sum(want ** 2))
    err = (num / den) ** 0.5
    note(f"lora {family}: eval loss {evals[0]['eval_loss']:.7f} vs PEFT {want_eval:.7f}; step-1 adapter "
         f"gradients vs PEFT (float64): {err:.1e} rel")
    assert err <= 1e-5


@pytest.mark.parametrize("family", list(FAMILIES))
def test_exported_adapter_is_pefts_and_merge_is_merge_and_unload(env, family):
    d = env
    run_train(config(d, family, run_name=f"{family}_out", steps=3, learning_rate=3e-2))
    final = read_metrics(f"{d}/out/{family}_out")[1][-1]["eval_loss"]
    ckpt = f"{d}/out/{family}_out/checkpoints/step_3"
    export = os.path.join(BUILD, "sft_export")
    subprocess.run([export, ckpt, f"{d}/{family}_adapter"], check=True, capture_output=True)
    subprocess.run([export, ckpt, f"{d}/{family}_merged", "--merge"], check=True, capture_output=True)
    adapted = peft.PeftModel.from_pretrained(load_base(d, family), f"{d}/{family}_adapter").double().eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(f"{d}/{family}_merged").double().eval()
    base = load_base(d, family).double()
    ids, tg, w = rows(f"{d}/eval.h5")
    with torch.no_grad():
        la, lm, lb = (m(input_ids=ids).logits for m in (adapted, merged, base))
    assert float((la - lm).abs().max()) <= 1e-5 * float(la.abs().max())
    adapted_loss = float(weighted_nll(la, tg, w))
    assert abs(adapted_loss - final) <= 1e-5 * final, (adapted_loss, final)
    assert abs(float(weighted_nll(lb, tg, w)) - final) > 1e-4, "the adapters changed nothing"
    pefts = adapted.merge_and_unload().state_dict()
    ours = merged.state_dict()
    for k, v in pefts.items():
        if k in ours:  # a tied head appears once
            assert float((ours[k] - v).abs().max()) <= 1e-6 * max(float(v.abs().max()), 1e-30), k
