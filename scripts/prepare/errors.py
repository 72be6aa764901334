"""The one error kind of scripts/sft_prepare_hf.py: bad usage or input (exit 2, one `error:` line,
nothing written)."""


class UserError(Exception):
    pass


def one_line(e):
    text = " ".join(str(e).split())
    return text if len(text) < 300 else text[:297] + "..."
