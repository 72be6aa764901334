"""The Hugging Face tokenizer side of scripts/sft_prepare_hf.py: loading a tokenizer (directory,
bare tokenizer.json, GPT-2 BPE files), the model presets' checks, rendering chat templates, and the
tokenizer's identity for the data file (SPEC §4 tokenizer_hash: FNV-1a 64 of its defining files)."""
import json
import os
import sys
import warnings

from prepare import template
from prepare.errors import UserError, one_line

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
EOS_GUESSES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>")


# ---------------------------------------------------------------------------------------------
# Tokenizer loading

def _quiet_transformers():
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def _gpt2_files(d):
    for vocab, merges in (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe")):
        if os.path.isfile(os.path.join(d, vocab)) and os.path.isfile(os.path.join(d, merges)):
            return os.path.join(d, vocab), os.path.join(d, merges)
    return None


def gpt2_from_files(transformers, vocab, merges):
    """GPT-2's byte-level BPE from its vocabulary and merges files, built with the tokenizers
    library as transformers' GPT-2 converter builds it (no prefix space, ByteLevel decoding and
    offsets), <|endoftext|> its bos/eos/unk: the same ids on every transformers release."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    tok = Tokenizer(models.BPE.from_file(vocab, merges, dropout=None, continuing_subword_prefix="",
                                         end_of_word_suffix="", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    end = "<|endoftext|>"
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end,
                                                unk_token=end)


def load_tokenizer(path):
    """A transformers fast tokenizer from a directory, a tokenizer.json, or GPT-2's BPE files."""
    if not os.path.exists(path):
        raise UserError(f"--tokenizer: {path}: not found")
    transformers = _quiet_transformers()
    d = path
    if os.path.isfile(path):
        d = os.path.dirname(os.path.abspath(path))
        is_tok_json = os.path.basename(path) == "tokenizer.json"
        if not is_tok_json and os.path.basename(path) not in ("vocab.json", "encoder.json"):
            raise UserError(f"--tokenizer: {path}: expected a directory, a tokenizer.json, or "
                            "GPT-2's vocab.json/encoder.json beside merges.txt/vocab.bpe")
        if is_tok_json and not os.path.isfile(os.path.join(d, "tokenizer_config.json")):
            try:  # a bare tokenizer.json: no chat template, no special-token roles
                return transformers.PreTrainedTokenizerFast(tokenizer_file=path)
            except Exception as e:
                raise UserError(f"--tokenizer: {path}: cannot load: {one_line(e)}{_newer_format(path)}")
    has_json = os.path.isfile(os.path.join(d, "tokenizer.json"))
    has_config = os.path.isfile(os.path.join(d, "tokenizer_config.json"))
    gpt2 = _gpt2_files(d)
    if not (has_json or gpt2):
        raise UserError(f"--tokenizer: {path}: has no tokenizer.json, vocab.json + merges.txt "
                        "or encoder.json + vocab.bpe")
    errors = []
    attempts = []
    if has_config:
        attempts.append(lambda: transformers.AutoTokenizer.from_pretrained(
            d, local_files_only=True, use_fast=True))
    if has_json:
        attempts.append(lambda: transformers.PreTrainedTokenizerFast.from_pretrained(
            d, local_files_only=True))
    if gpt2:
        attempts.append(lambda: gpt2_from_files(transformers, *gpt2))
    for attempt in attempts:
        try:
            tok = attempt()
        except Exception as e:
            errors.append(one_line(e))
            continue
        if getattr(tok, "is_fast", False):
            return _with_template_file(tok, d)
        errors.append(f"{type(tok).__name__} is not a fast (tokenizers) tokenizer")
    hint = _newer_format(os.path.join(d, "tokenizer.json")) if has_json else ""
    raise UserError(f"--tokenizer: {path}: cannot load: {errors[-1] if errors else '?'}{hint}")


def _with_template_file(tok, d):
    """tok with the chat template of d/chat_template.jinja (or chat_template.json) when it has
    none: transformers >= 4.50 saves the template there, where 4.44 does not look."""
    if tok.chat_template:
        return tok
    jinja, js = os.path.join(d, "chat_template.jinja"), os.path.join(d, "chat_template.json")
    try:
        if os.path.isfile(jinja):
            with open(jinja, encoding="utf-8") as f:
                tok.chat_template = f.read()
        elif os.path.isfile(js):
            with open(js, encoding="utf-8") as f:
                tok.chat_template = json.load(f)["chat_template"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"--tokenizer: {d}: cannot read its chat template file: {one_line(e)}")
    return tok


def _newer_format(tok_json):
    """A hint for a tokenizer.json that the installed tokenizers cannot read because a newer one
    wrote it (tokenizers 0.20 writes BPE merges as pairs, which 0.19 cannot parse), else ""."""
    import tokenizers
    try:
        with open(tok_json, encoding="utf-8") as f:
            merges = json.load(f).get("model", {}).get("merges") or []
    except (OSError, ValueError, AttributeError):
        return ""
    if merges and isinstance(merges[0], list) and tuple(map(int, tokenizers.__version__.split(".")[:2])) < (0, 20):
        return (f" (its BPE merges are pairs, as tokenizers >= 0.20 writes them; the installed "
                f"tokenizers {tokenizers.__version__} cannot read them: run this script with the newest "
                "libraries, bash scripts/setup_pynew.sh makes them in .pynew)")
    return ""


def preset_named(name):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/chat_presets.py
    if here not in sys.path:
        sys.path.insert(0, here)
    from chat_presets import BYTE_TOKENIZER_PRESETS, PRESETS
    if name in BYTE_TOKENIZER_PRESETS:
        raise UserError(f"--preset {name}: uses the byte tokenizer; prepare its data with the C++ "
                        "sft_prepare")
    if name not in PRESETS:
        raise UserError(f'--preset: unknown preset "{name}" (known: {", ".join(PRESETS)})')
    return PRESETS[name]


def check_preset(name, tok, size):
    """The chat_presets.Preset called name, after checking tok has its special tokens as single
    ids and at most its vocab_size tokens; its bos/eos/pad become tok's where tok names none."""
    p = preset_named(name)
    backend = tok.backend_tokenizer
    for token in dict.fromkeys(p.required + tuple(t for t in (p.bos, p.eos, p.pad) if t)):
        tid = backend.token_to_id(token)
        if tid is None or backend.encode(token, add_special_tokens=False).ids != [tid]:
            raise UserError(f"--preset {name}: the tokenizer has no {token} as a single token "
                            f"({p.source} has {', '.join(p.required)})")
    if size > p.vocab_size:
        raise UserError(f"--preset {name}: the tokenizer has {size} tokens, more than the "
                        f"model's vocab_size {p.vocab_size}")
    for role in ("bos", "eos", "pad"):
        if getattr(tok, f"{role}_token") is None and getattr(p, role):
            setattr(tok, f"{role}_token", getattr(p, role))
    return p


class Vocab:
    """What preparation needs from a tokenizer: encoding, its size and special ids, the template
    (the tokenizer's own, else the preset's, else ChatML)."""

    def __init__(self, tok, preset=None):
        self.tok = tok
        self.backend = tok.backend_tokenizer
        # Added tokens included; ids are < size even where a tokenizer.json leaves gaps.
        self.size = max(len(tok), 1 + max(tok.get_vocab().values(), default=-1))
        p = check_preset(preset, tok, self.size) if preset else None
        self.eos_id = tok.eos_token_id
        if self.eos_id is None:  # a bare tokenizer.json names no EOS: take a well-known one it has
            for guess in EOS_GUESSES:
                tid = tok.convert_tokens_to_ids(guess)
                if tid is not None and tid != tok.unk_token_id and tok.convert_ids_to_tokens(tid) == guess:
                    self.eos_id = tid
                    break
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else (
            self.eos_id if self.eos_id is not None else 0)
        self.template = tok.chat_template if isinstance(tok.chat_template, str) else None
        if isinstance(tok.chat_template, dict):  # named templates: the default one
            self.template = tok.chat_template.get("default")
        self.template_source = "tokenizer_config.json / chat_template.jinja" if self.template else (
            f"preset {preset} ({p.source})" if p else "ChatML default")
        if not self.template:
            self.template = p.template if p else CHATML
        self._compiled = None  # compiled on first use (in each worker)
        self._special = dict(tok.special_tokens_map)
        self.public = False  # True: render through apply_chat_template itself (see check_renderer)

    def encode_batch(self, texts, special):
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=special)]

    def _apply(self, messages, generation_prompt):
        """transformers' public apply_chat_template(tokenize=False) with this template."""
        return self.tok.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                            add_generation_prompt=generation_prompt)

    def _defines(self, name):
        """Whether the installed transformers gives chat templates the global `name` (asked through
        apply_chat_template, its public API)."""
        try:
            probe = self.tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                                 chat_template="{{ %s is defined }}" % name)
        except Exception:
            return False
        return str(probe).strip() == "True"

    def check_renderer(self):
        """Renders a plain conversation with prepare.template and with apply_chat_template; where
        they differ (a transformers release that renders differently), every chat is rendered
        through apply_chat_template instead: slower, never different. Returns self."""
        conv = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye now."}]
        for messages, gen in ((conv, False), (conv[:3], True)):
            try:
                theirs = self._apply(messages, gen)
                ours = self.render(messages, gen)
            except Exception:
                return self  # the template refuses this conversation: nothing to compare
            if ours != theirs:
                self.public = True
                return self
        return self

    def render(self, messages, generation_prompt):
        """The text apply_chat_template(messages, tokenize=False) gives: the template rendered by
        prepare.template in jinja2's sandbox, as transformers renders it, without its per-call
        overhead (or by apply_chat_template itself where check_renderer found a difference)."""
        if self.public:
            import jinja2.exceptions as jx
            try:
                return self._apply(messages, generation_prompt)
            except jx.TemplateError as e:
                raise UserError(template.explain(e, self.template_source))
            except Exception as e:
                raise UserError(f"chat template ({self.template_source}): {one_line(e)}")
        if self._compiled is None:
            self._compiled = template.ChatTemplate(self.template, self.template_source,
                                                   self._defines("strftime_now"))
        return self._compiled.render(messages, generation_prompt, self._special)

    def describe(self, path):
        name = lambda i: "none" if i is None else f"{self.tok.convert_ids_to_tokens(i)} ({i})"
        return (f"tokenizer {path}: {type(self.tok).__name__}, vocab_size {self.size}, "
                f"eos {name(self.eos_id)}, pad {name(self.pad_id)}, chat template: "
                f"{self.template_source}")


# ---------------------------------------------------------------------------------------------
# Identity (SPEC §4 root attributes tokenizer / tokenizer_hash)

DEFINITIONS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe"))


def fnv1a64(chunks):
    """FNV-1a 64 over the bytes of the chunks in order, as 16 lowercase hex digits."""
    h = 0xcbf29ce484222325
    for chunk in chunks:
        for b in chunk:
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tokenizer_hash(path):
    """The hash of the tokenizer's defining files: path itself when it is one file (a bare
    tokenizer.json), the BPE pair beside a vocab.json/encoder.json, else the first definition a
    directory has, in SPEC §4's order."""
    if os.path.isfile(path):
        base = os.path.basename(path)
        d = os.path.dirname(os.path.abspath(path))
        pair = {"vocab.json": "merges.txt", "encoder.json": "vocab.bpe"}.get(base)
        files = [path] if pair is None else [path, os.path.join(d, pair)]
    else:
        files = None
        for definition in DEFINITIONS:
            candidate = [os.path.join(path, name) for name in definition]
            if all(os.path.isfile(p) for p in candidate):
                files = candidate
                break
        if files is None:
            raise UserError(f"--tokenizer: {path}: has no tokenizer.json, vocab.json + merges.txt "
                            "or encoder.json + vocab.bpe")
    return fnv1a64(_read_all(files))


def _read_all(files):
    for path in files:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                yield chunk
