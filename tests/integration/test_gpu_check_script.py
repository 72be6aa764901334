"""scripts/gpu_check.sh without a GPU, in its dry-run mode (SFTDP_GPU_CHECK_DRY=1: every command of
every step is printed instead of run, through the same timeout wrapper): each mode produces ONE
archive, $OUT/gpu_check_<mode>.tar.gz, with summary.txt and one log per step, also when a step fails,
hangs past its timeout (its processes are killed) or finds no time left; a failed build step stops
the steps that need it. The llm.c steps of issue 23 (llmc_build in the background from the start,
llmc_vs_sftdp last; the llmc-bench mode alone): their commands, a failed or hung llm.c build that
leaves every other step running, and, run for real with stand-ins for the two trainers, the plumbing
from their output to gpu_vs_llmc_<UTC>.md. The zero-bench mode of issue 25: its nine sft_train runs
(zero_stage 0, 2, 3 at GA 1 and 4; bf16 weights at 1, 2, 3 at GA 4). Runs in a temp dir; nothing is written into the source tree."""
import os
import re
import subprocess
import sys
import tarfile
import time

import pytest

SOURCE = os.environ.get("SFTDP_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE, "scripts", "gpu_check.sh")
PREPARE = ["machine", "packages", "configure", "build"]
E2E = PREPARE + ["data", "train_gpu", "train_gpu_again", "train_cpu", "train_gpu_ga4", "train_gpu_bf16",
                 "gpu_runs_bitwise_equal", "gpu_matches_cpu", "ga4_matches_ga1", "bf16_tracks_fp32",
                 "train_llama_gpu", "train_llama_cpu", "llama_gpu_matches_cpu",
                 "two_ranks_one_gpu", "llmc_build", "bench_gpu_step", "llmc_vs_sftdp"]
SFTDP_STEPS = [s for s in E2E if not s.startswith("llmc_")]  # the steps that do not need llm.c


def dry_run(tmp_path, mode, limit=60, fail="", hang="", extra_env=None):
    """Runs the script; returns (process, seconds, {step: verdict}, {file name in the archive: text})."""
    env = dict(os.environ, SFTDP_GPU_CHECK_DRY="1", SFTDP_GPU_CHECK_DRY_FAIL=fail,
               SFTDP_GPU_CHECK_DRY_HANG=hang, SFTDP_GPU_CHECK_LIMIT=str(limit),
               SFTDP_GPU_CHECK_RESULTS=str(tmp_path / "results"), SFTDP_PKG_ROOT=str(tmp_path / "pkgroot"),
               SFTDP_GPU_BUILD_DIR=str(tmp_path / "build"), SFTDP_LLMC_BUILD_DIR=str(tmp_path / "build-llmc"),
               OUT=str(tmp_path / "out"), **(extra_env or {}))
    t0 = time.monotonic()
    p = subprocess.run(["bash", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=limit + 60)
    seconds = time.monotonic() - t0
    archive = tmp_path / "out" / f"gpu_check_{mode}.tar.gz"
    assert archive.is_file(), f"no archive; exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert os.listdir(tmp_path / "out") == [archive.name], "one file comes back, the archive"
    files = {}
    with tarfile.open(archive) as tar:
        dirs = {m.name.split("/")[0] for m in tar.getmembers()}
        assert len(dirs) == 1 and dirs.pop().endswith(f"_{mode}"), "one results folder, named by mode"
        for m in tar.getmembers():
            if m.isfile():
                files[os.path.basename(m.name)] = tar.extractfile(m).read().decode()
    verdicts = {}
    for line in files["summary.txt"].splitlines():
        verdict, name = line.split()[:2]
        verdicts[name.rstrip(":")] = verdict
    assert files["summary.txt"].strip() in p.stdout, "the summary is printed last"
    return p, seconds, verdicts, files


def test_build_test_runs_every_step(tmp_path):
    p, _, verdicts, files = dry_run(tmp_path, "build-test")
    assert p.returncode == 0, p.stderr
    assert verdicts == {s: "ok" for s in PREPARE + ["gpu_tests"]}
    for s in verdicts:
        assert f"{s}.log" in files
    assert "+ cmake -S " in files["configure.log"] and "-DCMAKE_CUDA_ARCHITECTURES=90" in files["configure.log"]
    assert "+ grep -q sft-dp: CUDA ON" in files["configure.log"], "configure checks that CUDA is on"
    assert "ctest --test-dir" in files["gpu_tests.log"] and "-L gpu" in files["gpu_tests.log"]
    assert "gpu_packages.sh install" in files["packages.log"]
    for target in ("sft_train", "kernels_test_cuda_vs_cpu", "model_test_cuda_model", "bench_gpu_step", "bench_flops"):
        assert target in files["build.log"], f"build names {target}"


def test_failing_and_hanging_steps_are_packed_and_the_rest_run(tmp_path):
    p, seconds, verdicts, files = dry_run(tmp_path, "e2e-bench", limit=25, fail="train_cpu",
                                          hang="bench_gpu_step")
    assert p.returncode == 1
    assert list(verdicts) == E2E, "every step ran, in order"
    assert verdicts["train_cpu"] == "FAIL"
    assert verdicts["bench_gpu_step"] == "TIMEOUT"
    assert verdicts["llmc_vs_sftdp"] == "SKIP", "the hang took the time that was left"
    assert {v for s, v in verdicts.items() if s not in ("train_cpu", "bench_gpu_step", "llmc_vs_sftdp")} == {"ok"}
    assert seconds < 25 + 10, f"the script kept its limit: {seconds:.1f} s"
    for s in E2E:
        assert (f"{s}.log" in files) == (verdicts[s] != "SKIP"), s
    assert "sft_train" in files["train_cpu.log"] and "hardware=cpu" in files["train_cpu.log"]
    assert "gradient_accumulation_steps=4" in files["train_gpu_ga4.log"]
    assert "dtype=bfloat16" in files["train_gpu_bf16.log"]
    assert "-n 2" in files["two_ranks_one_gpu.log"] and "hardware=auto" in files["two_ranks_one_gpu.log"]
    assert "bench_gpu_step" in files["bench_gpu_step.log"]
    leftovers = []  # the hanging step's `sleep` was killed with its step (timeout kills the group)
    marker = f"SFTDP_GPU_CHECK_RESULTS={tmp_path / 'results'}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    leftovers.append(pid)
        except OSError:
            pass
    assert not leftovers, f"processes of the dry run still alive: {leftovers}"


def test_a_failed_configure_stops_the_steps_that_need_it(tmp_path):
    p, _, verdicts, files = dry_run(tmp_path, "e2e-bench", fail="configure")
    assert p.returncode == 1
    # llmc_build needs no sft-dp build: it ran beside them and is still collected
    assert verdicts == {"machine": "ok", "packages": "ok", "configure": "FAIL", "llmc_build": "ok"}
    assert "build.log" not in files and "summary.txt" in files


def test_a_timed_out_step_stops_the_steps_that_need_it(tmp_path):
    p, seconds, verdicts, _ = dry_run(tmp_path, "e2e-bench", limit=25, hang="data")
    assert p.returncode == 1
    assert verdicts["data"] == "TIMEOUT"
    assert seconds < 25 + 10, f"the script kept its limit: {seconds:.1f} s"
    assert "train_gpu" not in verdicts, "the runs need the data"


def test_steps_with_no_time_left_are_skipped_and_the_archive_still_made(tmp_path):
    p, seconds, verdicts, files = dry_run(tmp_path, "e2e-bench", limit=25, hang="train_gpu")
    assert p.returncode == 1
    assert verdicts["train_gpu"] == "TIMEOUT"
    later = [s for s in E2E[E2E.index("train_gpu") + 1:] if s != "llmc_build"]
    assert [verdicts[s] for s in later] == ["SKIP"] * len(later), verdicts
    assert verdicts["llmc_build"] == "ok", "started before the hang, in the background"
    assert "no time left" in files["summary.txt"]
    assert seconds < 25 + 10, f"the script kept its limit: {seconds:.1f} s"


def test_llmc_steps_commands(tmp_path):
    """The llm.c build (its Makefile's target, flags and the CUDA 13 shim, from the carried copy into the
    ignored build-llmc/), then rounds of llm.c and sft_train at the same B and T in alternating order,
    bench_flops on sft_train's arguments, and the report into gpu_vs_llmc_<UTC>.md."""
    p, _, verdicts, files = dry_run(tmp_path, "e2e-bench", extra_env={"SFTDP_LLMC_ROUNDS": "3"})
    assert p.returncode == 0, p.stderr
    assert list(verdicts) == E2E and set(verdicts.values()) == {"ok"}
    build = files["llmc_build.log"]
    assert "/.anchors/llm.c/train_gpt2.cu" in build and f"{tmp_path}/build-llmc/" in build
    make = next(line for line in build.splitlines() if " make " in line)
    for word in ("train_gpt2cu", "NO_MULTI_GPU=1", "USE_CUDNN=0", "GPU_COMPUTE_CAPABILITY=90",
                 "NVCC_APPEND_FLAGS=-include", "bench/llmc_cuda13.h", f"-C {tmp_path}/build-llmc"):
        assert word in make, (word, make)
    log = files["llmc_vs_sftdp.log"].splitlines()
    runs = [("llmc" if "train_gpt2cu" in line else "sftdp") for line in log
            if line.startswith("+ ") and "llmc_compare.py" not in line
            and ("train_gpt2cu " in line or "/sft_train " in line)]
    # each sft-dp turn: the all-weighted rows, then the same rows as SFT data (train_sft.h5)
    assert runs == ["llmc", "sftdp", "sftdp", "sftdp", "sftdp", "llmc", "llmc", "sftdp", "sftdp"], \
        "3 rounds, first runner alternating"
    llmc = next(line for line in log if "train_gpt2cu " in line)
    assert all("timeout -k 5 60 " in line for line in log if line.startswith("+ ") and "llmc_compare" not in line
               and ("train_gpt2cu " in line or "/sft_train " in line)), "every run under its own timeout"
    for word in ("-e d12", "-b 8", "-t 1024", "-x 30", "-s 0", "-r 0", "/llmc/train.bin", "/llmc/val.bin"):
        assert word in llmc, (word, llmc)
    sft = [line for line in log if "/sft_train " in line and "llmc_compare.py" not in line]
    flops = next(line for line in log if "bench_flops " in line)
    for word in ("model_name=gpt2-124m", "dtype=bfloat16", "hardware=gpu", "global_batch_size=8",
                 "max_target_length=1024", "steps=30", "/llmc/train.h5"):
        assert all(word in line for line in sft + [flops]), word
    assert [re.search(r"run_name=(\S+)", line)[1] for line in sft] == ["sftdp_1", "sftdp_sft_1", "sftdp_2",
                                                                       "sftdp_sft_2", "sftdp_3", "sftdp_sft_3"]
    assert all(("/llmc/train_sft.h5" in line) == ("sftdp_sft_" in line) for line in sft), "SFT runs on SFT rows"
    data = next(line for line in log if "llmc_compare.py data" in line)
    assert "--rows 256 --T 1024" in data, "B * (steps + 2) rows"
    report = next(line for line in log if "llmc_compare.py gpu-report" in line)
    assert report.count("--llmc-log") == 3 and report.count("--sftdp-metrics") == 3
    assert report.count("--sftdp-sft-metrics") == 3
    assert re.search(r"--out \S+/gpu_vs_llmc_\d{8}T\d{6}Z\.md", report)
    shown = report.split("--command", 1)[1].split("--out")[0]
    assert str(tmp_path) not in shown and "$SFTDP_GPU_BUILD_DIR/sft_train $D/sft.yml" in shown, "no paths"


def test_a_failed_llmc_build_is_logged_and_every_other_step_runs(tmp_path):
    p, _, verdicts, files = dry_run(tmp_path, "e2e-bench", fail="llmc_build")
    assert p.returncode == 1
    assert verdicts["llmc_build"] == "FAIL"
    assert "llmc_vs_sftdp" not in verdicts, "the comparison needs the build"
    assert [s for s in verdicts if s != "llmc_build"] == SFTDP_STEPS
    assert {verdicts[s] for s in SFTDP_STEPS} == {"ok"}
    assert "+ test -f" in files["llmc_build.log"] and "train_gpt2.cu" in files["llmc_build.log"]


def test_a_hung_llmc_build_is_killed_and_every_other_step_runs(tmp_path):
    p, seconds, verdicts, files = dry_run(tmp_path, "e2e-bench", limit=40, hang="llmc_build",
                                          extra_env={"SFTDP_LLMC_BUILD_LIMIT": "10"})
    assert p.returncode == 1
    assert verdicts["llmc_build"] == "TIMEOUT"
    assert {verdicts[s] for s in SFTDP_STEPS} == {"ok"}, verdicts
    assert "llmc_vs_sftdp" not in verdicts
    assert seconds < 40 + 10, f"the script kept its limit: {seconds:.1f} s"


def test_a_hung_comparison_keeps_the_time_budget(tmp_path):
    p, seconds, verdicts, files = dry_run(tmp_path, "e2e-bench", limit=25, hang="llmc_vs_sftdp")
    assert p.returncode == 1
    assert verdicts["llmc_vs_sftdp"] == "TIMEOUT" and verdicts["llmc_build"] == "ok"
    assert seconds < 25 + 10, f"the script kept its limit: {seconds:.1f} s"
    assert "llmc_vs_sftdp.log" in files


CUDNN = {"SFTDP_CUDNN": "/opt/cudnn/include /opt/cudnn/lib/libcudnn.so.9",
         "SFTDP_LLMC_CUDNN_BUILD_DIR": "/tmp/no-such-dir/build-llmc-cudnn"}


def test_llmc_bench_mode_runs_the_llmc_steps_alone(tmp_path):
    """llmc-bench: the llm.c build and, in the background from the start, llm.c's cuDNN build (the next
    anchor of issue 34: USE_CUDNN=1 with the carried frontend headers and the machine's cuDNN), then rounds
    of llm.c, llm.c with cuDNN and sft-dp (first runner alternating), and the report with both ratios."""
    p, _, verdicts, files = dry_run(tmp_path, "llmc-bench", extra_env=CUDNN)
    assert p.returncode == 0, p.stderr
    assert sorted(verdicts) == sorted(PREPARE + ["llmc_build", "llmc_cudnn_build", "llmc_vs_sftdp"])
    assert list(verdicts)[-1] == "llmc_vs_sftdp", "the cuDNN build is collected before the timed runs"
    assert set(verdicts.values()) == {"ok"}
    build = files["llmc_cudnn_build.log"]
    assert "/.anchors/cudnn-frontend/include/cudnn_frontend.h" in build, "the carried frontend is checked"
    assert "ln -sfn /opt/cudnn/lib/libcudnn.so.9 /tmp/no-such-dir/build-llmc-cudnn/lib/libcudnn.so" in build
    assert re.search(r"ln -sfn \S+/\.anchors/cudnn-frontend /tmp/no-such-dir/build-llmc-cudnn/cudnn-frontend", build), \
        "where llm.c's Makefile looks for it (./cudnn-frontend/include)"
    make = next(line for line in build.splitlines() if " make " in line)
    for word in ("train_gpt2cu", "USE_CUDNN=1", "GPU_COMPUTE_CAPABILITY=90", "-isystem /opt/cudnn/include",
                 "bench/llmc_cuda13.h", "-C /tmp/no-such-dir/build-llmc-cudnn"):
        assert word in make, (word, make)
    log = files["llmc_vs_sftdp.log"].splitlines()
    runs = [("cudnn" if "build-llmc-cudnn/train_gpt2cu" in line else "llmc" if "train_gpt2cu" in line else "sftdp")
            for line in log if line.startswith("+ ") and "llmc_compare.py" not in line
            and ("train_gpt2cu " in line or "/sft_train " in line)]
    assert runs == ["llmc", "cudnn", "sftdp", "sftdp", "sftdp", "sftdp", "cudnn", "llmc"], runs
    cudnn = next(line for line in log if "build-llmc-cudnn/train_gpt2cu " in line)
    llmc = next(line for line in log if "build-llmc/train_gpt2cu " in line)
    assert cudnn.split("build-llmc-cudnn/train_gpt2cu ")[1] == llmc.split("build-llmc/train_gpt2cu ")[1], \
        "the same arguments"
    assert "LD_LIBRARY_PATH=" in cudnn and "timeout -k 5 60 " in cudnn
    report = next(line for line in log if "llmc_compare.py gpu-report" in line)
    assert report.count("--llmc-cudnn-log") == 2 and report.count("--llmc-log") == 2
    assert "$SFTDP_LLMC_CUDNN_BUILD_DIR/train_gpt2cu" in report, "no path of the machine in the report"


def test_llmc_bench_without_cudnn_compares_with_llmc_alone(tmp_path):
    p, _, verdicts, files = dry_run(tmp_path, "llmc-bench", extra_env=dict(CUDNN, SFTDP_CUDNN="none"))
    assert p.returncode == 0, p.stderr
    assert verdicts["llmc_cudnn_build"] == "ok" and "left out" in files["llmc_cudnn_build.log"]
    assert " make " not in files["llmc_cudnn_build.log"]


def test_a_failed_cudnn_build_leaves_the_comparison_with_llmc(tmp_path):
    p, _, verdicts, files = dry_run(tmp_path, "llmc-bench", fail="llmc_cudnn_build", extra_env=CUDNN)
    assert p.returncode == 1
    assert verdicts["llmc_cudnn_build"] == "FAIL" and verdicts["llmc_vs_sftdp"] == "ok"


def test_zero_bench_mode_runs_zero_stages_0_2_3_at_ga_1_and_4(tmp_path):
    """zero-bench (issue 25): the build, then sft_train gpt2-124m bf16 at zero_stage 0, 2 and 3 with GA 1
    and 4 (8 rows of 1024 tokens per micro-step), and with bf16 weights at zero_stage 1, 2 and 3 with GA 4,
    each beside an nvidia-smi memory sampler, then the report."""
    p, _, verdicts, files = dry_run(tmp_path, "zero-bench")
    assert p.returncode == 0, p.stderr
    assert list(verdicts) == PREPARE + ["zero_runs"]
    assert set(verdicts.values()) == {"ok"}
    runs = [line for line in files["zero_runs.log"].splitlines() if "/sft_train " in line]
    assert len(runs) == 9, files["zero_runs.log"]
    for ga in (1, 4):
        for z in ("0", "2", "3") + (("1w", "2w", "3w") if ga == 4 else ()):
            line = next(r for r in runs if f"run_name=z{z}_ga{ga} " in r + " ")
            weights = "bfloat16" if z.endswith("w") else "float32"
            for key in ("model_name=gpt2-124m", "dtype=bfloat16", "hardware=gpu", f"zero_stage={z[0]}",
                        f"weight_dtype={weights}", f"gradient_accumulation_steps={ga}", f"global_batch_size={8 * ga}",
                        "max_target_length=1024"):
                assert key in line, (key, line)


STAND_IN_LLMC = r"""#!/usr/bin/env python3
# stands in for llm.c's train_gpt2cu: its step lines (its printf format), 100 ms warm-up steps, then 40 ms
import os, sys
if os.environ.get("STAND_IN_LLMC_FAILS"):
    sys.exit("[CUDA ERROR] at file train_gpt2.cu:1: out of memory")
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
assert a["-e"] == "d12" and open(a["-i"], "rb").read(4) == (20240520).to_bytes(4, "little")
B, T, n = int(a["-b"]), int(a["-t"]), int(a["-x"])
print("val loss 11.0")
for i in range(n):
    ms = 100.0 if i < 5 else 40.0
    print("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
          % (i + 1, n, 10.95, float("nan"), 5.0, float("nan"), 3e-4, ms, -100.0, B * T / ms * 1e3))
"""
STAND_IN_SFT_TRAIN = r"""#!/usr/bin/env python3
# stands in for sft_train: reads its key=value arguments, writes metrics.jsonl (50 ms steps) where it would
import json, os, sys, h5py
a = dict(x.split("=", 1) for x in sys.argv[2:])
assert a["dtype"] == "bfloat16" and a["model_name"] == "gpt2-124m"
assert h5py.File(a["train_files"])["inputs"].shape[1] == int(a["max_target_length"])
run = os.path.join(a["base_output_directory"], a["run_name"])
os.makedirs(os.path.join(run, "checkpoints"))
with open(os.path.join(run, "metrics.jsonl"), "w") as f:
    for i in range(int(a["steps"])):
        f.write(json.dumps({"step": i + 1, "loss": 10.9, "step_time_s": 0.2 if i < 5 else 0.05}) + "\n")
"""


def run_with_stand_ins(tmp_path, llmc_fails=False):
    """Not a dry run: the step itself, with stand-ins for llm.c and sft_train that print and write what
    theirs do (and check that they were handed the files made for them), and bench_flops of the
    build when there is one. Returns (process, the report's text)."""
    llmc_dir, build = tmp_path / "build-llmc", tmp_path / "build"
    (build / "bench").mkdir(parents=True)
    llmc_dir.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)  # the device's python3 has numpy and h5py
    for path, text in ((llmc_dir / "train_gpt2cu", STAND_IN_LLMC), (build / "sft_train", STAND_IN_SFT_TRAIN)):
        path.write_text(text.replace("#!/usr/bin/env python3", "#!" + sys.executable))
        path.chmod(0o755)
    real_flops = os.path.abspath(os.path.join(os.environ.get("SFTDP_BUILD_DIR") or "build", "bench", "bench_flops"))
    if os.access(real_flops, os.X_OK):
        (build / "bench" / "bench_flops").symlink_to(real_flops)
    else:  # bench::train_flops of GPT-2 124M at B=8, T=64 (what the real one prints)
        (build / "bench" / "bench_flops").write_text("#!/bin/sh\necho flops_per_step=405248311296 B=8 T=64\n")
        (build / "bench" / "bench_flops").chmod(0o755)
    res = tmp_path / "res"
    res.mkdir()
    env = dict(os.environ, RES=str(res), STEP="llmc_vs_sftdp", SFTDP_GPU_BUILD_DIR=str(build),
               SFTDP_LLMC_BUILD_DIR=str(llmc_dir), SFTDP_PKG_ROOT=str(tmp_path / "pkgroot"), SFTDP_LLMC_T="64",
               SFTDP_PEAK_TFLOPS="989", PATH=f"{bin_dir}:{os.environ['PATH']}")
    env.pop("SFTDP_GPU_CHECK_DRY", None)
    if llmc_fails:
        env["STAND_IN_LLMC_FAILS"] = "1"
    p = subprocess.run(["bash", SCRIPT, "_call", "llmc_vs_sftdp"], env=env, capture_output=True, text=True, timeout=120)
    reports = list(res.glob("gpu_vs_llmc_*.md"))
    assert len(reports) == 1, (os.listdir(res), p.stdout + p.stderr)
    assert not list((res / "llmc" / "runs").glob("*/checkpoints")), "checkpoints removed"
    return p, reports[0].read_text()


def test_llmc_vs_sftdp_for_real_with_stand_ins(tmp_path):
    """The token files and .h5 are made, each run's output reaches the report, and gpu_vs_llmc_<UTC>.md
    holds the ratio of the stand-ins' step times, 50 ms -> 40 ms = 0.80, and their MFU."""
    p, text = run_with_stand_ins(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "**Ratio sft-dp / llm.c (tokens/s, medians): 0.80×**" in text, text
    assert "## On SFT-shaped rows" in text and "**Ratio sft-dp (SFT rows) / llm.c (tokens/s, medians): 0.80×**" in text
    assert "| llm.c train_gpt2cu (bf16) | 2 × 25 | 40.00 | 40.00 | 40.00 | 12800 |" in text, text
    mfu = 100 * 405248311296 / 0.05 / 989e12
    assert f"{mfu:.1f}%" in text and "B=8, T=64" in text
    assert str(tmp_path) not in text, "no path of the machine in the report"


def test_a_failing_llmc_run_still_gives_the_report_and_fails_the_step(tmp_path):
    p, text = run_with_stand_ins(tmp_path, llmc_fails=True)
    assert p.returncode == 1
    assert "llm.c run 1 failed" in p.stdout and "out of memory" in p.stdout
    assert "not measured" in text and "| sft-dp sft_train dtype=bfloat16 | 2 × 25 | 50.00 |" in text
    assert "FAILED: llm.c train_gpt2cu (bf16): 0 timed steps" in text


def test_profile_mode_builds_the_step_alone_and_profiles_each_step(tmp_path):
    """profile (issue 34): the packages and configure, a build of gpu_step_record alone, then per profiled step
    (gpt2-124m, smollm2-135m; bf16, B=8, T=1024, 3 warm-up steps) the step under SFTDP_GPU_PROFILE and
    gpu_cost.py's table: joined with the carried record where there is one, the measured tables alone where
    not. All inside 270 s (under 5 minutes)."""
    records = tmp_path / "records"
    records.mkdir()
    (records / "gpt2-124m.jsonl").write_text("{}\n")
    p, _, verdicts, files = dry_run(tmp_path, "profile", limit=270, extra_env={"SFTDP_GPU_RECORDS": str(records)})
    assert "profile) limit=270" in open(SCRIPT).read(), "the mode's own limit: under 5 minutes"
    assert p.returncode == 0, p.stderr
    steps = ["profile_gpt2-124m", "report_gpt2-124m", "profile_smollm2-135m", "report_smollm2-135m"]
    assert list(verdicts) == PREPARE + steps and set(verdicts.values()) == {"ok"}
    build = [line for line in files["build.log"].splitlines() if line.startswith("+ cmake --build")]
    assert len(build) == 1 and build[0].endswith("--target gpu_step_record"), build
    for name, keys in (("gpt2-124m", "model_name=gpt2-124m"), ("smollm2-135m", "model_name=smollm2-135m")):
        run = files[f"profile_{name}.log"]
        assert "SFTDP_GPU_PROFILE=" in run and f"/profile_{name}.jsonl" in run
        assert "/bench/gpu_step_record --warmup 3" in run
        for key in (keys, "global_batch_size=8", "max_target_length=1024", "dtype=bfloat16"):
            assert key in run, (key, run)
        report = files[f"report_{name}.log"]
        assert "bench/gpu_cost.py --profile " in report and "--ops-csv " in report
        if name == "gpt2-124m":
            assert f"--record {records}/gpt2-124m.jsonl" in report
        else:
            assert "--no-record" in report


def test_records_mode_records_the_profiled_steps_in_the_simulator(tmp_path):
    """records (here, no GPU): a simulator build's gpu_step_record, then each profiled step recorded record-only
    with the same warm-up, into the folder the profile mode's reports read; no archive, no results folder."""
    env = dict(os.environ, SFTDP_GPU_CHECK_DRY="1", SFTDP_SIM_BUILD_DIR=str(tmp_path / "sim"),
               SFTDP_GPU_RECORDS=str(tmp_path / "records"), OUT=str(tmp_path / "out"))
    p = subprocess.run(["bash", SCRIPT, "records"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "-DSFTDP_CUDA_SIM=ON" in p.stdout and "--target gpu_step_record" in p.stdout
    runs = [line for line in p.stdout.splitlines() if "/bench/gpu_step_record " in line]
    assert len(runs) == 2
    for run, name in zip(runs, ("gpt2-124m", "smollm2-135m")):
        assert f"SFTDP_SIM_RECORD={tmp_path}/records/{name}.jsonl" in run and "SFTDP_SIM_RECORD_ONLY=1" in run
        assert "--warmup 3" in run and f"model_name={name}" in run
    assert not (tmp_path / "out").exists()


def test_usage(tmp_path):
    p = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "usage:" in p.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
