"""scripts/resource_report/compiling.py — one .cu file compiled as the project's CUDA build compiles it, for sm_90,
with ptxas's report and the PTX kept."""
import os
import shutil
import subprocess
import tempfile

from resource_report import ROOT


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
