"""Rows → token ids and per-token loss weights with a Hugging Face tokenizer (prepare.vocab.Vocab):
prompt/completion encode(P) encode(C) EOS (loss on C and EOS); text encode(X) EOS (loss on all);
chat the ids of apply_chat_template(messages), loss on each trained assistant turn (the tokens
between the rendering of the turns before it with the generation prompt and the rendering up to and
including it). Pure functions of the batch: the same output for any number of workers."""
import itertools
import json

import numpy as np

from prepare.errors import UserError, one_line
from prepare.records import parse_record


def prefix_length(a, b):
    """common_prefix(a, b), with the usual case (a is a prefix of b) compared in C."""
    return len(a) if b[:len(a)] == a else common_prefix(a, b)


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
    start = vocab.render(messages[:i], True)
    end = full if i + 1 == len(messages) else vocab.render(messages[:i + 1], False)
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


def tokenize(vocab, parsed):
    """parsed: [(where, record)] with where "<file>:<line>" or "<file>: row N" and record from
    prepare.records. Returns the examples [(ids, weights)] in order and the count of turn-edge
    tokens that a chat template's text merged across a turn boundary (left out of the loss)."""
    pairs = [(n, p) for n, p in parsed if p[0] == "pair"]
    if pairs and vocab.eos_id is None:
        raise UserError(f"{pairs[0][0]}: prompt/completion examples end with EOS, and the "
                        "tokenizer names no eos_token (give a directory whose "
                        "tokenizer_config.json has one)")
    texts_lm = [(n, p) for n, p in parsed if p[0] == "text"]
    if texts_lm and vocab.eos_id is None:
        raise UserError(f"{texts_lm[0][0]}: text examples end with EOS, and the tokenizer names no "
                        "eos_token (give a directory whose tokenizer_config.json has one)")
    by_row = {}
    prompts = vocab.encode_batch([p[1] for _, p in pairs], special=True)
    completions = vocab.encode_batch([p[2] for _, p in pairs], special=False)
    for (n, _), p_ids, c_ids in zip(pairs, prompts, completions):
        ids = p_ids + c_ids + [vocab.eos_id]
        by_row[n] = (ids, [0.0] * len(p_ids) + [1.0] * (len(c_ids) + 1))
    for (n, _), ids in zip(texts_lm, vocab.encode_batch([p[1] for _, p in texts_lm], special=True)):
        ids = ids + [vocab.eos_id]
        by_row[n] = (ids, [1.0] * len(ids))

    # Chat: the whole conversation, and per trained assistant turn i the text before its content
    # (messages[:i] + generation prompt) and after its end (messages[:i+1]); the turn's tokens are
    # those between the two prefixes' tokens. The last turn's end is the whole conversation when
    # it renders as a prefix of it (None below: not rendered or encoded again).
    texts, plans = [], []
    from jinja2.exceptions import TemplateError
    for n, p in parsed:
        if p[0] != "chat":
            continue
        messages, first_trained = p[1], p[2]
        try:
            full = vocab.render(messages, False)
            prefixes = []
            for i, turn in enumerate(messages):
                if turn["role"] != "assistant" or i < first_trained:
                    continue
                prefixes += turn_span(vocab, messages, i, full)
        except TemplateError as e:
            raise UserError(f"{n}: chat template: {one_line(e)}")
        except UserError as e:
            raise UserError(f"{n}: {e}")
        plans.append((n, len(texts), len(prefixes) // 2))
        texts.append(full)
        texts += [None if t == full else t for t in prefixes]
    encoded = vocab.encode_batch([t for t in texts if t is not None], special=False)
    it = iter(encoded)
    encoded = [next(it) if t is not None else None for t in texts]
    straddling = 0
    for n, base, turns in plans:
        ids = encoded[base]
        weights = np.zeros(len(ids), dtype=np.float32)
        for k in range(turns):
            start_ids, end_ids = encoded[base + 1 + 2 * k], encoded[base + 2 + 2 * k]
            end_ids = ids if end_ids is None else end_ids
            s, e = prefix_length(start_ids, ids), prefix_length(end_ids, ids)
            straddling += (s != len(start_ids)) + (e != len(end_ids))
            weights[s:e] = 1.0
        by_row[n] = (ids, weights)

    examples = []
    for n, _ in parsed:
        ids, weights = by_row[n]
        if len(ids) < 2:
            raise UserError(f"{n}: the example is {len(ids)} token long; a row needs at "
                            "least 2 (an input and a target)")
        examples.append((ids, weights))
    return examples, straddling


def tokenize_batch(vocab, batch, fmt, fields, roles=None):
    """One batch from prepare.sources → (ids int32, weights float32, offsets int64, straddling):
    example k is ids[offsets[k]:offsets[k+1]]. Runs in a worker; raises UserError "<where>: ..."."""
    parsed = []
    for where, item in batch.rows():
        try:
            parsed.append((where, parse_record(decode(item) if batch.raw else item, fmt, fields, roles)))
        except UserError as e:
            raise UserError(f"{where}: {e}")
    examples, straddling = tokenize(vocab, parsed)
    lengths = [len(ids) for ids, _ in examples]
    offsets = np.zeros(len(examples) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(e for e, _ in examples), dtype=np.int32,
                      count=int(offsets[-1]))
    weights = np.concatenate([np.asarray(w, dtype=np.float32) for _, w in examples]) if examples else \
        np.zeros(0, dtype=np.float32)
    return ids, weights, offsets, straddling


# What work() tokenizes with, set before the workers fork (prepare.parallel): vocab, format, fields,
# roles.
WORK = {}


def work(batch):
    return tokenize_batch(WORK["vocab"], batch, WORK["format"], WORK["fields"], WORK.get("roles"))


def decode(raw):
    """A JSONL line (bytes) → its JSON value; UserError for bad UTF-8 or JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"invalid UTF-8 at byte {e.start + 1}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"invalid JSON: {e.msg} at column {e.colno}")
