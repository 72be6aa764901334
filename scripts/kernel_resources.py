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

Python 3 standard library only; tests/integration/test_kernel_resources.py tests the parsing and runs it. This file is
the command, the file list, the checks and the report; the reading is scripts/resource_report/ (compiling.py,
ptxas.py, names.py, source.py, occupancy.py), whose names are this module's too (kernel_resources.block_of, ...).
"""
import argparse
import concurrent.futures
import datetime
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # scripts/: resource_report beside this file
from resource_report import ROOT  # noqa: E402
from resource_report.compiling import compile_file, compile_flags, find_nvcc, mpi_include_dirs  # noqa: E402
from resource_report.occupancy import SM90, occupancy  # noqa: E402
from resource_report.names import base_name, short_name, split_top, template_args  # noqa: E402
from resource_report.ptxas import (DIV64, VECTOR_ACCESS, constant_banks, demangle, elf_sections,  # noqa: E402
                                   parse_ptxas, ptx_functions, ptx_of)
from resource_report.source import (BLOCK_TABLE, SIZEOF, Unresolved, block_of, constants,  # noqa: E402
                                    definitions_in, evaluate, kernel_definitions, launches, literal,
                                    namespaces_at, project_includes, strip_comments)

__all__ = ["ROOT", "compile_file", "compile_flags", "find_nvcc", "mpi_include_dirs", "SM90", "occupancy",
           "base_name", "constant_banks", "demangle", "elf_sections", "parse_ptxas", "ptx_functions", "ptx_of",
           "short_name", "template_args", "BLOCK_TABLE", "SIZEOF", "Unresolved", "block_of", "constants",
           "definitions_in", "evaluate", "kernel_definitions", "launches", "literal", "namespaces_at",
           "project_includes", "split_top", "strip_comments", "SOURCE_DIRS", "TENSOR_CORE_FILES",
           "VECTORISED_KERNELS", "ASSUMPTIONS", "source_files", "analyse", "run", "problems", "report", "main"]

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

ASSUMPTIONS = (
    "Occupancy as CUDA's occupancy calculator (cuda_occupancy.h) computes it for an H100 SXM (compute "
    "capability 9.0): 65536 registers per SM in 4 sub-partitions, allocated per warp in units of 256 "
    "(at most 255 per thread, 65536 per block); 64 warps and 32 blocks per SM; shared memory per block = "
    "static + dynamic + 1 KiB reserved, rounded up to 128 bytes, out of the largest carveout (228 KiB per "
    "SM, 227 KiB per block). Warps/SM = resident blocks × warps per block, where the block size is known "
    "(else: what registers alone allow). Dynamic shared memory counts where the launch's size is a "
    "compile-time expression; no cluster, L1 or launch-rate effects.")


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
        row = dict(f, mangled=mangled, name=short, file=rel, vector_ptx=len(VECTOR_ACCESS.findall(body)),
                   div64_ptx=len(DIV64.findall(body)))
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
