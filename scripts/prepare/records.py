"""One input row (a JSONL object or a Parquet/Arrow row as a dict) → what to tokenize, in TRL's
dataset formats, with a column mapping (--messages-field, --prompt-field, --completion-field,
--text-field):
  ("pair", prompt, completion)       prompt/completion strings: loss on the completion and EOS
  ("chat", messages, first_trained)  messages (or conversational prompt/completion: prompt + completion
                                     lists, first_trained = len(prompt)): loss on the assistant turns
                                     at index >= first_trained
  ("text", text)                     language modelling (TRL's dataset_text_field): loss on every token
A turn is {"role", "content"} (OpenAI/TRL) or ShareGPT's {"from", "value"}; a row without a
"messages" column may hold its turns in ShareGPT's "conversations" (the sharegpt field). ShareGPT's
human/gpt/system/tool become user/assistant/system/tool; --roles from=to maps other names (and
renames roles of either form). Errors are UserError naming the field, without file or row (the
caller adds them)."""
from prepare.errors import UserError

FORMATS = ("auto", "prompt_completion", "chat", "text")
DEFAULT_FIELDS = {"messages": "messages", "prompt": "prompt", "completion": "completion", "text": "text",
                  "sharegpt": "conversations"}
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "tool": "tool"}


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


def messages_of(value, field, roles=None):
    """A list of {"role", "content"} dicts, checked; extra keys of a turn are dropped. Turns may be
    ShareGPT's {"from", "value"}; roles maps role names (--roles)."""
    if not isinstance(value, list) or not value:
        raise UserError(f'"{field}" must be a non-empty array of {{"role", "content"}} or ShareGPT '
                        '{"from", "value"} turns')
    roles = roles or {}
    out = []
    for i, turn in enumerate(value):
        where = f"{field}[{i}]: "
        if not isinstance(turn, dict):
            raise UserError(f'{where}must be an object {{"role", "content"}}, found {json_type(turn)}')
        if "role" in turn or "content" in turn:
            role = string_field(turn, "role", where)
            out.append({"role": roles.get(role, role), "content": string_field(turn, "content", where)})
        elif "from" in turn or "value" in turn:
            name = string_field(turn, "from", where)
            role = roles.get(name, SHAREGPT_ROLES.get(name))
            if role is None:
                raise UserError(f'{where}ShareGPT role "{name}" is not one of '
                                f'{", ".join(k for k in SHAREGPT_ROLES if k not in ("user", "assistant"))}'
                                f'; map it with --roles {name}=user|assistant|system|tool')
            out.append({"role": role, "content": string_field(turn, "value", where)})
        else:
            keys = ", ".join(f'"{k}"' for k in list(turn)[:6]) or "none"
            raise UserError(f'{where}expected {{"role", "content"}} or ShareGPT {{"from", "value"}}, '
                            f"found keys {keys}")
    return out


def _missing_fields(obj, f_prompt, f_comp, f_msg, f_share, f_text):
    keys = [k for k in obj if obj[k] is not None]
    shown = ", ".join(f'"{k}"' for k in keys[:8]) + (", ..." if len(keys) > 8 else "") or "no fields"
    hint = ""
    for p, c in (("instruction", "output"), ("question", "answer"), ("input", "output"), ("query", "response")):
        if p in obj and c in obj:
            hint = f" (e.g. --prompt-field {p} --completion-field {c})"
            break
    share = f', {{"{f_share}": [...]}} (ShareGPT)' if f_share != f_msg else ""
    return UserError(f'missing fields: the row has {shown}; expected {{"{f_prompt}", "{f_comp}"}}, '
                     f'{{"{f_msg}": [...]}}{share} or {{"{f_text}"}}: name the columns with '
                     f"--prompt-field/--completion-field, --messages-field or --text-field{hint}")


def parse_record(obj, fmt, fields, roles=None):
    """The tuple above for one row; fields maps messages/prompt/completion/text/sharegpt to column
    names; roles: the --roles mapping."""
    if not isinstance(obj, dict):
        raise UserError(f"expected a JSON object, found {json_type(obj)}")
    has = lambda column: column in obj and obj[column] is not None
    f_msg, f_prompt, f_comp, f_text = (fields[k] for k in ("messages", "prompt", "completion", "text"))
    f_share = fields.get("sharegpt", f_msg)
    if not has(f_msg) and has(f_share):
        f_msg = f_share  # ShareGPT's column
    pair = has(f_prompt) or has(f_comp)
    chat = has(f_msg)
    text = has(f_text)
    if fmt == "auto":
        if pair and chat:
            raise UserError(f'has both "{f_msg}" and "{f_prompt}"/"{f_comp}"; use one form per row '
                            "(or --format prompt_completion|chat)")
        fmt = "chat" if chat else "prompt_completion" if pair else "text" if text else None
        if fmt is None:
            raise _missing_fields(obj, f_prompt, f_comp, f_msg, f_share, f_text)
    elif fmt == "prompt_completion" and chat and not pair:
        raise UserError(f'has "{f_msg}" but --format prompt_completion expects "{f_prompt}"/"{f_comp}"')
    elif fmt == "chat" and pair and not chat:
        raise UserError(f'has "{f_prompt}"/"{f_comp}" but --format chat expects "{f_msg}"')

    if fmt == "chat":
        if not has(f_msg):
            raise UserError(f'missing "{f_msg}"')
        messages = messages_of(obj[f_msg], f_msg, roles)
        if not any(t["role"] == "assistant" for t in messages):
            raise UserError(f'"{f_msg}" has no assistant turn: nothing to train on')
        return ("chat", messages, 0)
    if fmt == "text":
        return ("text", string_field(obj, f_text))
    # prompt/completion: strings, or conversational (lists of messages, TRL)
    prompt, completion = obj.get(f_prompt), obj.get(f_comp)
    if isinstance(prompt, list) or isinstance(completion, list):
        p = messages_of(prompt, f_prompt, roles) if prompt is not None else None
        c = messages_of(completion, f_comp, roles) if completion is not None else None
        if p is None or c is None:
            raise UserError(f'missing "{f_prompt if p is None else f_comp}"')
        if not any(t["role"] == "assistant" for t in c):
            raise UserError(f'"{f_comp}" has no assistant turn: nothing to train on')
        return ("chat", p + c, len(p))
    return ("pair", string_field(obj, f_prompt), string_field(obj, f_comp))
