"""Chat templates rendered with jinja2 directly, the way transformers' apply_chat_template renders
them (same sandbox, options, filters and globals), with no private transformers API: a template from
a downloaded tokenizer is untrusted input, so it runs in jinja2's ImmutableSandboxedEnvironment and
cannot reach Python internals (`__class__`, `__subclasses__`, ...). Errors are prepare.errors.UserError
with one line that names what failed: a sandbox violation, a template error, or a feature (tag,
filter, test, global) that the installed jinja2/transformers does not have."""
import json
import re
from datetime import datetime

from prepare.errors import UserError, one_line

# Globals that chat templates take from transformers, and the release that added each.
TRANSFORMERS_GLOBALS = {"strftime_now": "4.45"}


def versions():
    import jinja2
    try:
        import transformers
        return f"jinja2 {jinja2.__version__}, transformers {transformers.__version__}"
    except ImportError:
        return f"jinja2 {jinja2.__version__}"


def environment(with_strftime):
    """The environment transformers compiles chat templates in: ImmutableSandboxedEnvironment with
    trim_blocks, lstrip_blocks, loop controls, `{% generation %}` blocks (rendered as their body),
    a tojson that does not escape HTML, raise_exception, strftime_now (where the installed
    transformers defines it), and dict/namespace that refuse underscore names."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = {"generation"}  # TRL's assistant-mask marker: renders its body unchanged

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store underscore names on a namespace, got {name!r}")

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    if with_strftime:
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def explain(e, source):
    """One line for a jinja2 error raised by the template of `source` (compiling or rendering)."""
    import jinja2.exceptions as jx
    text = one_line(e)
    where = f"chat template ({source})"
    line = f" line {e.lineno}:" if getattr(e, "lineno", None) else ""
    if isinstance(e, jx.SecurityError):
        return f"{where}: refused by the sandbox: {text}"
    m = re.search(r"unknown tag '([^']+)'", text)
    if m:
        return (f"{where}:{line} uses the tag '{m[1]}', which this renderer does not have ({versions()}); "
                "a newer jinja2 or transformers may")
    m = re.match(r"No (filter|test) named '([^']+)'", text)
    if m:
        return (f"{where}:{line} uses the {m[1]} '{m[2]}', which the installed jinja2 does not have "
                f"({versions()}); a newer jinja2 or transformers may")
    m = re.match(r"'([A-Za-z_]\w*)' is undefined", text)
    if m and m[1] in TRANSFORMERS_GLOBALS:
        return (f"{where}: uses '{m[1]}', which chat templates get from transformers >= "
                f"{TRANSFORMERS_GLOBALS[m[1]]} ({versions()} installed)")
    return f"{where}:{line} {text}"


class ChatTemplate:
    """A compiled template; render(messages, generation_prompt, special) is apply_chat_template's
    text (tokenize=False) for plain {"role", "content"} messages."""

    def __init__(self, text, source, with_strftime):
        import jinja2.exceptions as jx
        self.source = source
        self.error = None  # a template that does not compile fails the first render, not the load
        try:
            self.compiled = environment(with_strftime).from_string(text)
        except jx.TemplateError as e:
            self.compiled, self.error = None, explain(e, source)

    def render(self, messages, generation_prompt, special):
        import jinja2.exceptions as jx
        if self.error:
            raise UserError(self.error)
        try:
            return self.compiled.render(messages=messages, tools=None, documents=None,
                                        add_generation_prompt=generation_prompt, **special)
        except jx.TemplateError as e:
            raise UserError(explain(e, self.source))
        except (TypeError, ValueError, AttributeError, IndexError, KeyError, RecursionError) as e:
            raise UserError(f"chat template ({self.source}): {type(e).__name__}: {one_line(e)}")
