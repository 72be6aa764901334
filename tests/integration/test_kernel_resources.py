"""The compiler's resource report (scripts/kernel_resources.py) as a test: no kernel or called device
function of kernels/cuda/ and src/comm/ uses local memory (a stack frame) or spills registers, every
kernel's block size is tied to its launch, each tensor-core file (kernels/cuda/attention/tensor_cores.cu)
exists and holds mma.sync in its PTX, and every training-path memory-bound kernel the script lists
(VECTORISED_KERNELS) is still defined in its file, moves global memory in vectors (.v4/.v2) and divides no
64-bit integer (div/rem .u64/.s64) in its PTX. First the report's parts on canned inputs: ptxas's output
with a planted stack frame and spill (reported with kernel, file and bytes), PTX with and without vector
accesses and with a 64-bit division in the kernel and in a function it calls, the occupancy arithmetic on
hand-worked cases, the constants a launch's block size is read from. The compiling tests need nvcc and
are skipped, saying so, only where it is absent (CI always has it); none runs sanitized code
(scripts/test.sh leaves this file out of its ASan run)."""
import importlib.util
import os
import time

import pytest

SOURCE = os.environ.get("SFTDP_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("kernel_resources",
                                               os.path.join(SOURCE, "scripts", "kernel_resources.py"))
kr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kr)

# ptxas -v of nvcc 13.0 on a file with a clean kernel, a kernel whose per-thread array is indexed at run
# time (stack frame and spills), and a device function ptxas kept as a call, with a stack frame.
CANNED_PTXAS = """\
ptxas info    : 272 bytes gmem
ptxas info    : Compiling entry function '_Z10uses_constPf' for 'sm_90'
ptxas info    : Function properties for _Z10uses_constPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 1056 bytes smem
ptxas info    : Compile time = 7.126 ms
ptxas info    : Compiling entry function '_Z12spill_kernelPfPKfi' for 'sm_90'
ptxas info    : Function properties for _Z12spill_kernelPfPKfi
    624 bytes stack frame, 388 bytes spill stores, 440 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 624 bytes cumulative stack size, 400 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 37.848 ms
ptxas info    : Function properties for __internal_trig_reduction_slowpathd
    40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
CANNED_SOURCE = """\
#include "kernels/cuda/common.cuh"
namespace other {
constexpr int kBlock = 1000;  // another namespace's: not the one the launch sees
}
namespace sftdp::cuda {
namespace {
constexpr int kBlock = 128;
__global__ void uses_const(float* out) { out[threadIdx.x] = 1.f; }
__global__ void __launch_bounds__(1024, 2) spill_kernel(float* out, const float* in, int n) { }
}  // namespace
void launch(cudaStream_t stream) {
  SFTDP_LAUNCH(uses_const, 1, dim3(kWarp, 2), 0, stream, nullptr);
  SFTDP_LAUNCH(spill_kernel, 4, kBlock, 0, stream, nullptr, nullptr, 3);
}
}  // namespace sftdp::cuda
"""

# The PTX of the same two kernels: uses_const moves memory in vectors (and divides doubles, which is fine);
# spill_kernel loads scalars (a shared-memory vector is not a global access), divides a 64-bit integer and
# calls a function that takes a 64-bit remainder; a declaration without a body is not a function.
CANNED_PTX = """\
.version 8.8
.target sm_90
.address_size 64

.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.func  (.param .b64 func_retval0) _Z10div_helpermm(
	.param .b64 _Z10div_helpermm_param_0,
	.param .b64 _Z10div_helpermm_param_1
)
{
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [_Z10div_helpermm_param_0];
	ld.param.u64 	%rd2, [_Z10div_helpermm_param_1];
	rem.u64 	%rd3, %rd1, %rd2;
	st.param.b64 	[func_retval0], %rd3;
	ret;
}

.visible .entry _Z10uses_constPf(
	.param .u64 _Z10uses_constPf_param_0
)
{
	ld.global.nc.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd2];
	st.global.wb.v4.s32 	[%rd3], {%r1, %r2, %r3, %r4};
	div.rn.f64 	%fd3, %fd1, %fd2;
	ret;
}

.entry _Z12spill_kernelPfPKfi(
	.param .u64 _Z12spill_kernelPfPKfi_param_0,
	.param .u64 _Z12spill_kernelPfPKfi_param_1,
	.param .u32 _Z12spill_kernelPfPKfi_param_2
)
{
	ld.global.f32 	%f1, [%rd1];
	ld.shared.v4.f32 	{%f1, %f2, %f3, %f4}, [%r1];
	div.u64 	%rd5, %rd3, %rd4;
	{ // callseq 0, 0
	.param .b64 param0;
	.param .b64 retval0;
	call.uni (retval0), _Z10div_helpermm, (param0, param1);
	}
	st.global.f32 	[%rd2], %f1;
	ret;
}
"""

@pytest.fixture
def canned_root(tmp_path):
    """A source tree with the canned kernel file and the project's common.cuh (kWarp = 32)."""
    (tmp_path / "kernels" / "cuda").mkdir(parents=True)
    (tmp_path / "kernels" / "cuda" / "canned.cu").write_text(CANNED_SOURCE)
    with open(os.path.join(SOURCE, "kernels", "cuda", "common.cuh")) as f:
        (tmp_path / "kernels" / "cuda" / "common.cuh").write_text(f.read())
    return str(tmp_path)


def test_ptxas_report_is_read_per_function():
    parsed = kr.parse_ptxas(CANNED_PTXAS)
    f = parsed["functions"]
    assert parsed["gmem"] == 272
    assert f["_Z10uses_constPf"] == dict(kernel=True, regs=10, smem=1056, stack=0, spill_st=0, spill_ld=0,
                                         barriers=0, cmem={})
    assert f["_Z12spill_kernelPfPKfi"] == dict(kernel=True, regs=32, smem=0, stack=624, spill_st=388, spill_ld=440,
                                               barriers=0, cmem={0: 400, 2: 8})
    slow = f["__internal_trig_reduction_slowpathd"]
    assert not slow["kernel"] and slow["stack"] == 40 and slow["regs"] is None


def test_planted_stack_frame_and_spills_are_reported_with_kernel_file_and_bytes(canned_root):
    result = kr.analyse("kernels/cuda/canned.cu", 0, CANNED_PTXAS, ptx="", cubin=None, root=canned_root)
    assert [k["name"] for k in result["kernels"]] == ["spill_kernel", "uses_const"]  # demangled, sorted
    problems = kr.problems([result], tensor_core_files=(), root=canned_root, vectorised_kernels={})
    assert problems == [
        "kernels/cuda/canned.cu: kernel spill_kernel: 624 bytes stack frame (local memory), 388 bytes spill "
        "stores, 440 bytes spill loads",
        "kernels/cuda/canned.cu: device function __internal_trig_reduction_slowpathd: 40 bytes stack frame "
        "(local memory), 0 bytes spill stores, 0 bytes spill loads"]
    clean = dict(result, kernels=[k for k in result["kernels"] if k["name"] == "uses_const"], device_functions=[])
    assert kr.problems([clean], tensor_core_files=(), root=canned_root, vectorised_kernels={}) == []
    assert kr.problems([dict(clean, status=1, log="error: x")], tensor_core_files=(), root=canned_root,
                       vectorised_kernels={}) == [
        "kernels/cuda/canned.cu: nvcc failed (exit 1):\nerror: x"]


def test_ptx_is_read_per_function_with_the_functions_it_calls():
    functions = kr.ptx_functions(CANNED_PTX)
    assert sorted(functions) == ["_Z10div_helpermm", "_Z10uses_constPf", "_Z12spill_kernelPfPKfi"]  # no vprintf
    assert "rem.u64" in functions["_Z10div_helpermm"] and "rem.u64" not in functions["_Z12spill_kernelPfPKfi"]
    assert "rem.u64" in kr.ptx_of(functions, "_Z12spill_kernelPfPKfi")  # through the call
    assert "div.rn.f64" in kr.ptx_of(functions, "_Z10uses_constPf")


def test_a_listed_kernel_without_vectors_with_a_64bit_division_renamed_or_gone_is_reported(canned_root):
    result = kr.analyse("kernels/cuda/canned.cu", 0, CANNED_PTXAS, ptx=CANNED_PTX, cubin=None, root=canned_root)
    rows = {k["name"]: k for k in result["kernels"]}
    assert (rows["uses_const"]["vector_ptx"], rows["uses_const"]["div64_ptx"]) == (2, 0)  # div.rn.f64 is no integer
    assert (rows["spill_kernel"]["vector_ptx"], rows["spill_kernel"]["div64_ptx"]) == (0, 2)

    def listed(vectorised):
        return [p for p in kr.problems([result], tensor_core_files=(), root=canned_root,
                                       vectorised_kernels=vectorised) if "VECTORISED_KERNELS" in p]
    assert listed({"uses_const": "kernels/cuda/canned.cu"}) == []
    assert listed({"spill_kernel": "kernels/cuda/canned.cu"}) == [
        "kernels/cuda/canned.cu: kernel spill_kernel: no vector global access (ld/st.global .v4/.v2) in its PTX "
        "(a training-path memory-bound kernel: VECTORISED_KERNELS)",
        "kernels/cuda/canned.cu: kernel spill_kernel: 2 64-bit integer division(s) (div/rem .u64/.s64) in its PTX "
        "(a training-path memory-bound kernel: VECTORISED_KERNELS)"]
    assert listed({"renamed_kernel": "kernels/cuda/canned.cu"}) == [
        "kernels/cuda/canned.cu: no kernel renamed_kernel, which VECTORISED_KERNELS lists (renamed or removed? "
        "update the list)"]
    assert listed({"gone_kernel": "kernels/cuda/gone.cu"}) == [
        "kernels/cuda/gone.cu: missing, but VECTORISED_KERNELS lists its kernel gone_kernel"]
    # a file that exists but was not compiled in this run (a run on some files only) is not checked
    assert listed({"some_kernel": "kernels/cuda/common.cuh"}) == []
    # without a PTX (nvcc kept none) a listed kernel has no vector access
    no_ptx = kr.analyse("kernels/cuda/canned.cu", 0, CANNED_PTXAS, ptx=None, cubin=None, root=canned_root)
    assert any("uses_const: no vector global access" in p for p in kr.problems(
        [no_ptx], tensor_core_files=(), root=canned_root, vectorised_kernels={"uses_const": "kernels/cuda/canned.cu"}))


def test_every_listed_vectorised_kernel_is_defined_in_its_file():
    for name, rel in kr.VECTORISED_KERNELS.items():
        path = os.path.join(SOURCE, rel)
        assert os.path.exists(path), f"VECTORISED_KERNELS: {rel} (of {name}) does not exist"
        with open(path) as f:
            assert name in kr.kernel_definitions(kr.strip_comments(f.read())), f"{rel} defines no kernel {name}"


def test_block_sizes_come_from_the_launch_and_its_constants(canned_root):
    result = kr.analyse("kernels/cuda/canned.cu", 0, CANNED_PTXAS, ptx="", cubin=None, root=canned_root)
    rows = {k["name"]: k for k in result["kernels"]}
    # dim3(kWarp, 2): kWarp from the included common.cuh
    assert (rows["uses_const"]["block"], rows["uses_const"]["block_from"]) == (64, "dim3(kWarp, 2); canned.cu:12")
    assert rows["spill_kernel"]["block"] == 128 and rows["spill_kernel"]["problem"] is None
    assert rows["spill_kernel"]["smem_dynamic"] == 0
    # 32 registers, 4 warps per block: registers allow 64 warps, the SM's warp slots 16 blocks = 64 warps
    assert (rows["spill_kernel"]["warps"], rows["spill_kernel"]["limit"]) == (64, ["warps", "registers"])


def test_a_run_time_block_size_needs_the_table_and_the_table_must_match_the_launch(canned_root, monkeypatch):
    path = os.path.join(canned_root, "kernels", "cuda", "canned.cu")
    with open(path, "w") as f:
        f.write(CANNED_SOURCE.replace("1, dim3(kWarp, 2), 0", "1, warps * kWarp, 0").replace("4, kBlock, 0",
                                                                                          "4, threads, 0"))
    block, _, _, problem = kr.block_of("uses_const", "kernels/cuda/canned.cu", canned_root)
    assert block is None and problem == ("the block size of uses_const at kernels/cuda/canned.cu:12 ('warps * "
                                         "kWarp') is not a compile-time constant: add it to BLOCK_TABLE")
    block, _, where, problem = kr.block_of("spill_kernel", "kernels/cuda/canned.cu", canned_root)
    assert (block, where, problem) == (1024, "__launch_bounds__(1024); canned.cu:13", None)  # the bound, at most
    monkeypatch.setitem(kr.BLOCK_TABLE, "uses_const", ("warps * kWarp", "4 * kWarp", "up to 4 warps"))
    block, _, where, problem = kr.block_of("uses_const", "kernels/cuda/canned.cu", canned_root)
    assert (block, where, problem) == (128, "≤ 4 * kWarp, up to 4 warps; canned.cu:12", None)
    monkeypatch.setitem(kr.BLOCK_TABLE, "uses_const", ("nwarps * kWarp", "4 * kWarp", "stale"))
    _, _, _, problem = kr.block_of("uses_const", "kernels/cuda/canned.cu", canned_root)
    assert "reads 'nwarps * kWarp', the source reads 'warps * kWarp': update the table" in problem
    with open(path, "w") as f:  # more threads than __launch_bounds__ allows
        f.write(CANNED_SOURCE.replace("4, kBlock, 0", "4, 2048, 0"))
    _, _, _, problem = kr.block_of("spill_kernel", "kernels/cuda/canned.cu", canned_root)
    assert problem == "spill_kernel is launched with 2048 threads, above its __launch_bounds__(1024)"


def test_constant_expressions():
    cuda = ("sftdp", "cuda")
    names = {"kA": [("8", cuda)], "kB": [("kA * 4 + 1", cuda)],
             "kTile": [("64", ("sftdp", "attention_bf16")), ("attention_bf16::kTile", cuda)],
             "kTwice": [("1", cuda), ("2", cuda)], "kOuter": [("3", ()), ("5", ("other",))]}
    funcs = {"smem": (["HS"], "2 * size_t{kTile} * (HS + 8) * sizeof(float)")}
    assert kr.evaluate("dim3(kA, kB)", names, {}, {}, cuda) == 8 * 33
    assert kr.evaluate("kTile", names, {}, {}, cuda) == 64  # this namespace's kTile is attention_bf16::kTile
    assert kr.evaluate("smem<HS>()", names, funcs, {"HS": 64}, cuda) == 2 * 64 * 72 * 4
    assert kr.evaluate("static_cast<unsigned>(kA) / 3", names, {}, {}, cuda) == 2
    assert kr.evaluate("kOuter", names, {}, {}, cuda) == 3  # the global one: `other` does not enclose the use
    for bad in ("kTwice", "kMissing", "elementwise_blocks(n, kA)", "sizeof(Unknown)"):
        with pytest.raises(kr.Unresolved):
            kr.evaluate(bad, names, funcs, {}, cuda)
    with pytest.raises(kr.Unresolved):  # kA lives in sftdp::cuda, not seen from the global namespace
        kr.evaluate("kA", names, {}, {}, ())


def test_occupancy_as_cuda_computes_it_for_sm90():
    assert kr.occupancy(64, 0, 256) == (32, ["registers"])        # 2048 registers per warp: 8 per quarter
    assert kr.occupancy(255, 0, 128) == (8, ["registers"])        # 8192 per warp: 2 per quarter
    assert kr.occupancy(32, 48 * 1024, 256) == (32, ["shared memory"])  # 49 KiB per block: 4 blocks
    assert kr.occupancy(32, 0, 32) == (32, ["blocks"])            # 32 blocks of one warp
    assert kr.occupancy(16, 0, 1024) == (64, ["warps"])
    assert kr.occupancy(128, 0, 1024) == (0, ["registers"])       # 131072 registers: not launchable
    assert kr.occupancy(32, 200 * 1024, 128, 28 * 1024) == (0, ["shared memory"])  # over 227 KiB per block
    assert kr.occupancy(40, 0) == (48, ["registers"])             # no block size: registers alone


def test_names_are_demangled_and_shortened():
    mangled = "_ZN5sftdp4cuda12_GLOBAL__N_120attention_fwd_kernelILb1EEEvPfS3_PKfPKiiiii"
    demangled = kr.demangle([mangled])[mangled]
    assert kr.short_name(demangled) == "attention_fwd_kernel<true>", demangled
    assert kr.short_name("void sftdp::cuda::(anonymous namespace)::k<sftdp::cuda::(anonymous namespace)::"
                         "Config<false, 8> >(float*, int)") == "k<Config<false, 8>>"
    assert kr.template_args("k<Config<false, 8>, 64>") == ["Config<false, 8>", "64"]


def test_a_tensor_core_file_missing_or_without_mma_is_reported(canned_root):
    result = kr.analyse("kernels/cuda/canned.cu", 0, "", ptx="wmma.load.a.sync\n", cubin=None, root=canned_root)
    assert kr.problems([result], tensor_core_files=("kernels/cuda/canned.cu",), root=canned_root,
                       vectorised_kernels={}) == [
        "kernels/cuda/canned.cu: tensor-core file without an mma.sync instruction in its PTX"]
    with_mma = dict(result, mma_ptx=1)
    assert kr.problems([with_mma], tensor_core_files=("kernels/cuda/canned.cu",), root=canned_root,
                       vectorised_kernels={}) == []
    assert kr.problems([with_mma], tensor_core_files=("kernels/cuda/gone_tc.cu",), root=canned_root,
                       vectorised_kernels={}) == [
        "kernels/cuda/gone_tc.cu: tensor-core file missing"]


# ---- the real kernels, compiled ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nvcc():
    path = kr.find_nvcc()
    if not path:
        pytest.skip("nvcc not found (PATH, /usr/local/cuda/bin/nvcc): the compiler's resource report needs it")
    return path


@pytest.fixture(scope="module")
def report(nvcc, note):
    t0 = time.monotonic()
    results = kr.run(nvcc=nvcc, root=SOURCE)
    kernels = sum(len(r["kernels"]) for r in results)
    note(f"kernel_resources: {len(results)} files, {kernels} kernels compiled and read in "
         f"{time.monotonic() - t0:.0f} s")
    return results, kr.problems(results, root=SOURCE)


def test_no_kernel_uses_local_memory_or_spills(report):
    results, problems = report
    assert [r["file"] for r in results if r["file"].startswith("kernels/cuda/")], "no kernel file compiled"
    bad = [p for p in problems if "stack frame" in p or "nvcc failed" in p]
    assert not bad, "local memory, spills or a failed compile:\n" + "\n".join(bad)


def test_tensor_core_files_hold_mma_instructions(report):
    _, problems = report
    bad = [p for p in problems if "tensor-core" in p]
    assert not bad, "\n".join(bad)


def test_training_path_memory_bound_kernels_move_vectors_and_divide_no_64bit_integer(report):
    results, problems = report
    bad = [p for p in problems if "VECTORISED_KERNELS" in p]
    assert not bad, "\n".join(bad)
    compiled = {(r["file"], kr.base_name(k["name"])) for r in results for k in r["kernels"]}
    assert {(rel, name) for name, rel in kr.VECTORISED_KERNELS.items()} <= compiled


def test_every_block_size_is_tied_to_its_launch(report):
    _, problems = report
    bad = [p for p in problems if "stack frame" not in p and "nvcc failed" not in p and "tensor-core" not in p
           and "VECTORISED_KERNELS" not in p]
    assert not bad, "\n".join(bad)


def test_the_cubin_report_is_the_object_files_report(nvcc):
    """The report compiles with -cubin, the build with -c: the same device code and ptxas report."""
    rel = "kernels/cuda/rope.cu"
    cubin, obj = (kr.compile_file(rel, nvcc, SOURCE, output) for output in ("cubin", "object"))
    assert cubin[0] == 0 and obj[0] == 0, cubin[1] + obj[1]
    assert kr.parse_ptxas(cubin[1]) == kr.parse_ptxas(obj[1])
    assert kr.parse_ptxas(cubin[1])["functions"], "no function in the report"
