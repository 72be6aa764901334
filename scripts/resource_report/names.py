"""scripts/resource_report/names.py — kernel names and template arguments as text: the short name of a demangled
function, its base name, its top-level template arguments, a top-level split."""
import re


def split_top(text, sep=","):
    """Splits at top-level separators (outside (), [], {} and <> that follow an identifier)."""
    parts, depth, cur, angle = [], 0, [], 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
            angle += 1
        elif ch == ">" and angle > 0:
            angle -= 1
        if ch == sep and depth == 0 and angle == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def short_name(demangled):
    """'void sftdp::cuda::(anonymous namespace)::k<sftdp::cuda::(anonymous namespace)::C<false, 8> >(float*)'
    → 'k<C<false, 8>>': no return type, namespaces or parameters."""
    s = demangled
    if s.endswith(")"):  # drop the parameter list: the last top-level parenthesis
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    s = re.sub(r"^void ", "", s)
    s = s.replace("(anonymous namespace)::", "")
    s = re.sub(r"\b(?:[A-Za-z_]\w*::)+", "", s)
    return s.replace("> >", ">>").replace("> >", ">>")


def base_name(short):
    """The kernel's identifier, without template arguments."""
    return re.match(r"[A-Za-z_]\w*", short).group(0)


def template_args(short):
    """Top-level template arguments of a short name: 'k<64, true>' → ['64', 'true']."""
    if "<" not in short:
        return []
    inner = short[short.index("<") + 1:short.rindex(">")]
    return [a.strip() for a in split_top(inner)]
