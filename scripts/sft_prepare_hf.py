#!/usr/bin/env python3
"""sft_prepare with a Hugging Face tokenizer: JSONL prompt/completion pairs or chat messages → the
SPEC §4 HDF5 data file, with the same layout, flags, row rules, atomic write and `error:` lines
(exit 2, nothing written) as the C++ sft_prepare (byte tokenizer). Tokens come from the `tokenizers`
library through transformers; chat turns are rendered with the tokenizer's chat_template exactly as
apply_chat_template renders them (ChatML when it has none), loss only on assistant turns.

    python scripts/sft_prepare_hf.py --tokenizer DIR --input X.jsonl --output Y.h5 --max-length T \\
        [--format auto|prompt_completion|chat] [--overflow drop|truncate] [--pack] [--preset NAME]

--preset (scripts/chat_presets.py) checks the tokenizer against a Llama-family model preset and
supplies that model's chat template and special-token roles where the tokenizer has none.
Needs transformers, tokenizers, jinja2, h5py, numpy (scripts/setup_pyref.sh installs them into .pyref).
"""
import json
import os
import sys
import warnings

USAGE = """\
usage: sft_prepare_hf.py --tokenizer TOK --input X.jsonl --output Y.h5 --max-length T
                         [--format auto|prompt_completion|chat] [--overflow drop|truncate] [--pack]
                         [--preset NAME]
  TOK is a directory saved by transformers (tokenizer.json + tokenizer_config.json with the
  chat_template and special tokens), a bare tokenizer.json, or a directory with GPT-2's BPE files
  (vocab.json + merges.txt, or OpenAI's encoder.json + vocab.bpe).
  Each JSONL line is {"prompt": P, "completion": C} or {"messages": [{"role": R, "content": X}, ...]}.
  prompt/completion: tokens encode(P) encode(C) EOS, where encode(P) adds what the tokenizer adds to
    a text (Llama-3: its BOS; GPT-2: nothing); loss on C and EOS.
  chat: the tokens of apply_chat_template(messages) (ChatML <|im_start|>R\\nX<|im_end|>\\n when the
    tokenizer has no chat_template); loss on each assistant turn: what the template emits after the
    assistant header up to the next turn (the content and its end-of-turn tokens).
  --max-length T      row length; must equal max_target_length in the config (alias --max-target-length)
  --format F          auto (each line by its keys, default), prompt_completion or chat
  --overflow drop     examples longer than T+1 tokens are left out (default)
  --overflow truncate they are cut to their first T+1 tokens
  --pack              several examples per row (/segment_ids, /positions)
  --preset NAME       a model preset: smollm2-135m, smollm2-360m, qwen2.5-0.5b, qwen3-0.6b,
                      qwen3-1.7b, qwen3-4b, qwen3-8b, llama-3.2-1b. The tokenizer must have the model's special tokens (chat
                      markers, bos/eos/pad) as single ids and at most its vocab_size tokens; the
                      model's chat template is used when the tokenizer has none (its own wins), and
                      its bos/eos/pad fill the roles the tokenizer leaves unnamed.
  The file's vocab_size is the tokenizer's, added tokens included (GPT-2: 50257); rows are padded
  with its pad token (else EOS) at loss weight 0.
Exit: 0 ok, 2 bad usage or input (one `error:` line, no output file written), 1 other failure.
"""

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
EOS_GUESSES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>")


class UserError(Exception):
    pass


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
                raise UserError(f"--tokenizer: {path}: cannot load: {one_line(e)}")
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
        attempts.append(lambda: transformers.GPT2TokenizerFast(vocab_file=gpt2[0],
                                                               merges_file=gpt2[1]))
    for attempt in attempts:
        try:
            tok = attempt()
        except Exception as e:
            errors.append(one_line(e))
            continue
        if getattr(tok, "is_fast", False):
            return tok
        errors.append(f"{type(tok).__name__} is not a fast (tokenizers) tokenizer")
    raise UserError(f"--tokenizer: {path}: cannot load: {errors[-1] if errors else '?'}")


def one_line(e):
    text = " ".join(str(e).split())
    return text if len(text) < 300 else text[:297] + "..."


def preset_named(name):
    here = os.path.dirname(os.path.abspath(__file__))  # chat_presets.py lies beside this script
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
        self.template_source = "tokenizer_config.json" if self.template else (
            f"preset {preset} ({p.source})" if p else "ChatML default")
        if not self.template:
            self.template = p.template if p else CHATML

    def encode_batch(self, texts, special):
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=special)]

    def render(self, messages, generation_prompt):
        """The text apply_chat_template(messages, tokenize=False) gives."""
        if not messages:  # apply_chat_template refuses [], the template itself does not
            compiled = self.tok._compile_jinja_template(self.template)
            return compiled.render(messages=[], tools=None, documents=None,
                                   add_generation_prompt=generation_prompt,
                                   **self.tok.special_tokens_map)
        return self.tok.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                            add_generation_prompt=generation_prompt)

    def describe(self, path):
        name = lambda i: "none" if i is None else f"{self.tok.convert_ids_to_tokens(i)} ({i})"
        return (f"tokenizer {path}: {type(self.tok).__name__}, vocab_size {self.size}, "
                f"eos {name(self.eos_id)}, pad {name(self.pad_id)}, chat template: "
                f"{self.template_source}")


# ---------------------------------------------------------------------------------------------
# JSONL lines → examples (token ids + per-token target weights)

def string_field(obj, key, where=""):
    if key not in obj:
        raise UserError(f'{where}missing "{key}"')
    v = obj[key]
    if not isinstance(v, str):
        raise UserError(f'{where}"{key}" must be a string, found {json_type(v)}')
    return v


def json_type(v):
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(v), type(v).__name__)


def parse_line(text, fmt):
    """('pair', prompt, completion) or ('chat', messages); UserError without file or line."""
    try:
        j = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"invalid JSON: {e.msg} at column {e.colno}")
    if not isinstance(j, dict):
        raise UserError(f"expected a JSON object, found {json_type(j)}")
    pair = "prompt" in j or "completion" in j
    chat = "messages" in j
    if pair and chat:
        raise UserError('has both "messages" and "prompt"/"completion"; use one form per line')
    if chat and fmt == "prompt_completion":
        raise UserError('has "messages" but --format prompt_completion expects "prompt"/"completion"')
    if pair and fmt == "chat":
        raise UserError('has "prompt"/"completion" but --format chat expects "messages"')
    if chat:
        messages = j["messages"]
        if not isinstance(messages, list) or not messages:
            raise UserError('"messages" must be a non-empty array of {"role", "content"}')
        for i, turn in enumerate(messages):
            where = f"messages[{i}]: "
            if not isinstance(turn, dict):
                raise UserError(f'{where}must be an object {{"role", "content"}}, found '
                                f"{json_type(turn)}")
            string_field(turn, "role", where)
            string_field(turn, "content", where)
        if not any(t["role"] == "assistant" for t in messages):
            raise UserError('"messages" has no assistant turn: nothing to train on')
        return ("chat", [{"role": t["role"], "content": t["content"]} for t in messages])
    if pair:
        return ("pair", string_field(j, "prompt"), string_field(j, "completion"))
    raise UserError('missing fields: expected {"prompt", "completion"} or {"messages": [...]}')


def read_jsonl(path, fmt):
    """[(line_no, parsed)]; errors are UserError "<path>:<line>: <reason>"."""
    if not os.path.exists(path):
        raise UserError(f"{path}: not found")
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot be opened for reading: {e.strerror}")
    out = []
    with f:
        for line_no, raw in enumerate(f, 1):
            if not raw.strip(b" \t\r\n"):
                continue
            try:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise UserError(f"invalid UTF-8 at byte {e.start + 1}")
                out.append((line_no, parse_line(text, fmt)))
            except UserError as e:
                raise UserError(f"{path}:{line_no}: {e}")
    if not out:
        raise UserError(f"{path}: no examples (the file is empty)")
    return out


def common_prefix(a, b):
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def turn_span(vocab, messages, i, full):
    """[start, end]: prefixes of the rendered conversation `full` that the assistant turn
    messages[i] lies between. start renders messages[:i] with the generation prompt; end renders
    messages[:i+1]. A template may render a reply differently when it is the last message (Qwen3:
    an empty think block): then the turn ends where, in `full`, its content is followed by the text
    that follows the content in the last-message rendering (its end-of-turn, e.g. <|im_end|>\n)."""
    start, end = vocab.render(messages[:i], True), vocab.render(messages[:i + 1], False)
    where = (f"the chat template does not render messages[:{i}] as a prefix of the whole "
             f"conversation, so the tokens of assistant turn messages[{i}] cannot be located")
    if not full.startswith(start):
        raise UserError(where)
    if full.startswith(end) and len(start) <= len(end):
        return [start, end]
    content = messages[i]["content"]
    turn = end[len(start):] if end.startswith(start) else ""
    at = full.find(content, len(start)) if content else -1
    if not content or content not in turn or at < 0:
        raise UserError(where.replace(f"messages[:{i}]", f"messages[:{i + 1}]"))
    tail = turn[turn.rfind(content) + len(content):]
    stop = at + len(content) + len(tail)
    if not full.startswith(tail, at + len(content)):
        raise UserError(where.replace(f"messages[:{i}]", f"messages[:{i + 1}]"))
    return [start, full[:stop]]


def tokenize(vocab, parsed, path):
    """Examples [(ids, weights)] in file order, and the count of turn-edge tokens that a chat
    template's text merged across a turn boundary (left out of the loss)."""
    pairs = [(n, p) for n, p in parsed if p[0] == "pair"]
    if pairs and vocab.eos_id is None:
        raise UserError(f"{path}:{pairs[0][0]}: prompt/completion examples end with EOS, and the "
                        "tokenizer names no eos_token (give a directory whose "
                        "tokenizer_config.json has one)")
    prompts = vocab.encode_batch([p[1] for _, p in pairs], special=True)
    completions = vocab.encode_batch([p[2] for _, p in pairs], special=False)
    by_line = {}
    for (n, _), p_ids, c_ids in zip(pairs, prompts, completions):
        ids = p_ids + c_ids + [vocab.eos_id]
        by_line[n] = (ids, [0.0] * len(p_ids) + [1.0] * (len(c_ids) + 1))

    # Chat: the whole conversation, and per assistant turn i the text before its content
    # (messages[:i] + generation prompt) and after its end (messages[:i+1]); the turn's tokens are
    # those between the two prefixes' tokens.
    texts, plans = [], []
    from jinja2.exceptions import TemplateError
    for n, p in parsed:
        if p[0] != "chat":
            continue
        messages = p[1]
        try:
            full = vocab.render(messages, False)
            prefixes = []
            for i, turn in enumerate(messages):
                if turn["role"] != "assistant":
                    continue
                prefixes += turn_span(vocab, messages, i, full)
        except TemplateError as e:
            raise UserError(f"{path}:{n}: chat template: {one_line(e)}")
        except UserError as e:
            raise UserError(f"{path}:{n}: {e}")
        plans.append((n, len(texts), len(prefixes) // 2))
        texts += [full] + prefixes
    encoded = vocab.encode_batch(texts, special=False)
    straddling = 0
    for n, base, turns in plans:
        ids = encoded[base]
        weights = [0.0] * len(ids)
        for k in range(turns):
            start_ids, end_ids = encoded[base + 1 + 2 * k], encoded[base + 2 + 2 * k]
            s, e = common_prefix(start_ids, ids), common_prefix(end_ids, ids)
            straddling += (s != len(start_ids)) + (e != len(end_ids))
            for t in range(s, e):
                weights[t] = 1.0
        by_line[n] = (ids, weights)

    examples = []
    for n, _ in parsed:
        ids, weights = by_line[n]
        if len(ids) < 2:
            raise UserError(f"{path}:{n}: the example is {len(ids)} token long; a row needs at "
                            "least 2 (an input and a target)")
        examples.append((ids, weights))
    return examples, straddling


# ---------------------------------------------------------------------------------------------
# Examples → rows (src/data/prepare.cpp RowBuilder, the same rules) → the HDF5 file

def build_rows(examples, T, pack, truncate, pad_id):
    """An example of L tokens takes L-1 positions: inputs tokens[0..L-2], targets tokens[1..L-1],
    loss_weights the targets' weights. Longer than T+1: dropped, or cut to T+1 (truncate).
    Packed: appended to the current row while it fits, segment ids 1, 2, ... and positions
    restarting at 0 per example (padding: 0, 0)."""
    import numpy as np
    placed, stats = [], {"examples": len(examples), "dropped": 0, "truncated": 0,
                         "completion_tokens": 0}
    rows, fill, segment = 0, T, 0
    for ids, weights in examples:
        length = len(ids)
        if length > T + 1:
            if not truncate:
                stats["dropped"] += 1
                continue
            stats["truncated"] += 1
            length = T + 1
        span = length - 1
        if not pack or fill + span > T:
            rows, fill, segment = rows + 1, 0, 0
        segment += 1
        placed.append((rows - 1, fill, segment, ids[:length], weights[1:length]))
        fill += span
    inputs = np.full((rows, T), pad_id, dtype="<i4")
    targets = np.full((rows, T), pad_id, dtype="<i4")
    loss_weights = np.zeros((rows, T), dtype="<f4")
    segment_ids = np.zeros((rows, T), dtype="<i4") if pack else None
    positions = np.zeros((rows, T), dtype="<i4") if pack else None
    for row, at, seg, ids, w in placed:
        span = len(ids) - 1
        inputs[row, at:at + span] = ids[:-1]
        targets[row, at:at + span] = ids[1:]
        loss_weights[row, at:at + span] = w
        stats["completion_tokens"] += sum(1 for x in w if x != 0.0)
        if pack:
            segment_ids[row, at:at + span] = seg
            positions[row, at:at + span] = np.arange(span)
    columns = {"inputs": inputs, "targets": targets, "loss_weights": loss_weights}
    if pack:
        columns.update(segment_ids=segment_ids, positions=positions)
    return columns, rows, stats


def write_data_file(path, columns, vocab_size):
    """Written as <path>.partial-<pid> and renamed into place (src/data/data_writer.cpp)."""
    import h5py
    import numpy as np
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise UserError(f"{path}: cannot create directory {parent}: {e.strerror}")
    temp = f"{path}.partial-{os.getpid()}"
    try:
        try:
            f = h5py.File(temp, "w")
        except OSError:
            raise UserError(f"{path}: cannot create (is the directory writable?)")
        with f:
            for name in ("inputs", "targets", "loss_weights", "segment_ids", "positions"):
                if name in columns:
                    f.create_dataset(name, data=columns[name])
            f.attrs.create("vocab_size", np.int64(vocab_size), dtype="<i8")
        os.rename(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise


# ---------------------------------------------------------------------------------------------
# Command line

def parse_args(argv):
    opts = {"tokenizer": None, "input": None, "output": None, "T": None, "format": "auto",
            "overflow": "drop", "pack": False, "preset": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--help", "-h"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        if arg == "--pack":
            opts["pack"] = True
            i += 1
            continue
        flags = ("--tokenizer", "--input", "--output", "--max-length", "--max-target-length",
                 "--format", "--overflow", "--preset")
        if arg not in flags:
            raise UserError(f'unknown argument "{arg}" (see sft_prepare_hf.py --help)')
        if i + 1 >= len(argv):
            raise UserError(f"{arg}: needs a value")
        value = argv[i + 1]
        i += 2
        if arg in ("--max-length", "--max-target-length"):
            if not value.isdigit() or not 1 <= int(value) <= (1 << 24):
                raise UserError(f'{arg}: expected a positive integer, got "{value}"')
            opts["T"] = int(value)
        elif arg == "--format":
            if value not in ("auto", "prompt_completion", "chat"):
                raise UserError(f'--format: expected auto, prompt_completion or chat, got "{value}"')
            opts["format"] = value
        elif arg == "--overflow":
            if value not in ("drop", "truncate"):
                raise UserError(f'--overflow: expected drop or truncate, got "{value}"')
            opts["overflow"] = value
        else:
            if arg == "--preset":
                preset_named(value)
            opts[arg[2:]] = value
    if not (opts["tokenizer"] and opts["input"] and opts["output"] and opts["T"]):
        raise UserError("--tokenizer, --input, --output and --max-length are required")
    same = opts["input"] == opts["output"]
    try:
        same = same or os.path.samefile(opts["input"], opts["output"])
    except OSError:
        pass
    if same:
        raise UserError("--output: is the same file as --input")
    return opts


def prepare(opts, vocab=None):
    """Everything but the write: (columns, rows, stats, straddling, vocab). The tokenizer is
    loaded from opts["tokenizer"] unless a Vocab is given (bench/bench_tokenizer.py)."""
    T = opts["T"]
    vocab = vocab or Vocab(load_tokenizer(opts["tokenizer"]), opts.get("preset"))
    parsed = read_jsonl(opts["input"], opts["format"])
    examples, straddling = tokenize(vocab, parsed, opts["input"])
    columns, rows, stats = build_rows(examples, T, opts["pack"], opts["overflow"] == "truncate",
                                      vocab.pad_id)
    if rows == 0:
        raise UserError(f"{opts['input']}: no rows left: all {stats['dropped']} examples are longer "
                        f"than max-length+1 = {T + 1} tokens; use --overflow truncate or a larger "
                        "--max-length")
    return columns, rows, stats, straddling, vocab


def main(argv):
    try:
        opts = parse_args(argv)
        columns, rows, stats, straddling, vocab = prepare(opts)
        write_data_file(opts["output"], columns, vocab.size)
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    T = opts["T"]
    print(f"sft_prepare_hf: {opts['input']} -> {opts['output']}: {stats['examples']} examples, "
          f"{rows} rows of T={T}{' (packed)' if opts['pack'] else ''}")
    print(f"  dropped (longer than {T + 1} tokens): {stats['dropped']}, truncated: "
          f"{stats['truncated']}, completion tokens: {stats['completion_tokens']}")
    print(f"  {vocab.describe(opts['tokenizer'])}")
    if straddling:
        print(f"  turn-edge tokens merged across a turn boundary, left out of the loss: {straddling}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
