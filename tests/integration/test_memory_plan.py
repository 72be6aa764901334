"""The memory plan (src/train/memory_plan.h): before anything is allocated or written, sft_train
compares what each rank will hold with what its node offers and refuses a run that cannot fit with
an error line (exit 2) giving both figures and what would fit, instead of the kernel's OOM killer.
- CPU: gpt2-124m at 512 rows of 1024 tokens per micro-step (hundreds of GiB of activations) against
  MemAvailable: exit 2, the figures, fewer rows per micro-step suggested, no run directory written.
- GPU (the CUDA simulator's device budget): a run that fits needs X; with X − 1 MiB on the device
  the same run is refused, and remat: true is named as what would fit."""
import os
import re

import pytest

from harness import make_data, run_train, simulator_build, write_config


def mem_available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return None


@pytest.mark.skipif((mem_available_gib() or 1e9) > 300, reason="a node with over 300 GiB available could fit the run")
def test_a_cpu_run_too_big_for_the_node_is_refused_before_anything_is_written(tmp_path):
    d = str(tmp_path)
    make_data(f"{d}/train.h5", 512, T=1024, vocab=256, seed=1)
    cfg = write_config(f"{d}/c.yml", model_name="gpt2-124m", run_name="big", base_output_directory=f"{d}/out",
                       train_files=f"{d}/train.h5", max_target_length=1024, global_batch_size=512, steps=1,
                       hardware="cpu")
    p = run_train(cfg, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    line = [l for l in p.stderr.splitlines() if "error: memory:" in l]
    assert len(line) == 1, p.stderr
    assert re.search(r"this rank needs [\d.]+ GiB \(parameters [\d.]+ MiB, gradient sums .* activations [\d.]+ GiB", line[0])
    assert re.search(r"but [\d.]+ GiB is available \(MemAvailable [\d.]+ GiB shared by 1 rank", line[0])
    assert re.search(r"would fit: .*gradient_accumulation_steps: \d+ \(\d+ rows per micro-step\)", line[0]), line[0]
    assert not os.path.exists(f"{d}/out"), "nothing is written"


@pytest.mark.skipif(not simulator_build(), reason="the device's memory is set through the CUDA simulator")
def test_a_gpu_run_one_mib_too_big_for_the_device_is_refused(tmp_path):
    d = str(tmp_path)
    # gpt2-tiny at 32 rows of 64 tokens: activations (~24 MiB) dominate the 32 MiB cuBLASLt workspace.
    make_data(f"{d}/train.h5", 32, T=64, seed=2)
    cfg = write_config(f"{d}/c.yml", model_name="gpt2-tiny", run_name="g", base_output_directory=f"{d}/out",
                       train_files=f"{d}/train.h5", max_target_length=64, global_batch_size=32, steps=1,
                       hardware="gpu")
    ok = run_train(cfg, env_extra={"SFTDP_SIM_DEVICES": "1"})
    need = float(re.search(r"memory: this rank needs ([\d.]+) MiB", ok.stdout).group(1))
    budget = f"{int(need) - 1}M"
    p = run_train(cfg, {"base_output_directory": f"{d}/out2"}, check=False,
                  env_extra={"SFTDP_SIM_DEVICES": "1", "SFTDP_SIM_DEVICE_MEMORY": budget})
    assert p.returncode == 2, p.stdout + p.stderr
    assert re.search(r"error: memory: this rank needs [\d.]+ MiB .* but [\d.]+ MiB is available \(free on CUDA device 0",
                     p.stderr), p.stderr
    assert "would fit: remat: true (" in p.stderr, p.stderr
    assert not os.path.exists(f"{d}/out2"), "nothing is written"
