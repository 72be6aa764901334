"""The profile mode (issue 34, item 1): with SFTDP_GPU_PROFILE=<path>, bench/gpu_step_record times every device
operation of one trainer step with cudaEvents (kernels/cuda/profile.cuh), tagged as the CUDA simulator's record
tags it, and bench/gpu_cost.py --profile joins that profile with the record of the same step and its prediction.
Proven here on the simulator, so that the first run on a GPU needs no fixing:
- the profile has exactly one line per record line of the step, the same operation and name in the same order
  (a kernel, GEMM, copy, memset or collective queued outside the profile's wrappers would be missing), each with
  its device time, start, the host's enqueue time; profiling adds no device operation to the step;
- gpu_cost.py --profile joins it (with the record given, recorded again from the profile's own overrides, or
  none: measured alone), writes every line to a CSV, and picks the device constants by the profiled GPU's name;
- the join survives a launch only one side has; idle gaps are host-bound only when the host queued late;
- a file with two windows is refused."""
import json
import os
import subprocess
import sys

import pytest

from harness import BUILD, SOURCE, simulator_build

sys.path.insert(0, os.path.join(SOURCE, "bench"))
import gpu_cost  # noqa: E402

RECORDER = os.path.join(BUILD, "bench", "gpu_step_record")
needs_simulator = pytest.mark.skipif(not simulator_build(), reason="needs a CUDA-simulator build (-DSFTDP_CUDA_SIM=ON)")
STEPS = {
    "gpt2": ["model_name=gpt2-tiny", "global_batch_size=2", "max_target_length=64", "dtype=bfloat16"],
    "qwen3": ["model_name=llama-tiny", "decoder_block=qwen3", "global_batch_size=2", "max_target_length=64",
              "dtype=bfloat16"],
}
WARMUP = 1

# The profile prints microseconds to 3 decimals (kernels/cuda/profile.cu): start_us, us and device_us
# are each within 0.0005 of the true value, so start_us + us compared with another printed time can be
# off by up to 3 x 0.0005 (plus the sum's float rounding, ~1e-10 at 1e6 us).
PRINTED_SUM_ERROR_US = 3 * 0.0005 + 1e-6


def run_step(keys, record=None, profile=None):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for var in ("SFTDP_SIM_RECORD", "SFTDP_SIM_RECORD_ONLY", "SFTDP_GPU_PROFILE"):
        env.pop(var, None)
    if record:
        env["SFTDP_SIM_RECORD"] = record
    if profile:
        env["SFTDP_GPU_PROFILE"] = profile
    p = subprocess.run([RECORDER, "--warmup", str(WARMUP)] + keys, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def steps(workdir):
    """{model: (record path, profile path, record path of the same step unprofiled)}."""
    assert os.path.exists(RECORDER), f"{RECORDER} is missing from this simulator build"
    out = {}
    for name, keys in STEPS.items():
        paths = [os.path.join(workdir, f"{name}_{kind}.jsonl") for kind in ("record", "profile", "plain")]
        assert "profiled" in run_step(keys, record=paths[0], profile=paths[1])
        assert "profiled" not in run_step(keys, record=paths[2])
        out[name] = paths
    return out


@needs_simulator
@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_profile_has_one_line_per_record_line_in_order(steps, name):
    record, profile, _ = steps[name]
    mark, records = gpu_cost.load(record)
    head, ops, foot = gpu_cost.load_profile(profile)
    assert len(ops) == len(records) > 20
    for i, (r, p) in enumerate(zip(records, ops)):
        assert gpu_cost.record_key(r) == (p["op"], p["name"]), f"line {i}: record {r}\nprofile {p}"
        if r["op"] == "kernel":
            assert r["site"] == p["site"], f"line {i}"
        if r["op"] == "gemm":
            assert (r["m"], r["n"], r["k"]) == (p["m"], p["n"], p["k"]), f"line {i}"
        if r["op"] in ("memcpy", "memset"):
            assert r["bytes"] == p["bytes"], f"line {i}"
        if r["op"] == "nccl":
            assert r["count"] == p["count"], f"line {i}"
    assert {"kernel", "gemm", "memcpy", "memset", "nccl"} <= {p["op"] for p in ops}
    # the header: the device, the step's fields as the record's mark has them, the warm-up steps' times
    assert head["device"].startswith("sft-dp CUDA simulator") and head["sms"] >= 1
    for key in ("model_name", "B", "T", "dtype", "weighted_positions", "train_flops", "overrides"):
        assert head[key] == mark[key], key
    assert head["overrides"] == STEPS[name] and len(head["warmup_ms"]) == WARMUP
    assert head["gemm_inputs"] == "cuda-bf16"
    # times: non-negative, each stream in order, the host queueing in order
    assert foot["ops"] == len(ops) and foot["device_us"] > 0 and foot["host_us"] > 0
    ends = {}
    for p in ops:
        assert p["us"] >= 0 and p["start_us"] >= 0 and p["call_us"] >= 0
        assert p["start_us"] >= ends.get(p["stream"], 0) - PRINTED_SUM_ERROR_US, p
        ends[p["stream"]] = p["start_us"] + p["us"]
    assert all(a["enqueue_us"] <= b["enqueue_us"] for a, b in zip(ops, ops[1:]))
    assert max(ends.values()) <= foot["device_us"] + PRINTED_SUM_ERROR_US


@needs_simulator
@pytest.mark.parametrize("name", sorted(STEPS))
def test_profiling_adds_no_device_operation(steps, name):
    # Profiled, the step runs as it comes (no CUDA graph inside a profile window); unprofiled it is replayed from a
    # graph after the warm-up step: the same operations, the replayed lines naming their graph and node.
    record, _, plain = steps[name]
    strip = lambda r: {k: v for k, v in r.items() if k not in ("seq", "graph", "node")}  # noqa: E731
    assert [strip(r) for r in gpu_cost.load(record)[1]] == [strip(r) for r in gpu_cost.load(plain)[1]]


@needs_simulator
def test_gpu_cost_joins_the_profile_with_the_record_and_the_prediction(steps, workdir):
    record, profile, _ = steps["gpt2"]
    csv = os.path.join(workdir, "ops.csv")
    cmd = [sys.executable, os.path.join(SOURCE, "bench", "gpu_cost.py"), "--profile", profile]
    p = subprocess.run(cmd + ["--record", record, "--json", "--ops-csv", csv], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    (s,) = json.loads(p.stdout)
    n = len(gpu_cost.load(record)[1])
    assert s["operations"] == s["joined"] == n and s["unmatched_profile"] == s["unmatched_record"] == 0
    assert s["measured_ms"] > 0 and s["predicted_ms"] > 0 and s["busy_ms"] <= s["measured_ms"] + 1e-6
    assert s["constants"] == "H100 SXM" and "no constants for" in s["note"]  # the simulator is no H100
    assert 0 < s["measured_memory"] and 0 < s["measured_gemm_bf16"]
    lines = open(csv).read().splitlines()
    assert len(lines) == n + 1 and lines[0].startswith("i,op,name,site,measured_us,predicted_us")
    text = subprocess.run(cmd + ["--record", record], capture_output=True, text=True, timeout=300).stdout
    for part in ("Profiled on **sft-dp CUDA simulator", "| class | operations | measured ms | predicted ms",
                 "| kernel / operation | launches | measured µs", "Efficiency as measured", "cuBLASLt GEMM, bf16"):
        assert part in text, part
    # the record made again from the profile's own overrides joins the same way
    again = subprocess.run(cmd + ["--build", BUILD, "--json"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["joined"] == n
    # no record: the measured tables alone
    alone = subprocess.run(cmd + ["--no-record", "--json"], capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    a = json.loads(alone.stdout)[0]
    assert a["predicted_ms"] is None and a["operations"] == n and a["joined"] == 0


def test_device_constants_are_chosen_by_the_gpus_name():
    assert gpu_cost.device_for("NVIDIA H200") == ("H200", "")
    assert gpu_cost.device_for("NVIDIA GH200 480GB") == ("H200", "")
    assert gpu_cost.device_for("NVIDIA H100 80GB HBM3") == ("H100 SXM", "")
    assert gpu_cost.device_for("NVIDIA H100 PCIe")[1]
    assert gpu_cost.device_for("NVIDIA A100-SXM4-80GB") == ("H100 SXM", "no constants for 'NVIDIA A100-SXM4-80GB': "
                                                                        "H100 SXM's used")
    memset = {"op": "memset", "bytes": 1 << 30}
    try:
        gpu_cost.use_device("H200")
        assert gpu_cost.HBM_TBPS == 4.8
        h200 = gpu_cost.cost([memset])[0].us
        gpu_cost.use_device("H100 SXM")
        assert gpu_cost.HBM_TBPS == 3.35
        assert gpu_cost.cost([memset])[0].us - gpu_cost.LAUNCH_US == pytest.approx((h200 - gpu_cost.LAUNCH_US)
                                                                                     * 4.8 / 3.35)
    finally:
        gpu_cost.use_device("H100 SXM")


def kernel(name, i, start, us, enqueue, stream=0):
    return {"op": "kernel", "i": i, "name": name, "site": "x.cu:1", "stream": stream, "start_us": start, "us": us,
            "enqueue_us": enqueue, "call_us": 1.0}


def record(name):
    return {"op": "kernel", "name": name, "site": "x.cu:1", "grid": [1, 1, 1], "block": [256, 1, 1], "smem": 0,
            "args": [{"type": "float*", "alloc": 1, "offset": 0}, {"type": "float const*", "alloc": 2, "offset": 0},
                     {"type": "float const*", "alloc": 3, "offset": 0}, {"type": "unsigned long", "value": 1000}]}


def test_the_join_leaves_a_launch_only_one_side_has_unmatched():
    records = [record("residual_fwd_kernel"), record("gelu_fwd_kernel"), record("residual_fwd_kernel")]
    profiled = [kernel("residual_fwd_kernel", 0, 0, 5, 0), kernel("add_bias_kernel", 1, 5, 5, 1),
                kernel("gelu_fwd_kernel", 2, 10, 5, 2), kernel("residual_fwd_kernel", 3, 15, 5, 3)]
    pairs = gpu_cost.join(records, profiled)
    assert [(r and r["name"], p and p["name"]) for r, p in pairs] == [
        ("residual_fwd_kernel", "residual_fwd_kernel"), (None, "add_bias_kernel"),
        ("gelu_fwd_kernel", "gelu_fwd_kernel"), ("residual_fwd_kernel", "residual_fwd_kernel")]
    pairs = gpu_cost.join(records, profiled[:2])  # a profile that stops early: the rest unmatched
    assert sorted((r and r["name"] or "", p and p["name"] or "") for r, p in pairs) == [
        ("", "add_bias_kernel"), ("gelu_fwd_kernel", ""), ("residual_fwd_kernel", ""),
        ("residual_fwd_kernel", "residual_fwd_kernel")]


def test_an_idle_gap_is_host_bound_only_when_the_host_queued_late():
    profiled = [kernel("residual_fwd_kernel", 0, 0, 10, 0),
                kernel("residual_fwd_kernel", 1, 30, 10, 25),   # queued 15 µs after the device ran dry
                kernel("residual_fwd_kernel", 2, 60, 10, 2),    # queued early: waited for something else
                kernel("residual_fwd_kernel", 3, 70, 10, 3)]    # no gap
    ms = gpu_cost.measure([(record("residual_fwd_kernel"), p) for p in profiled])
    assert [m.gap_us for m in ms] == [0, 20, 20, 0]
    assert [m.host_bound for m in ms] == [False, True, False, False]


def test_a_profile_file_with_two_windows_is_refused(tmp_path):
    path = tmp_path / "p.jsonl"
    window = [{"op": "profile", "device": "x"}, kernel("k", 0, 0, 1, 0), {"op": "profile_end", "ops": 1,
                                                                          "device_us": 1, "host_us": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in window * 2))
    with pytest.raises(SystemExit, match="2 profile windows"):
        gpu_cost.load_profile(str(path))
    path.write_text("".join(json.dumps(r) + "\n" for r in window))
    head, ops, foot = gpu_cost.load_profile(str(path))
    assert head["device"] == "x" and len(ops) == 1 and foot["ops"] == 1
