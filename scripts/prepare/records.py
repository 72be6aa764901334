"""One input row (a JSONL object or a Parquet/Arrow row as a dict) → what to tokenize, in TRL's
dataset formats, with a column mapping (--messages-field, --prompt-field, --completion-field,
--text-field):
  ("pair", prompt, completion)       prompt/completion strings: loss on the completion and EOS
  ("chat", messages, first_trained)  messages (or conversational prompt/completion: prompt + completion
                                     lists, first_trained = len(prompt)): loss on the assistant turns
                                     at index >= first_trained
  ("text", text)                     language modelling (TRL's dataset_text_field): loss on every token
Errors are UserError naming the field, without file or row (the caller adds them)."""
from prepare.errors import UserError

FORMATS = ("auto", "prompt_completion", "chat", "text")
DEFAULT_FIELDS = {"messages": "messages", "prompt": "prompt", "completion": "completion", "text": "text"}


def json_type(v):
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(v), type(v).__name__)


def string_field(obj, key, where=""):
    if key not in obj or obj[key] is None:
        raise UserError(f'{where}missing "{key}"')
    v = obj[key]
    if not isinstance(v, str):
        raise UserError(f'{where}"{key}" must be a string, found {json_type(v)}')
    return v


def messages_of(value, field):
    """A list of {"role", "content"} dicts, checked; extra keys of a turn are dropped."""
    if not isinstance(value, list) or not value:
        raise UserError(f'"{field}" must be a non-empty array of {{"role", "content"}}')
    out = []
    for i, turn in enumerate(value):
        where = f"{field}[{i}]: "
        if not isinstance(turn, dict):
            raise UserError(f'{where}must be an object {{"role", "content"}}, found {json_type(turn)}')
        out.append({"role": string_field(turn, "role", where),
                    "content": string_field(turn, "content", where)})
    return out


def parse_record(obj, fmt, fields):
    """The tuple above for one row; fields maps messages/prompt/completion/text to column names."""
    if not isinstance(obj, dict):
        raise UserError(f"expected a JSON object, found {json_type(obj)}")
    has = lambda role: fields[role] in obj and obj[fields[role]] is not None
    f_msg, f_prompt, f_comp, f_text = (fields[k] for k in ("messages", "prompt", "completion", "text"))
    pair = has("prompt") or has("completion")
    chat = has("messages")
    text = has("text")
    if fmt == "auto":
        if pair and chat:
            raise UserError(f'has both "{f_msg}" and "{f_prompt}"/"{f_comp}"; use one form per row')
        fmt = "chat" if chat else "prompt_completion" if pair else "text" if text else None
        if fmt is None:
            raise UserError(f'missing fields: expected {{"{f_prompt}", "{f_comp}"}} or '
                            f'{{"{f_msg}": [...]}} or {{"{f_text}"}}')
    elif fmt == "prompt_completion" and chat and not pair:
        raise UserError(f'has "{f_msg}" but --format prompt_completion expects "{f_prompt}"/"{f_comp}"')
    elif fmt == "chat" and pair and not chat:
        raise UserError(f'has "{f_prompt}"/"{f_comp}" but --format chat expects "{f_msg}"')

    if fmt == "chat":
        if not has("messages"):
            raise UserError(f'missing "{f_msg}"')
        messages = messages_of(obj[f_msg], f_msg)
        if not any(t["role"] == "assistant" for t in messages):
            raise UserError(f'"{f_msg}" has no assistant turn: nothing to train on')
        return ("chat", messages, 0)
    if fmt == "text":
        return ("text", string_field(obj, f_text))
    # prompt/completion: strings, or conversational (lists of messages, TRL)
    prompt, completion = obj.get(f_prompt), obj.get(f_comp)
    if isinstance(prompt, list) or isinstance(completion, list):
        p = messages_of(prompt, f_prompt) if prompt is not None else None
        c = messages_of(completion, f_comp) if completion is not None else None
        if p is None or c is None:
            raise UserError(f'missing "{f_prompt if p is None else f_comp}"')
        if not any(t["role"] == "assistant" for t in c):
            raise UserError(f'"{f_comp}" has no assistant turn: nothing to train on')
        return ("chat", p + c, len(p))
    return ("pair", string_field(obj, f_prompt), string_field(obj, f_comp))
