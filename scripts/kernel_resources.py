#!/usr/bin/env python3
"""scripts/kernel_resources.py — the compiler's resource report for every CUDA kernel of sft-dp on an H100
(sm_90), without a GPU: each .cu file of kernels/cuda/ and src/comm/ compiled as the project's CUDA build
does (CMakeLists.txt's flags for its target, -arch=sm_90; -cubin: the device half of its -c) with
`-Xptxas -v --keep` (the PTX: the tensor-core files' mma.sync, the memory-bound kernels' vector accesses
and 64-bit divisions), ptxas's per-function report parsed (registers, static shared memory, stack frame,
spill stores/loads), constant banks read from the cubin's ELF sections, names demangled (cu++filt, else
c++filt), and the occupancy each kernel allows computed as CUDA's occupancy calculator (cuda_occupancy.h)
does for compute capability 9.0.
Block sizes come from each kernel's launch (SFTDP_LAUNCH in its file, constants resolved from the
file and the project headers it includes), from BLOCK_TABLE where the launch picks it at run time
(checked against the launch's text), or from __launch_bounds__.

  python3 scripts/kernel_resources.py            # the markdown table on stdout
  python3 scripts/kernel_resources.py --write    # and bench/results/kernels_sm90_<date>.md
  python3 scripts/kernel_resources.py --check    # exit 1 on local memory, spills, a stale table, a
                                                 # tensor-core file without mma, or a training-path memory-
                                                 # bound kernel (VECTORISED_KERNELS) without vector accesses
                                                 # or with a 64-bit division (what the CTest checks)

Python 3 standard library only; tests/integration/test_kernel_resources.py tests the parsing and runs it.
"""
import argparse
import ast
import concurrent.futures
import datetime
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_DIRS = ("kernels/cuda", "src/comm")
# Files whose kernels run on tensor cores: their PTX must hold mma.sync.
TENSOR_CORE_FILES = ("kernels/cuda/attention/tensor_cores.cu",)

# The training path's memory-bound kernels (issue 34 item 3), each tied to its file: every instance's PTX
# must move global memory in vectors (ld/st.global....v4 or .v2: 16- or 8-byte accesses, kernels/cuda/vec.cuh)
# and hold no 64-bit integer division or remainder (div/rem .u64/.s64: a long subroutine on the GPU). A
# kernel renamed or removed fails the check until this list says so.
VECTORISED_KERNELS = {
    "adamw_kernel": "kernels/cuda/adamw.cu",
    "adamw_step_kernel": "kernels/cuda/adamw.cu",
    "fp32_to_bf16_kernel": "kernels/cuda/cast.cu",
    "bf16_to_fp32_kernel": "kernels/cuda/cast.cu",
    "encoder_fwd_kernel": "kernels/cuda/encoder.cu",
    "copy_rows_kernel": "kernels/cuda/gather.cu",
    "gelu_fwd_kernel": "kernels/cuda/gelu.cu",
    "gelu_bwd_kernel": "kernels/cuda/gelu.cu",
    "add_bias_kernel": "kernels/cuda/gemm.cu",
    "lora_dropout_kernel": "kernels/cuda/lora.cu",
    "partial_sums_kernel": "kernels/cuda/reduce.cu",
    "column_partials_kernel": "kernels/cuda/reduce.cu",
    "residual_fwd_kernel": "kernels/cuda/residual.cu",
    "rope_kernel": "kernels/cuda/rope.cu",
    "swiglu_fwd_kernel": "kernels/cuda/swiglu.cu",
    "swiglu_bwd_kernel": "kernels/cuda/swiglu.cu",
}

# ---- the H100 SXM (compute capability 9.0) as CUDA's occupancy calculator models it ------------------
SM90 = dict(
    regs_per_sm=65536,
    regs_per_block=65536,
    reg_granularity=256,  # registers are allocated per warp, in units of 256
    max_regs_per_thread=255,
    sub_partitions=4,  # the register file is split in 4; a warp's registers come from one part
    max_warps_per_sm=64,
    max_blocks_per_sm=32,
    smem_per_sm=228 * 1024,  # the largest carveout
    max_smem_per_block=227 * 1024,
    reserved_smem_per_block=1024,
    smem_granularity=128,
    max_threads_per_block=1024,
)
ASSUMPTIONS = (
    "Occupancy as CUDA's occupancy calculator (cuda_occupancy.h) computes it for an H100 SXM (compute "
    "capability 9.0): 65536 registers per SM in 4 sub-partitions, allocated per warp in units of 256 "
    "(at most 255 per thread, 65536 per block); 64 warps and 32 blocks per SM; shared memory per block = "
    "static + dynamic + 1 KiB reserved, rounded up to 128 bytes, out of the largest carveout (228 KiB per "
    "SM, 227 KiB per block). Warps/SM = resident blocks × warps per block, where the block size is known "
    "(else: what registers alone allow). Dynamic shared memory counts where the launch's size is a "
    "compile-time expression; no cluster, L1 or launch-rate effects.")

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


# ---- compiling ---------------------------------------------------------------------------------------
def find_nvcc():
    """nvcc as CMakeLists.txt finds it: on PATH, else /usr/local/cuda/bin/nvcc; None if neither."""
    for cand in (os.environ.get("SFTDP_NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def mpi_include_dirs():
    """The MPI C++ compiler's include directories (src/comm includes mpi.h), as CMake's FindMPI sees them."""
    for cmd in (["mpicxx", "--showme:incdirs"], ["mpicxx", "-show"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        if cmd[1] == "--showme:incdirs" and out.strip():
            return out.split()
        dirs = [tok[2:] for tok in out.split() if tok.startswith("-I")]
        if dirs:
            return dirs
    return []


def compile_flags(rel, nvcc):
    """nvcc's arguments for one file, as the project's CUDA build compiles it (CMakeLists.txt:
    sftdp_kernels_cuda for kernels/cuda, sftdp_core for src/comm), for sm_90."""
    cuda_inc = os.path.join(os.path.dirname(os.path.dirname(nvcc)), "include")
    common = ["-O3", "-DNDEBUG", "-arch=sm_90", "-std=c++20", "-lineinfo", "-Xcompiler=-Wall,-Wextra"]
    if rel.startswith("src/comm/"):
        return (["-DSFTDP_WITH_CUDA=1", "-Iinclude", "-I.", "-Isrc", f"-isystem={cuda_inc}"] +
                [f"-isystem={d}" for d in mpi_include_dirs()] + common)
    return ["-Iinclude", "-I.", f"-isystem={cuda_inc}", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC"] + common


def compile_file(rel, nvcc, root=ROOT, output="cubin"):
    """Compiles one file with -Xptxas -v --keep: (exit status, ptxas's report and errors, PTX text, cubin
    bytes or None). output "cubin" (-cubin) runs the build's front end, cicc and ptxas with its flags and
    stops there: the same device code and report as "object" (-c, the build's own step), without the host
    compile, which takes most of -c's time (tests/integration/test_kernel_resources.py compares the two)."""
    with tempfile.TemporaryDirectory(prefix="sftdp_res_") as tmp:
        base = os.path.splitext(os.path.basename(rel))[0]
        out = os.path.join(tmp, base + (".sm_90.cubin" if output == "cubin" else ".o"))
        cmd = [nvcc] + compile_flags(rel, nvcc) + ["-Xptxas", "-v", "--keep", f"--keep-dir={tmp}",
                                                  "-cubin" if output == "cubin" else "-c", rel, "-o", out]
        p = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        ptx = cubin = None
        if os.path.exists(os.path.join(tmp, base + ".ptx")):
            with open(os.path.join(tmp, base + ".ptx")) as f:
                ptx = f.read()
        if os.path.exists(os.path.join(tmp, base + ".sm_90.cubin")):
            with open(os.path.join(tmp, base + ".sm_90.cubin"), "rb") as f:
                cubin = f.read()
        return p.returncode, p.stdout + p.stderr, ptx, cubin


# ---- parsing ptxas -v ----------------------------------------------------------------------------------
_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_BARRIERS = re.compile(r"used (\d+) barriers")
_GMEM = re.compile(r"ptxas info\s*: (\d+) bytes gmem")


def parse_ptxas(text):
    """ptxas -v's report → {"functions": {mangled: {...}}, "gmem": bytes}. Each function: kernel (an entry
    function), regs, smem (static), stack, spill_st, spill_ld, barriers, cmem {bank: bytes}. Device
    functions ptxas kept as calls (not inlined) appear with kernel False."""
    funcs, gmem, current, entry = {}, 0, None, None
    for line in text.splitlines():
        if m := _GMEM.search(line):
            gmem += int(m.group(1))
        elif m := _ENTRY.search(line):
            entry = m.group(1)
        elif m := _PROPS.search(line):
            current = m.group(1)
            funcs.setdefault(current, dict(kernel=current == entry, regs=None, smem=0, stack=0, spill_st=0,
                                           spill_ld=0, barriers=0, cmem={}))
        elif (m := _FRAME.search(line)) and current:
            f = funcs[current]
            f["stack"], f["spill_st"], f["spill_ld"] = (int(g) for g in m.groups())
        elif (m := _USED.search(line)) and current:
            f = funcs[current]
            f["regs"] = int(m.group(1))
            if s := _SMEM.search(line):
                f["smem"] = int(s.group(1))
            if b := _BARRIERS.search(line):
                f["barriers"] = int(b.group(1))
            for size, bank in _CMEM.findall(line):
                f["cmem"][int(bank)] = int(size)
    return {"functions": funcs, "gmem": gmem}


# ---- parsing the PTX ------------------------------------------------------------------------------------
_PTX_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\(", re.M)
_PTX_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([\w$]+)")
_VECTOR_ACCESS = re.compile(r"\b(?:ld|st)\.global(?:\.[\w:]+)*?\.v[24]\.")
_DIV64 = re.compile(r"\b(?:div|rem)(?:\.\w+)*?\.[us]64\b")


def ptx_functions(ptx):
    """{name: body} of every .entry and .func the PTX defines (a declaration without a body is left out)."""
    out = {}
    for m in _PTX_FUNC.finditer(ptx or ""):
        i, depth = m.end(), 1
        while depth and i < len(ptx):  # the parameter list
            depth += {"(": 1, ")": -1}.get(ptx[i], 0)
            i += 1
        j = i
        while j < len(ptx) and ptx[j] not in "{;":
            j += 1
        if j >= len(ptx) or ptx[j] == ";":
            continue
        depth, k = 1, j + 1
        while depth and k < len(ptx):
            depth += {"{": 1, "}": -1}.get(ptx[k], 0)
            k += 1
        out[m.group(2)] = ptx[j:k]
    return out


def ptx_of(functions, name):
    """The PTX a kernel runs: its body and those of the functions it calls, transitively."""
    seen, todo, text = set(), [name], []
    while todo:
        f = todo.pop()
        if f in seen or f not in functions:
            continue
        seen.add(f)
        text.append(functions[f])
        todo += _PTX_CALL.findall(functions[f])
    return "\n".join(text)


def elf_sections(data):
    """{section name: size} of a little-endian ELF64 file (a cubin)."""
    if not data or data[:4] != b"\x7fELF" or data[4] != 2:
        return {}
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    out = {}
    for name_off, _type, _flags, _addr, _off, size in headers:
        start = strtab + name_off
        out[data[start:data.index(b"\0", start)].decode()] = size
    return out


def constant_banks(sections):
    """The cubin's constant banks: ({function: {bank: bytes}}, {bank: bytes} shared by the file, e.g.
    __constant__ data). Bank 0 of a kernel is its parameters plus the driver's own constants."""
    per_func, shared = {}, {}
    for name, size in sections.items():
        m = re.fullmatch(r"\.nv\.constant(\d+)(?:\.(.+))?", name)
        if not m:
            continue
        if m.group(2):
            per_func.setdefault(m.group(2), {})[int(m.group(1))] = size
        else:
            shared[int(m.group(1))] = size
    return per_func, shared


def demangle(names):
    """{mangled: demangled} by cu++filt (the CUDA toolkit's) or c++filt; names left as they are if neither."""
    names = sorted(set(names))
    for tool in (os.path.join(os.path.dirname(find_nvcc() or "/usr/local/cuda/bin/nvcc"), "cu++filt"),
                 shutil.which("cu++filt"), shutil.which("c++filt")):
        if not tool or not os.path.exists(tool):
            continue
        p = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True)
        out = p.stdout.splitlines()
        if p.returncode == 0 and len(out) == len(names):
            return dict(zip(names, out))
    return {n: n for n in names}


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


# ---- the launches and constants in the source ------------------------------------------------------
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


# ---- occupancy -----------------------------------------------------------------------------------------
def occupancy(regs, smem_static, block=None, smem_dynamic=0, gpu=SM90):
    """(warps per SM, limiting resources): CUDA's occupancy calculator for one kernel. Without a block
    size, the warps registers alone allow."""
    def round_up(x, g):
        return (x + g - 1) // g * g
    regs = max(regs or 0, 1)
    regs_per_warp = round_up(regs * 32, gpu["reg_granularity"])
    warps_by_regs = gpu["regs_per_sm"] // gpu["sub_partitions"] // regs_per_warp * gpu["sub_partitions"]
    if regs > gpu["max_regs_per_thread"]:
        warps_by_regs = 0
    if block is None:
        w = min(warps_by_regs, gpu["max_warps_per_sm"])
        return w, ["registers" if warps_by_regs < gpu["max_warps_per_sm"] else "warps"]
    warps = -(-block // 32)
    limits = {}
    limits["warps"] = gpu["max_warps_per_sm"] // warps if block <= gpu["max_threads_per_block"] else 0
    limits["blocks"] = gpu["max_blocks_per_sm"]
    fits_regs = (regs_per_warp * round_up(warps, gpu["sub_partitions"]) <= gpu["regs_per_block"])
    limits["registers"] = warps_by_regs // warps if fits_regs else 0
    smem = (smem_static or 0) + (smem_dynamic or 0)
    per_block = round_up(smem + gpu["reserved_smem_per_block"], gpu["smem_granularity"])
    limits["shared memory"] = gpu["smem_per_sm"] // per_block if smem <= gpu["max_smem_per_block"] else 0
    blocks = min(limits.values())
    return blocks * warps, [k for k, v in limits.items() if v == blocks]


# ---- the report ----------------------------------------------------------------------------------------
def source_files(root=ROOT):
    """Every .cu file under SOURCE_DIRS, subfolders included (kernels/cuda/attention/)."""
    out = []
    for d in SOURCE_DIRS:
        for at, dirs, names in sorted(os.walk(os.path.join(root, d))):
            dirs.sort()
            rel = os.path.relpath(at, root)
            out += [f"{rel}/{n}" for n in sorted(names) if n.endswith(".cu")]
    return out


def analyse(rel, status, text, ptx, cubin, root=ROOT):
    """One file's rows and facts from its compile: {"file", "status", "log", "gmem", "kernels": [...],
    "device_functions": [...], "mma_ptx": count, "const_shared": {bank: bytes}}."""
    parsed = parse_ptxas(text)
    per_func, shared = constant_banks(elf_sections(cubin))
    out = dict(file=rel, status=status, log=text, gmem=parsed["gmem"], kernels=[], device_functions=[],
               mma_ptx=len(re.findall(r"\bmma\.sync\b", ptx or "")), ptx=ptx is not None, const_shared=shared)
    names = demangle(parsed["functions"])
    functions = ptx_functions(ptx)
    for mangled, f in parsed["functions"].items():
        short = short_name(names[mangled])
        body = ptx_of(functions, mangled)
        row = dict(f, mangled=mangled, name=short, file=rel, vector_ptx=len(_VECTOR_ACCESS.findall(body)),
                   div64_ptx=len(_DIV64.findall(body)))
        for bank, size in per_func.get(mangled, {}).items():
            row["cmem"].setdefault(bank, size)
        if f["kernel"]:
            row["block"], row["smem_dynamic"], row["block_from"], row["problem"] = block_of(short, rel, root)
            row["warps"], row["limit"] = occupancy(f["regs"], f["smem"], row["block"], row["smem_dynamic"] or 0)
            out["kernels"].append(row)
        else:
            out["device_functions"].append(row)
    out["kernels"].sort(key=lambda r: r["name"])
    return out


def run(files=None, nvcc=None, jobs=None, root=ROOT):
    """Compiles and analyses every file (in parallel): [analyse(...) per file], in file order."""
    nvcc = nvcc or find_nvcc()
    files = source_files(root) if files is None else files
    jobs = jobs or os.cpu_count() or 2
    order = sorted(files, key=lambda rel: -os.path.getsize(os.path.join(root, rel)))  # the longest first
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        compiled = dict(zip(order, pool.map(lambda rel: compile_file(rel, nvcc, root), order)))
    return [analyse(rel, *compiled[rel], root=root) for rel in files]


def problems(results, tensor_core_files=TENSOR_CORE_FILES, root=ROOT, vectorised_kernels=None):
    """What the CTest fails on, one line each: a file that does not compile, local memory (a stack frame)
    or spills in any function, a block size the report cannot tie to its launch, a tensor-core file
    missing or without mma.sync in its PTX, and a kernel of VECTORISED_KERNELS (or `vectorised_kernels`)
    whose file is missing, which its file no longer defines, or an instance of which has no vector global
    access or a 64-bit division in its PTX (files that exist but were not compiled, in a run on some files
    only, are not checked)."""
    vectorised_kernels = VECTORISED_KERNELS if vectorised_kernels is None else vectorised_kernels
    out = []
    for r in results:
        if r["status"] != 0:
            out.append(f"{r['file']}: nvcc failed (exit {r['status']}):\n{r['log'][-2000:]}")
        for f in r["kernels"] + r["device_functions"]:
            what = "kernel" if f["kernel"] else "device function"
            if f["stack"] or f["spill_st"] or f["spill_ld"]:
                out.append(f"{r['file']}: {what} {f['name']}: {f['stack']} bytes stack frame (local memory), "
                           f"{f['spill_st']} bytes spill stores, {f['spill_ld']} bytes spill loads")
            if f.get("problem"):
                out.append(f"{r['file']}: {f['problem']}")
    by_file = {r["file"]: r for r in results}
    for rel in tensor_core_files:
        if not os.path.exists(os.path.join(root, rel)):
            out.append(f"{rel}: tensor-core file missing")
        elif rel not in by_file:
            out.append(f"{rel}: tensor-core file not among the files compiled")
        elif by_file[rel]["status"] == 0 and not by_file[rel]["mma_ptx"]:
            out.append(f"{rel}: tensor-core file without an mma.sync instruction in its PTX")
    for name, rel in vectorised_kernels.items():
        if not os.path.exists(os.path.join(root, rel)):
            out.append(f"{rel}: missing, but VECTORISED_KERNELS lists its kernel {name}")
            continue
        if rel not in by_file or by_file[rel]["status"] != 0:
            continue  # not compiled in this run, or its failed compile is reported above
        instances = [k for k in by_file[rel]["kernels"] if base_name(k["name"]) == name]
        if not instances:
            out.append(f"{rel}: no kernel {name}, which VECTORISED_KERNELS lists (renamed or removed? update the "
                       f"list)")
        for k in instances:
            if not k.get("vector_ptx"):
                out.append(f"{rel}: kernel {k['name']}: no vector global access (ld/st.global .v4/.v2) in its PTX "
                           f"(a training-path memory-bound kernel: VECTORISED_KERNELS)")
            if k.get("div64_ptx"):
                out.append(f"{rel}: kernel {k['name']}: {k['div64_ptx']} 64-bit integer division(s) (div/rem "
                           f".u64/.s64) in its PTX (a training-path memory-bound kernel: VECTORISED_KERNELS)")
    return list(dict.fromkeys(out))  # one line per problem, not per template instance


def nvcc_version(nvcc):
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return out[-2].strip() if len(out) >= 2 else (out[0] if out else "unknown")


def cmem_text(cmem):
    return " ".join(f"c{b}:{s}" for b, s in sorted(cmem.items())) or "-"


def table(results):
    lines = ["| kernel | file | registers | static smem (B) | stack (B) | spill st/ld (B) | cmem (B) | block "
             "(from) | warps/SM (limit) |",
             "|---|---|---:|---:|---:|---:|---|---|---|"]
    for r in results:
        for k in r["kernels"]:
            smem = str(k["smem"])
            if k["smem_dynamic"] is None:
                smem += " + dynamic (not a constant)"
            elif k["smem_dynamic"]:
                smem += f" + {k['smem_dynamic']} dynamic"
            block = f"{k['block']} ({k['block_from']})" if k["block"] else f"? ({k['block_from']})"
            warps = f"{k['warps']} ({', '.join(k['limit'])})" if k["block"] else f"≤ {k['warps']} (registers alone)"
            lines.append(f"| `{k['name']}` | {r['file']} | {k['regs']} | {smem} | {k['stack']} | "
                         f"{k['spill_st']}/{k['spill_ld']} | {cmem_text(k['cmem'])} | {block} | {warps} |")
        for d in r["device_functions"]:
            lines.append(f"| `{d['name']}` (device function, called) | {r['file']} | - | - | {d['stack']} | "
                         f"{d['spill_st']}/{d['spill_ld']} | - | - | - |")
    return "\n".join(lines)


def report(results, nvcc, elapsed=None, root=ROOT):
    cuda_inc, mpi_incs = os.path.join(os.path.dirname(os.path.dirname(nvcc)), "include"), mpi_include_dirs()

    def shown(flag):  # no machine's paths in the results: the toolkit's and MPI's include dirs by name
        if flag == f"-isystem={cuda_inc}":
            return "-isystem=<CUDA>/include"
        return "-isystem=<mpicxx --showme:incdirs>" if flag.startswith("-isystem=") and flag[9:] in mpi_incs else flag
    rel_flags = {d: " ".join(dict.fromkeys(shown(f) for f in compile_flags(d + "/x.cu", nvcc))) for d in SOURCE_DIRS}
    files = ", ".join(f"`{r['file']}`" for r in results)
    notes = []
    for r in results:
        if r["gmem"]:
            notes.append(f"- {r['file']}: {r['gmem']} bytes of global data (ptxas: gmem)")
        if r["const_shared"]:
            notes.append(f"- {r['file']}: file-wide constant banks {cmem_text(r['const_shared'])}")
        if r["file"] in TENSOR_CORE_FILES:
            notes.append(f"- {r['file']} (tensor cores): {r['mma_ptx']} mma.sync instructions in its PTX")
        vectorised = [f"`{k['name']}` {k.get('vector_ptx', 0)}" for k in r["kernels"]
                      if VECTORISED_KERNELS.get(base_name(k["name"])) == r["file"]]
        if vectorised:
            notes.append(f"- {r['file']}: vector global accesses in the PTX of its VECTORISED_KERNELS: "
                         + ", ".join(vectorised))
    probs = problems(results, root=root)
    head = [
        f"# CUDA kernels' resources on sm_90 (H100), {datetime.date.today().isoformat()}",
        "",
        f"Made by `python3 scripts/kernel_resources.py --write`, without a GPU: ptxas's report (`-Xptxas -v`) of "
        f"every kernel of {files}, compiled as the project's CUDA build does, and the occupancy it allows.",
        "",
        f"- nvcc: {nvcc_version(nvcc)}",
        f"- flags, kernels/cuda (sftdp_kernels_cuda): `nvcc {rel_flags['kernels/cuda']} -Xptxas -v -cubin`",
        f"- flags, src/comm (sftdp_core): `nvcc {rel_flags['src/comm']} -Xptxas -v -cubin`",
        "- `-cubin` where the build has `-c`: the same front end, cicc and ptxas with the same flags, without the "
        "host compile (the same report; the CTest compares the two on one file)",
        f"- {ASSUMPTIONS}",
        "- cmem: the cubin's constant banks per kernel (c0: the parameters and the driver's constants).",
        "- block: the launch's block size and where it comes from (the `SFTDP_LAUNCH` line; a run-time choice "
        "is the largest it can be, from the script's BLOCK_TABLE, checked against the launch's text).",
    ]
    if elapsed is not None:
        head.append(f"- compile and analysis took {elapsed:.0f} s on {os.cpu_count()} cores")
    body = ["", table(results), ""]
    if notes:
        body += ["Per file:", ""] + notes + [""]
    body += ["Problems (local memory, spills, block sizes, tensor-core files, vectorised kernels): " +
             ("none" if not probs else ""),
             ""] + [f"- {p}" for p in probs]
    return "\n".join(head + body).rstrip() + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="also write bench/results/kernels_sm90_<date>.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if problems() finds anything")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: all cores)")
    ap.add_argument("--root", default=ROOT, help="the source tree (default: this checkout)")
    ap.add_argument("files", nargs="*", help="files relative to the root (default: every .cu of "
                    + " and ".join(SOURCE_DIRS) + ")")
    args = ap.parse_args(argv)
    nvcc = find_nvcc()
    if not nvcc:
        print("kernel_resources: nvcc not found (PATH, /usr/local/cuda/bin)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    results = run(args.files or None, nvcc, args.jobs, os.path.abspath(args.root))
    text = report(results, nvcc, time.monotonic() - t0, os.path.abspath(args.root))
    print(text, end="")
    if args.write:
        path = os.path.join(ROOT, "bench", "results", f"kernels_sm90_{datetime.date.today().isoformat()}.md")
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(path, ROOT)}", file=sys.stderr)
    if args.check:
        probs = problems(results, root=os.path.abspath(args.root))
        for p in probs:
            print(f"kernel_resources: {p}", file=sys.stderr)
        return 1 if probs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
