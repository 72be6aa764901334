"""scripts/gpu_check.sh without a GPU, in its dry-run mode (SFTDP_GPU_CHECK_DRY=1: every command of
every step is printed instead of run, through the same timeout wrapper): each mode produces ONE
archive, $OUT/gpu_check_<mode>.tar.gz, with summary.txt and one log per step, also when a step fails,
hangs past its timeout (its processes are killed) or finds no time left; a failed build step stops
the steps that need it. Runs in a temp dir; nothing is written into the source tree."""
import os
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
                 "two_ranks_one_gpu", "bench_gpu_step"]


def dry_run(tmp_path, mode, limit=60, fail="", hang=""):
    """Runs the script; returns (process, seconds, {step: verdict}, {file name in the archive: text})."""
    env = dict(os.environ, SFTDP_GPU_CHECK_DRY="1", SFTDP_GPU_CHECK_DRY_FAIL=fail,
               SFTDP_GPU_CHECK_DRY_HANG=hang, SFTDP_GPU_CHECK_LIMIT=str(limit),
               SFTDP_GPU_CHECK_RESULTS=str(tmp_path / "results"), SFTDP_PKG_ROOT=str(tmp_path / "pkgroot"),
               SFTDP_GPU_BUILD_DIR=str(tmp_path / "build"), OUT=str(tmp_path / "out"))
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
    for target in ("sft_train", "kernels_test_cuda_vs_cpu", "model_test_cuda_model", "bench_gpu_step"):
        assert target in files["build.log"], f"build names {target}"


def test_failing_and_hanging_steps_are_packed_and_the_rest_run(tmp_path):
    p, seconds, verdicts, files = dry_run(tmp_path, "e2e-bench", limit=25, fail="train_cpu",
                                          hang="bench_gpu_step")
    assert p.returncode == 1
    assert list(verdicts) == E2E, "every step ran, in order"
    assert verdicts["train_cpu"] == "FAIL"
    assert verdicts["bench_gpu_step"] == "TIMEOUT"
    assert {v for s, v in verdicts.items() if s not in ("train_cpu", "bench_gpu_step")} == {"ok"}
    assert seconds < 25 + 10, f"the script kept its limit: {seconds:.1f} s"
    for s in E2E:
        assert f"{s}.log" in files
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
    assert verdicts == {"machine": "ok", "packages": "ok", "configure": "FAIL"}
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
    later = E2E[E2E.index("train_gpu") + 1:]
    assert [verdicts[s] for s in later] == ["SKIP"] * len(later), verdicts
    assert "no time left" in files["summary.txt"]
    assert seconds < 25 + 10, f"the script kept its limit: {seconds:.1f} s"


def test_usage(tmp_path):
    p = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "usage:" in p.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
