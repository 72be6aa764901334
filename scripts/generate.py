#!/usr/bin/env python3
"""Text and chat from a trained model: the tokenizer front end of sft_generate (SPEC §2). Text or chat
turns become token ids here (a Hugging Face tokenizer through transformers, with the model's chat
template rendered as apply_chat_template renders it, or sft_prepare's byte tokenizer); sft_generate
runs the model with its key/value cache and sampler; the new ids are decoded back to text.

    python scripts/generate.py --model M [--adapter DIR] [--tokenizer TOK] --prompt TEXT
    python scripts/generate.py --model M --chat "Hello" [--system TEXT]
    python scripts/generate.py --model M --input prompts.jsonl [--chat-input]   # one JSON line out each

Needs transformers, tokenizers and jinja2 for Hugging Face tokenizers only, and no torch (scripts/setup_pyref.sh
installs the pinned ones into .pyref, scripts/setup_pynew.sh the newest into .pynew). Chat templates are rendered
in jinja2's sandbox by scripts/prepare/template.py, with no private transformers API.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # scripts/prepare/
from prepare.errors import UserError  # noqa: E402  (sft_prepare_hf's: one kind of `error:` line)
BYTE_VOCAB, BYTE_BOS, BYTE_EOS, BYTE_SYSTEM, BYTE_USER, BYTE_ASSISTANT, BYTE_END = 264, 256, 257, 259, 260, 261, 262
SAMPLING = ("max-new-tokens", "max-length", "temperature", "top-k", "top-p", "seed", "hardware")


def sft_generate_binary():
    build = os.environ.get("SFTDP_BUILD_DIR", os.path.join(ROOT, "build"))
    path = os.path.join(build, "sft_generate")
    if not os.path.isfile(path):
        raise UserError(f"{path}: not found (build first: bash scripts/build.sh, or set SFTDP_BUILD_DIR)")
    return path


# ---- tokenizers ----------------------------------------------------------------------------

class ByteTokenizer:
    """sft_prepare's byte tokenizer (src/data/tokenizer.h): <|bos|> + UTF-8 bytes; chat turns as
    <|user|>X<|end|> ... <|assistant|>; a reply ends at <|end|> (chat) or <|eos|>."""
    name = "byte tokenizer"

    def encode_prompt(self, text):
        return [BYTE_BOS] + list(text.encode())

    def encode_chat(self, messages):
        role = {"system": BYTE_SYSTEM, "user": BYTE_USER, "assistant": BYTE_ASSISTANT}
        ids = [BYTE_BOS]
        for m in messages:
            if m.get("role") not in role:
                raise UserError(f"chat: role must be system, user or assistant, got {m.get('role')!r}")
            ids += [role[m["role"]]] + list(m["content"].encode()) + [BYTE_END]
        return ids + [BYTE_ASSISTANT]

    def stop_ids(self, chat):
        return [BYTE_END, BYTE_EOS] if chat else [BYTE_EOS]

    def decode(self, ids):
        return bytes(t for t in ids if t < 256).decode(errors="replace")


class HfTokenizer:
    """A Hugging Face tokenizer (scripts/sft_prepare_hf.py's loader and template rendering)."""

    def __init__(self, path):
        from prepare.vocab import Vocab, load_tokenizer
        self.vocab = Vocab(load_tokenizer(path)).check_renderer()
        self.name = f"tokenizer {path}"

    def encode_prompt(self, text):
        return self.vocab.encode_batch([text], special=True)[0]

    def encode_chat(self, messages):
        text = self.vocab.render(messages, generation_prompt=True)
        return self.vocab.encode_batch([text], special=False)[0]

    def end_of_turn(self):
        """The first token the template emits after an assistant turn's content (<|im_end|>,
        <|eot_id|>, ...), when the tokenizer has it as one special token."""
        marker = "\u2063sftdp\u2063"
        text = self.vocab.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": marker}],
                                 generation_prompt=False)
        after = text.split(marker, 1)[1] if marker in text else ""
        ids = self.vocab.encode_batch([after], special=False)[0] if after else []
        if ids and ids[0] in self.vocab.tok.all_special_ids + list(self.vocab.tok.added_tokens_decoder):
            return ids[0]
        return None

    def stop_ids(self, chat):
        ids = [self.vocab.eos_id] if self.vocab.eos_id is not None else []
        eot = self.end_of_turn() if chat else None
        return ([eot] if eot is not None and eot not in ids else []) + ids

    def decode(self, ids):
        return self.vocab.tok.decode(ids, skip_special_tokens=True)


def is_sharded_checkpoint(path):
    """A sharded sft-dp checkpoint: a step_<S>/ directory holding index.h5 (SPEC §5)."""
    return os.path.isfile(os.path.join(path, "index.h5"))


def checkpoint_config(path):
    """The resolved config text a checkpoint stores (its root attribute `config`; a sharded one's
    index holds it), or ""."""
    try:
        import h5py
        with h5py.File(os.path.join(path, "index.h5") if is_sharded_checkpoint(path) else path, "r") as f:
            c = f.attrs["config"]
        return c.decode() if isinstance(c, bytes) else str(c)
    except Exception:
        return ""


def config_value(text, key):
    """key's value in a stored config; a preset's value is written `key: null  # resolved: V`."""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            value = line.split(":", 1)[1].split("#")[0].strip().strip('"')
            if value in ("null", "~", "") and "resolved:" in line:
                return line.split("resolved:", 1)[1].strip()
            return "" if value in ("null", "~") else value
    return ""


def checkpoint_base(path):
    """The load_parameters_path of the run that wrote checkpoint `path`."""
    return config_value(checkpoint_config(path), "load_parameters_path")


def has_tokenizer_files(d):
    return any(os.path.isfile(os.path.join(d, f)) for f in ("tokenizer.json", "vocab.json", "encoder.json"))


def vocab_size(model):
    """The model's vocabulary: config.json's vocab_size, or the checkpoint's resolved vocab_size."""
    try:
        if os.path.isdir(model) and not is_sharded_checkpoint(model):
            with open(os.path.join(model, "config.json")) as f:
                return int(json.load(f).get("vocab_size"))
        return int(config_value(checkpoint_config(model), "vocab_size"))
    except (OSError, ValueError, TypeError):
        return None


def pick_tokenizer(args):
    if args.tokenizer:
        return HfTokenizer(args.tokenizer)
    hf_dir = os.path.isdir(args.model) and not is_sharded_checkpoint(args.model)
    for d in (args.model if hf_dir else checkpoint_base(args.model), args.adapter):
        if d and os.path.isdir(d) and has_tokenizer_files(d):
            return HfTokenizer(d)
    if vocab_size(args.model) == BYTE_VOCAB:
        return ByteTokenizer()  # sft_prepare's byte vocabulary (gpt2-tiny, llama-tiny)
    raise UserError(f"--tokenizer: no tokenizer files beside {args.model} (or its run's load_parameters_path), "
                    "and its vocabulary is not the byte tokenizer's: name the tokenizer directory or file")


# ---- the run -------------------------------------------------------------------------------

def generate(args, prompts, stop_ids):
    """sft_generate on each prompt (lists of ids, through stdin): the new ids of each."""
    cmd = [sft_generate_binary(), "--model", args.model]
    if args.adapter:
        cmd += ["--adapter", args.adapter]
    for flag in SAMPLING:
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            cmd += [f"--{flag}", str(value)]
    for t in stop_ids:
        cmd += ["--stop-id", str(t)]
    r = subprocess.run(cmd, input="".join(" ".join(map(str, p)) + "\n" for p in prompts), capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(r.returncode)
    return [[int(t) for t in line.split()] for line in r.stdout.splitlines()]


def strip_stop(ids, stop_ids):
    return ids[:-1] if ids and ids[-1] in stop_ids else ids


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="sft-dp checkpoint .h5 or Hugging Face model directory")
    p.add_argument("--adapter", help="PEFT LoRA adapter directory, merged into the model")
    p.add_argument("--tokenizer", help="tokenizer directory or file (default: the model's, the checkpoint's base's, "
                                       "or the byte tokenizer)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="a plain text prompt (the tokenizer's BOS added as it adds one)")
    what.add_argument("--chat", help="one user turn, rendered with the model's chat template and its generation "
                                     "prompt; the reply stops at the template's end-of-turn token")
    what.add_argument("--input", help="JSONL: {\"prompt\": ...} or {\"messages\": [...]} per line; prints one JSON "
                                      "line {\"completion\": ...} per input line")
    p.add_argument("--system", help="--chat: a system turn before the user's")
    for flag in SAMPLING:
        p.add_argument(f"--{flag}", help="passed to sft_generate (see sft_generate --help)")
    return p.parse_args(argv)


def read_jsonl(path):
    """The JSON objects of a JSONL file with their "FILE:LINE" names; UserError naming the line."""
    lines, where = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for n, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    ex = json.loads(text)
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{n}: invalid JSON: {e.msg}")
                if not isinstance(ex, dict) or not isinstance(ex.get("messages", ex.get("prompt")), (list, str)):
                    raise UserError(f'{path}:{n}: expected {{"prompt": TEXT}} or {{"messages": [...]}}')
                lines.append(ex)
                where.append(f"{path}:{n}")
    except OSError as e:
        raise UserError(f"--input: {path}: {e.strerror}")
    except UnicodeDecodeError as e:
        raise UserError(f"--input: {path}: invalid UTF-8 at byte {e.start + 1}")
    return lines, where


def main(argv):
    args = parse_args(argv)
    try:
        tok = pick_tokenizer(args)
        if args.input:
            lines, where = read_jsonl(args.input)
            chats = [("messages" in ex) for ex in lines]
            if any(chats) and not all(chats):
                raise UserError(f"{args.input}: mixes chat (messages) and prompt lines")
            chat = bool(chats and chats[0])
            prompts = []
            for ex, at in zip(lines, where):
                try:
                    prompts.append(tok.encode_chat(ex["messages"]) if chat else tok.encode_prompt(ex["prompt"]))
                except UserError as e:
                    raise UserError(f"{at}: {e}")
            stops = tok.stop_ids(chat)
            for ex, out in zip(lines, generate(args, prompts, stops)):
                print(json.dumps(dict(ex, completion=tok.decode(strip_stop(out, stops))), ensure_ascii=False))
            return 0
        if args.chat is not None:
            messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
                [{"role": "user", "content": args.chat}]
            prompt, stops = tok.encode_chat(messages), tok.stop_ids(True)
        else:
            prompt, stops = tok.encode_prompt(args.prompt), tok.stop_ids(False)
        print(tok.decode(strip_stop(generate(args, [prompt], stops)[0], stops)))
        return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
