"""LoRA against the real thing (issue 17): PEFT 0.12 on tiny random transformers models (GPT-2 with
its Conv1D layers; Llama with GQA and an untied head), float64 in torch.

- load_adapter_path: an adapter PEFT initialised at random (init_lora_weights=False: B != 0) and
  saved with save_pretrained loads into sft_train; its step-0 eval loss is PeftModel's on the eval
  rows (≤ 1e-5 rel), and step 1's loss and gradient norm (over the adapters only, of the
  token-weighted mean loss) are PeftModel's on the step's rows (≤ 1e-5 / 1e-4 rel): forward and
  backward of every adapter path equal PEFT's.
- Out: after 3 training steps, sft_export's adapter directory loads with
  PeftModel.from_pretrained(base, dir) and gives sft_train's final eval loss (≤ 1e-5 rel); the
  --merge export loads with AutoModelForCausalLM and gives it too."""
import os
import subprocess

import numpy as np
import pytest
import torch

from harness import BUILD, make_data, read_metrics, run_train, weighted_nll, write_config

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
V, C, L, NH, KVH, F, T = 64, 32, 2, 4, 2, 48, 16
FAMILIES = {
    "gpt2": (["c_attn", "c_proj", "c_fc"], "c_attn c_proj c_fc"),
    "llama": (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "all-linear"),
}


def make_base(family, out, seed):
    torch.manual_seed(seed)
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_layer=L, n_embd=C, n_head=NH, vocab_size=V, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        m = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                                       num_attention_heads=NH, num_key_value_heads=KVH, max_position_embeddings=64,
                                       tie_word_embeddings=False, initializer_range=0.15, attn_implementation="eager")
        m = transformers.LlamaForCausalLM(cfg)
    m.float().save_pretrained(out, safe_serialization=True)


def load_base(path):
    kw = {} if "gpt2" in os.path.basename(path) else {"attn_implementation": "eager"}
    return transformers.AutoModelForCausalLM.from_pretrained(path, **kw).double().eval()


def rows(path, which=None):
    import h5py
    with h5py.File(path) as f:
        ids, tg, w = f["inputs"][...], f["targets"][...], f["loss_weights"][...]
    if which is not None:
        ids, tg, w = ids[which], tg[which], w[which]
    return torch.as_tensor(ids, dtype=torch.long), tg, w


def loss_of(model, data):
    ids, tg, w = data
    return weighted_nll(model(input_ids=ids).logits, tg, w)


@pytest.fixture(scope="module")
def env(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 24, T=T, vocab=V, seed=31)
    make_data(f"{d}/eval.h5", 6, T=T, vocab=V, seed=32)
    for i, family in enumerate(FAMILIES):
        make_base(family, f"{d}/{family}", seed=i)
    return d


def config(d, family, **keys):
    targets = FAMILIES[family][1]
    return write_config(f"{d}/{family}_{keys.get('run_name', 'r')}.yml", load_parameters_path=f"{d}/{family}",
                        lora_rank=4, lora_alpha=8, lora_target_modules=f"[{', '.join(targets.split())}]",
                        train_files=f"{d}/train.h5", eval_files=f"{d}/eval.h5", max_target_length=T,
                        global_batch_size=8, enable_data_shuffling=False, hardware="cpu",
                        base_output_directory=f"{d}/out", warmup_steps_fraction=0.0,
                        gradient_clipping_threshold=0.0, **keys)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_peft_adapter_loads_and_trains_as_peft_computes(env, family, note):
    d = env
    torch.manual_seed(5)
    lora_cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=FAMILIES[family][0], lora_dropout=0.0,
                               init_lora_weights=False)  # random A and B: every path carries signal
    model = peft.get_peft_model(load_base(f"{d}/{family}").float(), lora_cfg)
    model.save_pretrained(f"{d}/{family}_peft")
    model = model.double().eval()
    run_train(config(d, family, run_name=f"{family}_in", steps=1, load_adapter_path=f"{d}/{family}_peft"))
    train, evals = read_metrics(f"{d}/out/{family}_in")
    with torch.no_grad():
        want_eval = float(loss_of(model, rows(f"{d}/eval.h5")))
    assert evals[0]["step"] == 0
    assert abs(evals[0]["eval_loss"] - want_eval) <= 1e-5 * want_eval, (evals[0], want_eval)
    loss = loss_of(model, rows(f"{d}/train.h5", slice(0, 8)))  # step 1: rows 0..7 (no shuffling)
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert len(grads) == 2 * L * (4 if family == "gpt2" else 7)  # GPT-2: c_proj is attn.c_proj and mlp.c_proj
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
    assert abs(train[0]["loss"] - float(loss)) <= 1e-5 * float(loss)
    assert abs(train[0]["grad_norm"] - norm) <= 1e-4 * norm, (train[0]["grad_norm"], norm)
    note(f"lora {family}: eval loss {evals[0]['eval_loss']:.6f} vs PEFT {want_eval:.6f}; "
         f"grad norm {train[0]['grad_norm']:.6g} vs PEFT {norm:.6g}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_exported_adapter_and_merged_model_give_sft_dps_loss(env, family):
    d = env
    run_train(config(d, family, run_name=f"{family}_out", steps=3, learning_rate=3e-2))
    final = read_metrics(f"{d}/out/{family}_out")[1][-1]["eval_loss"]
    ckpt = f"{d}/out/{family}_out/checkpoints/step_3.h5"
    export = os.path.join(BUILD, "sft_export")
    subprocess.run([export, ckpt, f"{d}/{family}_adapter"], check=True, capture_output=True)
    subprocess.run([export, ckpt, f"{d}/{family}_merged", "--merge"], check=True, capture_output=True)
    model = peft.PeftModel.from_pretrained(load_base(f"{d}/{family}").float(), f"{d}/{family}_adapter").double().eval()
    base = load_base(f"{d}/{family}")
    merged = load_base(f"{d}/{family}_merged")
    data = rows(f"{d}/eval.h5")
    with torch.no_grad():
        adapted, merged_loss, base_loss = (float(loss_of(m, data)) for m in (model, merged, base))
    assert abs(adapted - final) <= 1e-5 * final, (adapted, final)
    assert abs(merged_loss - final) <= 1e-5 * final, (merged_loss, final)
    assert abs(base_loss - final) > 1e-4, "the adapters changed nothing"
