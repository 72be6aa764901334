"""scripts/resource_report/ptxas.py — what the compiler says of each function: ptxas -v's report (registers, shared
memory, stack frame, spills), its PTX (calls, vector accesses, 64-bit divisions), the cubin's constant banks (ELF
sections) and the demangled names."""
import os
import re
import shutil
import struct
import subprocess

from resource_report.compiling import find_nvcc


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
VECTOR_ACCESS = re.compile(r"\b(?:ld|st)\.global(?:\.[\w:]+)*?\.v[24]\.")
DIV64 = re.compile(r"\b(?:div|rem)(?:\.\w+)*?\.[us]64\b")


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
