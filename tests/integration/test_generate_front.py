"""scripts/generate.py's tokenizer side without torch (issue 35, item 1), so that it runs under both
.pyref (transformers 4.44) and the torch-free .pynew (newest transformers/tokenizers): --chat renders
the tokenizer's chat template to exactly the ids of transformers' public apply_chat_template with the
generation prompt, stops at the template's end of turn, and prints what sft_generate gives for those
ids, decoded; --input names a bad line; a chat template that reaches for Python internals
(`__class__`, `__subclasses__`) or uses a filter the installed jinja2 lacks is one `error:` line,
exit 2. The model is a gpt2-tiny checkpoint (vocabulary 264) trained one step by sft_train; the
tokenizer a 40-word WordLevel with ChatML markers, saved by the installed transformers."""
import json
import os
import subprocess
import sys

import pytest

from harness import BUILD, SOURCE, make_data, run_train, write_config
from hf_tok import chat_ids
from prep_tools import one_error_line

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

GENERATE = os.path.join(SOURCE, "scripts", "generate.py")
SFT_GENERATE = os.path.join(BUILD, "sft_generate")
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
ESCAPE = "{{ ''.__class__.__mro__[1].__subclasses__() }}" + CHATML
NEWER = "{{ messages | newest_filter }}" + CHATML


def make_tokenizer(out, template):
    from tokenizers import Tokenizer, models as tm, pre_tokenizers
    words = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "user", "assistant", "system", "hi", "there", "how",
             "are", "you"] + [f"w{i}" for i in range(29)]
    tok = Tokenizer(tm.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="w0",
                                                additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = template
    fast.save_pretrained(out)
    return fast


@pytest.fixture(scope="module")
def setup(workdir):
    d = workdir
    make_data(f"{d}/train.h5", 8, T=32, vocab=264, seed=2)
    cfg = write_config(f"{d}/tiny.yml", model_name="gpt2-tiny", train_files=f"{d}/train.h5", max_target_length=32,
                       global_batch_size=8, steps=1, learning_rate=0.01, hardware="cpu",
                       base_output_directory=f"{d}/out", run_name="front", warmup_steps_fraction=0.0)
    run_train(cfg)
    tok = make_tokenizer(f"{d}/tok", CHATML)
    make_tokenizer(f"{d}/escape", ESCAPE)
    make_tokenizer(f"{d}/newer", NEWER)
    return d, f"{d}/out/front/checkpoints/step_1", tok


def generate(*args):
    return subprocess.run([sys.executable, GENERATE, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, SFTDP_BUILD_DIR=BUILD))


def test_chat_gives_apply_chat_template_ids_and_stops_at_end_of_turn(setup):
    d, ckpt, tok = setup
    messages = [{"role": "system", "content": "how are you"}, {"role": "user", "content": "hi there"}]
    ids = chat_ids(tok, messages, add_generation_prompt=True)
    assert ids[:2] == [1, 5] and ids[-2:] == [1, 4]  # <|im_start|> system ... <|im_start|> assistant
    stops = [2, 0]  # <|im_end|> (the template's end of turn), then eos <|endoftext|>
    r = subprocess.run([SFT_GENERATE, "--model", ckpt, "--max-new-tokens", "10", "--hardware", "cpu"]
                       + [a for s in stops for a in ("--stop-id", str(s))],
                       input=" ".join(map(str, ids)) + "\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    new = [int(t) for t in r.stdout.split()]
    want = tok.decode(new[:-1] if new and new[-1] in stops else new, skip_special_tokens=True)
    r = generate("--model", ckpt, "--tokenizer", f"{d}/tok", "--chat", "hi there", "--system", "how are you",
                 "--max-new-tokens", "10", "--hardware", "cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"

    sys.path.insert(0, os.path.dirname(GENERATE))
    import generate as front
    hf = front.HfTokenizer(f"{d}/tok")
    assert hf.encode_chat(messages) == ids and hf.stop_ids(chat=True) == stops and hf.stop_ids(chat=False) == [0]


def test_input_jsonl_and_its_errors(setup, workdir):
    d, ckpt, _ = setup
    good = f"{workdir}/prompts.jsonl"
    with open(good, "w") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    r = generate("--model", ckpt, "--tokenizer", f"{d}/tok", "--input", good, "--max-new-tokens", "3",
                 "--hardware", "cpu")
    assert r.returncode == 0 and "completion" in json.loads(r.stdout), r.stderr
    bad = f"{workdir}/bad.jsonl"
    with open(bad, "w") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n\n{oops\n")
    one_error_line(generate("--model", ckpt, "--tokenizer", f"{d}/tok", "--input", bad), f"{bad}:3: invalid JSON")
    one_error_line(generate("--model", ckpt, "--tokenizer", f"{d}/tok", "--input", f"{workdir}/none.jsonl"),
                   "none.jsonl")


@pytest.mark.parametrize("kind,needles", [("escape", ["refused by the sandbox", "__class__"]),
                                          ("newer", ["newest_filter", "jinja2 "])])
def test_a_hostile_or_newer_template_is_one_error_line(setup, kind, needles):
    d, ckpt, _ = setup
    one_error_line(generate("--model", ckpt, "--tokenizer", f"{d}/{kind}", "--chat", "hi", "--hardware", "cpu"),
                   "chat template", *needles)
