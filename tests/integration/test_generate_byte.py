"""sft_generate on a byte-tokenizer checkpoint (issue 26, finding 5), the demo's path: a gpt2-tiny run
of 3 steps on byte-vocabulary data (264 ids) writes a checkpoint; scripts/sample.py, now a thin
wrapper over sft_generate, prints for each eval prompt the completion that the float64 reference
GPT-2 (tests/model/reference_gpt2.py, what sample.py itself used to run) decodes greedily until
<|eos|> (at most 64 tokens), and the "K of N exactly right" line; `sft_generate --prompt` prints the
same text, and scripts/generate.py --chat (byte tokenizer: <|bos|><|user|>X<|end|><|assistant|>,
stopping at <|end|>) agree with sft_generate given those ids; generate.py --input prints each JSONL
line back with the reference completion."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from harness import BUILD, make_data, read_params, run_train, write_config

SOURCE = os.environ.get("SFTDP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.join(SOURCE, "tests/model"))
from reference_gpt2 import logits_of  # noqa: E402

SFT_GENERATE = os.path.join(BUILD, "sft_generate")
BOS, EOS, USER, ASSISTANT, END = 256, 257, 260, 261, 262
PROMPTS = ["12+34=", "abc", "reverse: xyz ->"]


@pytest.fixture(scope="module")
def ckpt(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 16, T=32, vocab=264, seed=1)
    cfg = write_config(f"{d}/tiny.yml", model_name="gpt2-tiny", train_files=f"{d}/train.h5", max_target_length=32,
                       global_batch_size=8, steps=3, learning_rate=0.01, hardware="cpu",
                       base_output_directory=f"{d}/out",
                       run_name="byte", warmup_steps_fraction=0.0)
    run_train(cfg)
    with open(f"{d}/eval.jsonl", "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p, "completion": "?"}) + "\n")
    return f"{d}/out/byte/checkpoints/step_3"


def reference_greedy(ckpt, ids, new=64):
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in read_params(ckpt).items()}
    L = 1 + max(int(k.split(".")[1]) for k in p if k.startswith("h."))
    ids, out = list(ids), []
    while len(out) < new:
        x = torch.tensor([ids])
        nxt = int(logits_of(p, L, 4, x, None, torch.arange(len(ids))[None])[0, -1].argmax())  # gpt2-tiny: 4 heads
        out.append(nxt)
        if nxt == EOS:
            break
        ids.append(nxt)
    return out


def text(ids):
    return bytes(t for t in ids if t < 256).decode(errors="replace")


def test_sample_py_prints_the_reference_greedy_completions(ckpt, workdir):
    env = dict(os.environ, SFTDP_BUILD_DIR=BUILD)
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts/sample.py"), ckpt, f"{workdir}/eval.jsonl", "3"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "0 of 3 exactly right"
    for prompt, line in zip(PROMPTS, lines):
        want = reference_greedy(ckpt, [BOS] + list(prompt.encode()))
        got = text(want[:-1] if want[-1] == EOS else want)
        assert line == f"  {prompt!r:>22} -> {got!r:<14} (expected '?')"


def test_prompt_and_chat_agree_with_the_ids_form(ckpt):
    def ids_form(ids, *stop):
        r = subprocess.run([SFT_GENERATE, "--model", ckpt, "--prompt-ids", " ".join(map(str, ids)),
                            *[a for s in stop for a in ("--stop-id", str(s))]], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return [int(t) for t in r.stdout.split()]

    prompt = "12+34="
    want = ids_form([BOS] + list(prompt.encode()))
    assert want == reference_greedy(ckpt, [BOS] + list(prompt.encode()))
    r = subprocess.run([SFT_GENERATE, "--model", ckpt, "--prompt", prompt], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == text(want[:-1] if want[-1] in (EOS, END) else want) + "\n"
    env = dict(os.environ, SFTDP_BUILD_DIR=BUILD)
    g = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts/generate.py"), "--model", ckpt, "--chat", "hi"],
                       capture_output=True, text=True, env=env)
    chat = ids_form([BOS, USER] + list(b"hi") + [END, ASSISTANT], END, EOS)
    assert g.returncode == 0, g.stderr
    assert g.stdout == text(chat[:-1] if chat[-1] in (EOS, END) else chat) + "\n"
    c = subprocess.run([SFT_GENERATE, "--model", ckpt, "--chat", "hi"], capture_output=True, text=True)
    assert c.returncode == 0 and c.stdout == g.stdout


def test_generate_py_input_gives_one_json_line_per_prompt(ckpt, workdir):
    env = dict(os.environ, SFTDP_BUILD_DIR=BUILD)
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts/generate.py"), "--model", ckpt, "--input",
                        f"{workdir}/eval.jsonl", "--max-new-tokens", "64"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert [o["prompt"] for o in out] == PROMPTS
    for o in out:
        want = reference_greedy(ckpt, [BOS] + list(o["prompt"].encode()))
        assert o["completion"] == text(want[:-1] if want[-1] == EOS else want)
