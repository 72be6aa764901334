"""scripts/resource_report/source.py — each kernel's block size and dynamic shared memory read from its source: its
SFTDP_LAUNCH calls, __launch_bounds__, and the constexpr constants of its file and of the project headers it includes
(evaluated), or BLOCK_TABLE where the launch picks the block size at run time."""
import ast
import os
import re

from resource_report import ROOT
from resource_report.names import base_name, split_top, template_args

# Kernels whose launch picks the block size at run time: the launch's block argument as written (the
# report fails if the source says otherwise), the largest value as an expression of the file's
# constants, and why.
BLOCK_TABLE = {
    "attention_fwd_kernel": ("warps * kWarp", "kWarps * kWarp", "fewer warps for short T (block_warps)"),
    "attention_bwd_dq_kernel": ("q_warps * kWarp", "kWarps * kWarp", "fewer warps for short T (block_warps)"),
    "attention_bwd_dkv_kernel": ("k_warps * kWarp", "kWarps * kWarp", "fewer warps for short T (block_warps)"),
}

SIZEOF = {"float": 4, "double": 8, "int": 4, "int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8,
          "size_t": 8, "bf16": 2, "__nv_bfloat16": 2, "half": 2, "__half": 2, "char": 1, "uint16_t": 2,
          "float2": 8, "float4": 16, "int4": 16, "uint4": 16}


# ---- the launches and constants in the source ------------------------------------------------------
def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def launches(src):
    """SFTDP_LAUNCH(kernel, grid, block, smem, stream, ...) calls: [(kernel expression, block, smem, line,
    offset)]."""
    out = []
    for m in re.finditer(r"\bSFTDP_LAUNCH\s*\(", src):
        depth, i = 1, m.end()
        while depth and i < len(src):
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        args = [" ".join(a.split()) for a in split_top(src[m.end():i - 1])]
        if len(args) >= 5:
            out.append((args[0], args[2], args[3], src.count("\n", 0, m.start()) + 1, m.start()))
    return out


def kernel_definitions(src):
    """{kernel: (template parameter names, __launch_bounds__ arguments or None)} of __global__ functions."""
    out = {}
    pat = re.compile(r"(?:template\s*<([^<>]*(?:<[^<>]*>[^<>]*)*)>\s*)?__global__\s+void\s+"
                     r"(?:__launch_bounds__\s*\(([^)]*)\)\s*)?(\w+)\s*\(")
    for m in pat.finditer(src):
        params = [p.split()[-1] for p in split_top(m.group(1))] if m.group(1) else []
        bounds = [b.strip() for b in m.group(2).split(",")] if m.group(2) else None
        out[m.group(3)] = (params, bounds)
    return out


def definitions_in(path, root, seen=None):
    """kernel_definitions of a file and of the project headers it includes, recursively (a .cu whose kernels are
    written in headers of its own: kernels/cuda/attention/tensor_cores.cu and its tc_*.cuh)."""
    seen = set() if seen is None else seen
    if path in seen:
        return {}
    seen.add(path)
    with open(path) as f:
        src = strip_comments(f.read())
    out = {}
    for inc in project_includes(src, root):
        out.update(definitions_in(inc, root, seen))
    out.update(kernel_definitions(src))
    return out


def project_includes(src, root):
    return [os.path.join(root, inc) for inc in re.findall(r'#include\s+"([^"]+)"', src)
            if os.path.exists(os.path.join(root, inc))]


def namespaces_at(src):
    """A function pos → the names of the namespaces enclosing that offset of `src` (comments stripped)."""
    events, stack = [], []
    for m in re.finditer(r"\bnamespace\s+([\w:]+)?\s*\{|[{}]", src):
        if m.group(0) == "}":
            if stack:
                stack.pop()
        else:
            stack.append(m.group(1).split("::") if m.group(0).startswith("namespace") and m.group(1) else [])
        events.append((m.end(), [n for part in stack for n in part]))

    def at(pos):
        current = []
        for end, names in events:
            if end > pos:
                break
            current = names
        return current
    return at


def constants(path, root, seen=None):
    """constexpr definitions of the file and of the project headers it includes (recursively):
    {name: [(expression, enclosing namespaces), ...]} and constexpr functions without arguments
    {name: (template parameter names, return expression)}."""
    seen = set() if seen is None else seen
    names, funcs = {}, {}
    if path in seen:
        return names, funcs
    seen.add(path)
    with open(path) as f:
        src = strip_comments(f.read())
    ns_at = namespaces_at(src)
    for m in re.finditer(r"\bconstexpr\s+(?:[\w:]+\s+)+?(\w+\s*=[^;{}]+);", src):
        for decl in split_top(m.group(1)):
            if "=" in decl:
                name, expr = decl.split("=", 1)
                names.setdefault(name.strip(), []).append((expr.strip(), tuple(ns_at(m.start()))))
    for m in re.finditer(r"template\s*<([^<>]*)>\s*constexpr\s+[\w:]+\s+(\w+)\s*\(\s*\)\s*\{"
                         r"\s*return\s+([^;]+);\s*\}", src):
        funcs[m.group(2)] = ([p.split()[-1] for p in split_top(m.group(1))], m.group(3))
    for inc in project_includes(src, root):
        n2, f2 = constants(inc, root, seen)
        for k, v in n2.items():
            names.setdefault(k, []).extend(v)
        funcs.update(f2)
    return names, funcs


def lookup(qualified, names, scope):
    """(expression, its namespaces) of the one definition a constant's name means where it is used
    (inside namespaces `scope`): `a::x` among definitions in a namespace a, a plain name among those of
    the enclosing namespaces, the innermost; Unresolved if there is none or they disagree (e.g. two
    functions' local constants of one name)."""
    *quals, name = qualified.split("::")
    defs = names.get(name, [])
    if quals:
        defs = [d for d in defs if d[1][len(d[1]) - len(quals):] == tuple(quals)]
    else:
        defs = [d for d in defs if d[1] == tuple(scope[:len(d[1])])]
        deepest = max((len(d[1]) for d in defs), default=0)
        defs = [d for d in defs if len(d[1]) == deepest]
    if len({d[0] for d in defs}) != 1:
        raise Unresolved(qualified)
    return defs[0]


class Unresolved(Exception):
    pass


def evaluate(expr, names, funcs, bound, scope=(), depth=0):
    """The integer value of a C++ constant expression made of literals, constants (names), sizeof of
    known types, constexpr functions without arguments and + - * / ( ), dim3(x, y, z) being x·y·z;
    `bound` gives template parameters' values, `scope` the namespaces the expression sits in. Unresolved
    if anything else is met."""
    if depth > 20:
        raise Unresolved(expr)
    e = " ".join(expr.split())
    m = re.fullmatch(r"dim3\((.*)\)", e)
    if m:
        value = 1
        for part in split_top(m.group(1)):
            value *= evaluate(part, names, funcs, bound, scope, depth + 1)
        return value
    e = re.sub(r"static_cast<[^<>]*>", "", e)
    e = re.sub(r"\b(?:size_t|int|unsigned)\{([^{}]*)\}", r"(\1)", e)
    e = re.sub(r"\bsizeof\((\w+)\)", lambda m: str(SIZEOF[m.group(1)]) if m.group(1) in SIZEOF else "?", e)

    def call(m):  # f<ARGS>() of a constexpr function
        params, body = funcs.get(m.group(1), (None, None))
        if body is None:
            raise Unresolved(m.group(0))
        args = [evaluate(a, names, funcs, bound, scope, depth + 1) for a in split_top(m.group(2))] if m.group(2) else []
        return str(evaluate(body, names, funcs, dict(bound, **dict(zip(params, args))), scope, depth + 1))

    e = re.sub(r"\b(\w+)(?:<([^<>]*)>)?\(\)", call, e)
    qualified = {}

    def qualify(m):  # ns::x → one Python name, looked up with its namespaces
        key = f"_q{len(qualified)}"
        qualified[key] = m.group(0)
        return key
    e = re.sub(r"\b(?:\w+::)+\w+", qualify, e)
    e = re.sub(r"(\d+)[uUlL]+\b", r"\1", e)
    try:
        tree = ast.parse(e, mode="eval")
    except SyntaxError:
        raise Unresolved(expr) from None

    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in bound:
                return bound[node.id]
            if node.id in ("true", "false"):
                return int(node.id == "true")
            definition, where = lookup(qualified.get(node.id, node.id), names, scope)
            return evaluate(definition, names, funcs, bound, where, depth + 1)
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
            a, b = value(node.left), value(node.right)
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op), a // b if b else 0)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise Unresolved(expr)

    return value(tree)


def literal(text):
    """The value of an integer or bool template argument, else None."""
    if text in ("true", "false"):
        return int(text == "true")
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def block_of(kernel_short, rel, root=ROOT):
    """(threads per block or None, dynamic shared memory bytes or None, where that comes from, a problem
    or None) for one kernel instance, from its launches in `rel`. The instance's template arguments
    (from its name) give values to the kernel's template parameters and to the names the launch passes
    as template arguments (`kernel<HS>` in a launcher templated on HS)."""
    with open(os.path.join(root, rel)) as f:
        src = strip_comments(f.read())
    names, funcs = constants(os.path.join(root, rel), root)
    base, args = base_name(kernel_short), template_args(kernel_short)
    params, bounds = definitions_in(os.path.join(root, rel), root).get(base, ([], None))
    sites = [l for l in launches(src) if base_name(l[0]) == base]
    bound = {}
    for name_list in [params] + [template_args(l[0]) for l in sites]:
        for name, a in zip(name_list, args):
            if re.fullmatch(r"[A-Za-z_]\w*", name) and literal(a) is not None:
                bound[name] = literal(a)
    ns_at = namespaces_at(src)
    scope = tuple(ns_at(sites[0][4])) if sites else ()
    launch_bound = None
    if bounds:
        try:
            launch_bound = evaluate(bounds[0], names, funcs, bound, scope)
        except Unresolved:
            pass
    if not sites:
        if launch_bound:
            return launch_bound, 0, f"__launch_bounds__({bounds[0]})", None
        return None, None, f"no SFTDP_LAUNCH in {rel}", None
    problem, blocks, smems, lines = None, [], [], ", ".join(f"{os.path.basename(rel)}:{l[3]}" for l in sites)
    for _kernel, text, smem_text, line, pos in sites:
        scope = tuple(ns_at(pos))
        if base in BLOCK_TABLE:
            written, largest, why = BLOCK_TABLE[base]
            if text != written:
                problem = (f"BLOCK_TABLE[{base!r}] says the launch at {rel}:{line} reads {written!r}, the source "
                           f"reads {text!r}: update the table")
                continue
            try:
                blocks.append((evaluate(largest, names, funcs, bound, scope), f"≤ {largest}, {why}"))
            except Unresolved as e:
                problem = f"BLOCK_TABLE[{base!r}]: cannot evaluate {largest!r} ({e})"
        else:
            try:
                blocks.append((evaluate(text, names, funcs, bound, scope), text))
            except Unresolved:
                if launch_bound:
                    blocks.append((launch_bound, f"__launch_bounds__({bounds[0]})"))
                else:
                    problem = (f"the block size of {base} at {rel}:{line} ({text!r}) is not a compile-time "
                               f"constant: add it to BLOCK_TABLE")
        try:
            smems.append(evaluate(smem_text, names, funcs, bound, scope))
        except Unresolved:
            smems.append(None)
    if not blocks:
        return None, None, lines, problem
    block = max(b for b, _ in blocks)
    if launch_bound and block > launch_bound:
        problem = f"{base} is launched with {block} threads, above its __launch_bounds__({launch_bound})"
    smem = None if None in smems else max(smems)
    return block, smem, f"{blocks[0][1]}; {lines}", problem
