"""scripts/sft_prepare_hf.py --preset (scripts/chat_presets.py) with small offline tokenizers whose
added special tokens are each Llama-family model's: a system/user/assistant/user/assistant
conversation renders to the hand-written text of the model's chat template (written here from the
models' templates, independently of chat_presets.py), its ids are the tokenizer's ids of that text,
the loss covers exactly the assistant replies and their end of turn; the tokenizer's own template
wins over the preset's; the preset names bos/eos where the tokenizer names none; a missing special
token or a tokenizer larger than the model's vocab_size is one `error:` line, exit 2, no file.
The script runs in this process (one transformers import) except for one exit-status check."""
import importlib.util
import json
import os
import subprocess
import sys

import h5py
import pytest

import harness

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCRIPT = os.path.join(harness.SOURCE, "scripts", "sft_prepare_hf.py")
_spec = importlib.util.spec_from_file_location("sft_prepare_hf_under_test", SCRIPT)
prep_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prep_module)

CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
          "<|eot_id|>"]
# model preset: (added special tokens, bos, eos, pad) as in the model's tokenizer_config.json
TOKENS = {
    "smollm2-135m": (CHATML, "<|im_start|>", "<|im_end|>", "<|im_end|>"),
    "smollm2-360m": (CHATML, "<|im_start|>", "<|im_end|>", "<|im_end|>"),
    "qwen2.5-0.5b": (CHATML, None, "<|im_end|>", "<|endoftext|>"),
    "qwen3-0.6b": (CHATML + ["<think>", "</think>"], None, "<|im_end|>", "<|endoftext|>"),
    "llama-3.2-1b": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", None),
}
CONV = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi! "},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}]
NO_SYSTEM = CONV[1:3]


def chatml(*turns):
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in turns)


SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TURNS = [("user", "Hi! "), ("assistant", "Hello."), ("user", "2+2?")]
IM_END = "<|im_end|>\n"
LLAMA_HEAD = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
              "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n")
LLAMA_REST = ("<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>")
# preset: (text of CONV, text of NO_SYSTEM, the weighted targets of CONV decoded, run by run)
EXPECTED = {
    "smollm2-135m": (chatml(("system", "Be brief."), *TURNS, ("assistant", "4")),
                     chatml(("system", SMOL_SYSTEM), *TURNS[:2]),
                     ["Hello." + IM_END, "4" + IM_END]),
    "qwen2.5-0.5b": (chatml(("system", "Be brief."), *TURNS, ("assistant", "4")),
                     chatml(("system", QWEN_SYSTEM), *TURNS[:2]),
                     ["Hello." + IM_END, "4" + IM_END]),
    # Qwen3: no default system turn; the last reply after the last user turn gets an empty think
    # block, an earlier reply none.
    "qwen3-0.6b": (chatml(("system", "Be brief."), *TURNS) +
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n",
                   "<|im_start|>user\nHi! <|im_end|>\n<|im_start|>assistant\n"
                   "<think>\n\n</think>\n\nHello.<|im_end|>\n",
                   ["Hello." + IM_END, "<think>\n\n</think>\n\n4" + IM_END]),
    # Llama 3.2: BOS, the system header always (dated), contents trimmed, no newline after eot.
    "llama-3.2-1b": (LLAMA_HEAD + "Be brief.<|eot_id|>" + LLAMA_REST +
                     "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>",
                     LLAMA_HEAD + "<|eot_id|>" + LLAMA_REST,
                     ["Hello.<|eot_id|>", "4<|eot_id|>"]),
}
EXPECTED["smollm2-360m"] = EXPECTED["smollm2-135m"]


def byte_tokenizer(specials, bos_added=None, extra=0, plain_tokens=()):
    """A byte-level BPE over the 256 bytes (no merges: one token per byte of text), then
    `extra` unreachable tokens and `plain_tokens` as ordinary vocabulary entries, then `specials`
    as added special tokens; with bos_added, a post-processor that adds it to encoded text (as
    Llama 3's does)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for s in [f"x{i}" for i in range(extra)] + list(plain_tokens):
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(specials))
    if bos_added:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos_added} $A", pair=f"{bos_added} $A {bos_added} $B",
            special_tokens=[(bos_added, tok.token_to_id(bos_added))])
    return tok


def save(tok, path, roles=(None, None, None), template=None):
    bos, eos, pad = roles
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos,
                                                eos_token=eos, pad_token=pad)
    if template:
        fast.chat_template = template
    fast.save_pretrained(path)
    return path


def run(args, capsys):
    code = prep_module.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def write_jsonl(path, objs):
    with open(path, "w", encoding="utf-8") as f:
        for o in objs:
            f.write(json.dumps(o) + "\n")
    return path


def loss_runs(fast, inputs, targets, weights, n):
    runs, cur = [], []
    for t in range(n - 1):
        if weights[t]:
            cur.append(int(targets[t]))
        elif cur:
            runs.append(cur)
            cur = []
    runs += [cur] if cur else []
    assert not weights[n - 1:].any()
    return [fast.decode(r, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            for r in runs]


def llama_date():
    """The date the Llama 3.2 template writes: strftime_now's where transformers defines it (asked
    through its public apply_chat_template: 4.45 and later)."""
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=byte_tokenizer([]))
    probe = fast.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                     chat_template="{{ strftime_now is defined }}")
    if probe == "True":
        import time
        return time.strftime("%d %b %Y")
    return "26 Jul 2024"


@pytest.mark.parametrize("preset", list(TOKENS))
def test_preset_renders_the_model_template(workdir, capsys, preset):
    specials, bos, eos, pad = TOKENS[preset]
    llama = preset.startswith("llama")
    tok = byte_tokenizer(specials, bos_added=bos if llama else None)
    d = save(tok, os.path.join(workdir, f"tok_{preset}"), (bos, eos, pad))
    jsonl = write_jsonl(os.path.join(workdir, f"{preset}.jsonl"),
                        [{"messages": CONV}, {"messages": NO_SYSTEM}])
    out = os.path.join(workdir, f"{preset}.h5")
    code, stdout, err = run(["--tokenizer", d, "--input", jsonl, "--output", out,
                             "--max-length", "256", "--preset", preset], capsys)
    assert code == 0, err
    assert f"chat template: preset {preset}" in stdout and "turn-edge" not in stdout, stdout
    fast = transformers.AutoTokenizer.from_pretrained(d)
    text, text_no_system, replies = EXPECTED[preset]
    date = llama_date()
    with h5py.File(out, "r") as f:
        cols = {k: f[k][...] for k in f}
        assert int(f.attrs["vocab_size"]) == len(fast) == 256 + len(specials)
    for r, expected in enumerate([text, text_no_system]):
        expected = expected.replace("{date}", date)
        ids = tok.encode(expected, add_special_tokens=False).ids
        n = len(ids)
        got = list(cols["inputs"][r, :n - 1]) + [int(cols["targets"][r, n - 2])]
        assert fast.decode(got, skip_special_tokens=False) == expected, (preset, r)
        assert got == ids, (preset, r)
        if llama:
            assert ids.count(tok.token_to_id("<|begin_of_text|>")) == 1  # no second BOS
        runs = loss_runs(fast, cols["inputs"][r], cols["targets"][r], cols["loss_weights"][r], n)
        assert runs == (replies if r == 0 else [replies[0] if not preset.startswith("qwen3")
                                                 else "<think>\n\n</think>\n\n" + replies[0]]), runs


def test_own_template_wins_and_preset_fills_roles(workdir, capsys):
    # A tokenizer with a template of its own (ChatML without Qwen's default system turn).
    own = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
           "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
           "{{ '<|im_start|>assistant\\n' }}{% endif %}")
    tok = byte_tokenizer(CHATML)
    d = save(tok, os.path.join(workdir, "tok_own"), (None, "<|im_end|>", "<|endoftext|>"), own)
    jsonl = write_jsonl(os.path.join(workdir, "own.jsonl"), [{"messages": NO_SYSTEM}])
    out = os.path.join(workdir, "own.h5")
    code, stdout, err = run(["--tokenizer", d, "--input", jsonl, "--output", out,
                             "--max-length", "64", "--preset", "qwen2.5-0.5b"], capsys)
    assert code == 0 and "chat template: tokenizer_config.json" in stdout, (stdout, err)
    expected = tok.encode("<|im_start|>user\nHi! <|im_end|>\n<|im_start|>assistant\nHello."
                          "<|im_end|>\n", add_special_tokens=False).ids
    with h5py.File(out, "r") as f:
        assert list(f["inputs"][0, :len(expected) - 1]) == expected[:-1]

    # A bare tokenizer.json names no bos/eos: the preset's fill them, so the Llama template's
    # bos_token renders and a prompt/completion example ends with <|eot_id|> (not the
    # <|end_of_text|> that the script guesses without a preset).
    tok = byte_tokenizer(LLAMA3, bos_added="<|begin_of_text|>")
    bare = os.path.join(workdir, "bare_llama")
    os.makedirs(bare, exist_ok=True)
    tok.save(os.path.join(bare, "tokenizer.json"))
    jsonl = write_jsonl(os.path.join(workdir, "bare.jsonl"),
                        [{"prompt": "ab", "completion": "c"}, {"messages": NO_SYSTEM}])
    ids = lambda text: tok.encode(text, add_special_tokens=False).ids
    bos, eot, eot_text = (tok.token_to_id(t) for t in ("<|begin_of_text|>", "<|eot_id|>",
                                                       "<|end_of_text|>"))
    for preset, end in (("llama-3.2-1b", eot), (None, eot_text)):
        out = os.path.join(workdir, f"bare_{preset}.h5")
        args = ["--tokenizer", os.path.join(bare, "tokenizer.json"), "--input", jsonl,
                "--output", out, "--max-length", "128"]
        code, stdout, err = run(args + (["--preset", preset] if preset else []), capsys)
        assert code == 0, err
        with h5py.File(out, "r") as f:
            pair = [bos] + ids("abc") + [end]
            assert list(f["inputs"][0, :4]) == pair[:4] and list(f["targets"][0, :4]) == pair[1:]
            chat = list(f["inputs"][1, :2])
        if preset:  # the preset's Llama template, its BOS from the preset's bos role
            assert chat == [bos, tok.token_to_id("<|start_header_id|>")], chat
        else:  # ChatML, no BOS
            assert chat == ids("<|im_start|>u")[:2], chat


def one_error_line(code, err, *needles):
    assert code == 2, (code, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for s in needles:
        assert s in err, (s, err)


@pytest.mark.parametrize("preset, specials, plain, missing", [
    ("llama-3.2-1b", [t for t in LLAMA3 if t != "<|eot_id|>"], (), "<|eot_id|>"),
    ("qwen3-0.6b", CHATML + ["<think>"], (), "</think>"),
    # in the vocabulary, but as an ordinary token that text never encodes to: not a single id
    ("qwen2.5-0.5b", ["<|endoftext|>", "<|im_start|>"], ("<|im_end|>",), "<|im_end|>"),
])
def test_missing_special_token(workdir, capsys, preset, specials, plain, missing):
    d = save(byte_tokenizer(specials, plain_tokens=plain), os.path.join(workdir, f"miss_{preset}"))
    jsonl = write_jsonl(os.path.join(workdir, "miss.jsonl"), [{"messages": NO_SYSTEM}])
    out = os.path.join(workdir, "miss", "x.h5")
    code, _, err = run(["--tokenizer", d, "--input", jsonl, "--output", out, "--max-length", "64",
                        "--preset", preset], capsys)
    one_error_line(code, err, f"--preset {preset}", f"no {missing} as a single token")
    assert not os.path.exists(os.path.dirname(out))


def test_too_large_tokenizer_and_bad_names(workdir, capsys):
    jsonl = write_jsonl(os.path.join(workdir, "big.jsonl"), [{"messages": NO_SYSTEM}])
    out = os.path.join(workdir, "big", "x.h5")
    # 256 bytes + 48893 others + 3 specials = 49152 tokens: fits SmolLM2 exactly; one more does not.
    for extra, ok in ((49152 - 256 - 3, True), (49152 - 256 - 3 + 1, False)):
        d = save(byte_tokenizer(CHATML, extra=extra), os.path.join(workdir, f"big_{extra}"),
                 (None, "<|im_end|>", None))
        code, _, err = run(["--tokenizer", d, "--input", jsonl, "--output", out,
                            "--max-length", "128", "--preset", "smollm2-135m"], capsys)
        if ok:
            assert code == 0, err
            os.remove(out)
        else:
            one_error_line(code, err, "--preset smollm2-135m", "49153 tokens",
                           "vocab_size 49152")
            assert not os.path.exists(out)
    d = os.path.join(workdir, "big_48893")
    code, _, err = run(["--tokenizer", d, "--input", jsonl, "--output", out, "--max-length", "8",
                        "--preset", "qwen2"], capsys)
    one_error_line(code, err, 'unknown preset "qwen2"', "qwen2.5-0.5b", "llama-3.2-1b")
    code, _, err = run(["--tokenizer", d, "--input", jsonl, "--output", out, "--max-length", "8",
                        "--preset", "llama-tiny"], capsys)
    one_error_line(code, err, "llama-tiny", "sft_prepare")
    # The same as a process: exit status 2, one line, no file.
    d = os.path.join(workdir, "big_48894")
    p = subprocess.run([sys.executable, SCRIPT, "--tokenizer", d, "--input", jsonl, "--output",
                        out, "--max-length", "128", "--preset", "smollm2-360m"],
                       capture_output=True, text=True, timeout=120)
    one_error_line(p.returncode, p.stderr, "49153 tokens")
    assert not os.path.exists(out)
