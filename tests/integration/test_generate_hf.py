"""sft_generate against transformers' generate (issue 26, finding 5): greedy output equal token for
token on tiny random models made by transformers offline — GPT-2, Llama with grouped-query attention
(num_key_value_heads < num_attention_heads, untied head), Qwen2 (q/k/v biases, tied head) — each also
with a PEFT LoRA adapter (init_lora_weights=False: B != 0) merged at load (--adapter), which must
give PeftModel.generate's tokens. transformers 4.44 has no Qwen3: its hand-made directory (q/k norms,
head_dim != C/NH) is checked against test_hf_llama's float64 reference, greedy by recomputing the whole
sequence at every step (no cache), alone and with an adapter directory written by hand under PEFT's names
(the reference on W + (alpha/r)·B·A). An sft-dp LoRA checkpoint (one training step from the Llama
directory) generates what transformers generates from its `sft_export --merge` directory. Prompts go
through stdin, one line of ids each, two per model (the cache is reset between them); both sides stop
at the model's eos ids (generation_config.json), or after 12 new tokens."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

from harness import BUILD, make_data, run_train, write_config

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
import test_hf_llama as hfl  # noqa: E402  (its tiny Llama-family directories and float64 reference)

SFT_GENERATE = os.path.join(BUILD, "sft_generate")
SFT_EXPORT = os.path.join(BUILD, "sft_export")
NEW = 12
PROMPTS = [[3, 17, 42, 8, 1], [60, 2, 33]]
LLAMA_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TARGETS = {"gpt2": ["c_attn", "c_proj", "c_fc"], "llama": LLAMA_LINEAR, "qwen2": ["q_proj", "v_proj", "down_proj"]}


def sft_generate(model, prompts, *args, check=True):
    r = subprocess.run([SFT_GENERATE, "--model", model, "--max-new-tokens", str(NEW), "--hardware", "cpu", *args],
                       input="".join(" ".join(map(str, p)) + "\n" for p in prompts), capture_output=True, text=True,
                       timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
        return [[int(t) for t in line.split()] for line in r.stdout.splitlines()]
    return r


def hf_generate(model, prompt):
    """transformers' greedy generate (its own KV cache, float32), the new tokens only."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                             pad_token_id=0)
    return out[0, len(prompt):].tolist()


def make_gpt2(out):
    torch.manual_seed(11)
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=hfl.V, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, eos_token_id=7, bos_token_id=7))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.mul_(8.0)  # larger weights: sharper logits, so that greedy picks are far from ties
    m.float().save_pretrained(out, safe_serialization=True)


@pytest.fixture(scope="module")
def models(workdir):
    d = workdir
    make_gpt2(f"{d}/gpt2")
    for name, seed in (("llama", 0), ("qwen2", 3), ("qwen3", 4)):
        hfl.make_hf_dir(name, f"{d}/{name}", seed=seed)
    return d


def load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").float().eval()


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_greedy_equals_transformers_generate(models, family, note):
    d = models
    model = load(f"{d}/{family}")
    want = [hf_generate(model, p) for p in PROMPTS]
    got = sft_generate(f"{d}/{family}", PROMPTS)
    assert got == want, f"{family}: sft_generate {got} vs transformers {want}"
    assert sum(map(len, want)) > len(PROMPTS) + 4, f"{family}: too few tokens to compare: {want}"
    note(f"generate {family}: {sum(map(len, got))} greedy tokens equal transformers'")


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_greedy_with_a_peft_adapter_equals_peft_generate(models, family):
    d = models
    torch.manual_seed(5)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS[family], lora_dropout=0.0,
                          init_lora_weights=False)
    model = peft.get_peft_model(load(f"{d}/{family}"), cfg)
    with torch.no_grad():  # adapters large enough to change what greedy picks
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(20.0)
    model.save_pretrained(f"{d}/{family}_peft")
    model.eval()
    want = [hf_generate(model, p) for p in PROMPTS]
    assert want != [hf_generate(load(f"{d}/{family}"), p) for p in PROMPTS], "the adapter changes nothing"
    got = sft_generate(f"{d}/{family}", PROMPTS, "--adapter", f"{d}/{family}_peft")
    assert got == want, f"{family} + LoRA: sft_generate {got} vs PEFT {want}"


def test_qwen3_greedy_equals_the_float64_reference(models):
    d = models
    spec, cfg = hfl.make_hf_dir("qwen3", f"{d}/qwen3_ref", seed=4)
    p = hfl.torch_params(spec)
    got = sft_generate(f"{d}/qwen3", PROMPTS)
    eos = {5, 6}  # the directory's generation_config.json
    for prompt, out in zip(PROMPTS, got):
        ids, want = list(prompt), []
        while len(want) < NEW:
            x = torch.tensor([ids])
            nxt = int(hfl.ref_logits(p, cfg, x, torch.arange(len(ids))[None])[0, -1].argmax())
            want.append(nxt)
            ids.append(nxt)
            if nxt in eos:
                break
        assert out == want, f"qwen3: sft_generate {out} vs reference {want}"


def test_qwen3_with_an_adapter_equals_the_reference_on_merged_weights(models):
    """A PEFT adapter directory written by hand under PEFT's names (transformers 4.44 cannot build Qwen3, so
    PEFT cannot either): sft_generate --adapter equals the float64 reference greedy on W + (alpha/r)·B·A."""
    from safetensors.torch import save_file
    d = models
    spec, cfg = hfl.make_hf_dir("qwen3", f"{d}/qwen3_ref_lora", seed=4)
    hs, nh, kvh, r, alpha = cfg["head_dim"], hfl.NH, hfl.KVH, 4, 16
    g = torch.Generator().manual_seed(9)
    shapes = {"q_proj": (nh * hs, hfl.C), "v_proj": (kvh * hs, hfl.C), "o_proj": (hfl.C, nh * hs),
              "down_proj": (hfl.C, hfl.F)}
    tensors, p = {}, hfl.torch_params(spec)
    for l in range(hfl.L):
        for module, (out_f, in_f) in shapes.items():
            a = 0.3 * torch.randn(r, in_f, generator=g, dtype=torch.float32)
            b = 0.3 * torch.randn(out_f, r, generator=g, dtype=torch.float32)
            part = "self_attn" if module != "down_proj" else "mlp"
            name = f"base_model.model.model.layers.{l}.{part}.{module}"
            tensors[f"{name}.lora_A.weight"], tensors[f"{name}.lora_B.weight"] = a, b
            delta = (alpha / r) * (b.double() @ a.double())
            h = f"h.{l}."
            if module == "q_proj":
                p[h + "attn.qkv.weight"][:nh * hs] += delta
            elif module == "v_proj":
                p[h + "attn.qkv.weight"][(nh + kvh) * hs:] += delta
            elif module == "o_proj":
                p[h + "attn.proj.weight"] += delta
            else:
                p[h + "mlp.proj.weight"] += delta
    os.makedirs(f"{d}/qwen3_peft")
    save_file(tensors, f"{d}/qwen3_peft/adapter_model.safetensors", metadata={"format": "pt"})
    with open(f"{d}/qwen3_peft/adapter_config.json", "w") as f:
        json.dump({"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": list(shapes),
                   "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM"}, f)
    got = sft_generate(f"{d}/qwen3", PROMPTS, "--adapter", f"{d}/qwen3_peft")
    assert got != sft_generate(f"{d}/qwen3", PROMPTS), "the adapter changes nothing"
    for prompt, out in zip(PROMPTS, got):
        ids, want = list(prompt), []
        while len(want) < NEW:
            nxt = int(hfl.ref_logits(p, cfg, torch.tensor([ids]), torch.arange(len(ids))[None])[0, -1].argmax())
            want.append(nxt)
            ids.append(nxt)
            if nxt in (5, 6):
                break
        assert out == want, f"qwen3 + LoRA: sft_generate {out} vs reference {want}"


def test_a_lora_checkpoint_generates_what_its_merged_export_does(models):
    d = models
    make_data(f"{d}/train.h5", 8, T=16, vocab=hfl.V, seed=3)
    cfg = write_config(f"{d}/lora.yml", load_parameters_path=f"{d}/llama", lora_rank=4, lora_alpha=64,
                       lora_target_modules="all-linear", train_files=f"{d}/train.h5", max_target_length=16,
                       global_batch_size=8, steps=2, learning_rate=0.05, hardware="cpu", enable_data_shuffling=False,
                       base_output_directory=f"{d}/out", run_name="lora", warmup_steps_fraction=0.0)
    run_train(cfg)
    ckpt = f"{d}/out/lora/checkpoints/step_2"
    subprocess.run([SFT_EXPORT, ckpt, f"{d}/merged", "--merge"], check=True, capture_output=True)
    model = load(f"{d}/merged")
    want = [hf_generate(model, p) for p in PROMPTS]
    assert want != [hf_generate(load(f"{d}/llama"), p) for p in PROMPTS], "training changed nothing"
    assert sft_generate(ckpt, PROMPTS) == want


def test_bad_input_is_one_error_line_with_exit_2(models):
    d = models
    r = sft_generate(f"{d}/llama", [[1, 2, 64]], check=False)  # V = 64: id 64 is outside
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: stdin line 1: ")
    assert "64" in r.stderr and r.stdout == ""
    r = sft_generate(f"{d}/no_such_dir", PROMPTS, check=False)
    assert r.returncode == 2 and "error: --model: " in r.stderr and "no_such_dir" in r.stderr
    r = sft_generate(f"{d}/llama", PROMPTS, "--top-p", "0", check=False)
    assert r.returncode == 2 and "error: --top-p" in r.stderr
    r = sft_generate(f"{d}/llama", PROMPTS, "--prompt", "hi", check=False)
    assert r.returncode == 2 and "byte tokenizer" in r.stderr


def make_chat_tokenizer(out):
    """A word-level tokenizer of 40 ids (the tiny models have 64) with ChatML's markers as special tokens and
    ChatML as its chat template, saved with save_pretrained beside a model."""
    from tokenizers import Tokenizer, models as tm, pre_tokenizers
    words = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "user", "assistant", "system", "hi", "there", "how",
             "are", "you"] + [f"w{i}" for i in range(29)]
    tok = Tokenizer(tm.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="w0",
                                                additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
                          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
    fast.save_pretrained(out)
    return fast


def test_generate_py_chat_renders_the_template_and_stops_at_its_end_of_turn(models):
    import sys
    d = models
    sys.path.insert(0, os.path.join(os.environ.get("SFTDP_SOURCE_DIR", "../.."), "scripts"))
    import generate as front
    tok = make_chat_tokenizer(f"{d}/qwen2")
    assert front.HfTokenizer(f"{d}/qwen2").stop_ids(chat=True) == [2, 0]  # <|im_end|>, then eos <|endoftext|>
    assert front.HfTokenizer(f"{d}/qwen2").stop_ids(chat=False) == [0]
    messages = [{"role": "system", "content": "how are you"}, {"role": "user", "content": "hi there"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert front.HfTokenizer(f"{d}/qwen2").encode_chat(messages) == ids
    model = load(f"{d}/qwen2")
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=NEW, do_sample=False, eos_token_id=[2, 0], pad_token_id=0)
    new = out[0, len(ids):].tolist()
    want = tok.decode(new[:-1] if new[-1] in (0, 2) else new, skip_special_tokens=True)
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(front.__file__), "generate.py"), "--model",
                        f"{d}/qwen2", "--chat", "hi there", "--system", "how are you", "--max-new-tokens", str(NEW),
                        "--hardware", "cpu"], capture_output=True, text=True,
                       env=dict(os.environ, SFTDP_BUILD_DIR=BUILD))
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"
