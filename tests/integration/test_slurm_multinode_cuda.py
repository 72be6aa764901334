"""slurm/multi_node_gpu.sbatch on two network-namespace hosts (scripts/slurm_cluster.sh --nodes 2),
each with two simulated GPUs (the CUDA simulator build; two fake GPU GRES per node for Slurm):
- 2 nodes x 2 tasks, one rank per device, NCCL over the simulator between the hosts: losses within
  1e-5 relative of mpirun -np 4 on CPU ranks; the placement line shows node1 and node2 using the
  same two PCI bus ids, which is allowed (they are different machines' devices);
- 2 tasks per node with one simulated GPU per host: two ranks on one device of one host are still
  refused, exit 2, naming the host and both ranks.
Runs in the sanitized suite (the simulator build); other builds skip it unless a real GPU is seen,
and then it still needs the simulator's devices, so it skips too."""
import os
import time

import pytest

from harness import SFT_TRAIN, SOURCE, TINY_MODEL, make_data, run_train, simulator_build, write_config
from slurm_helpers import assert_completed, assert_same_metrics, job_log, running_cluster


# Collected and skipped (not a module-level skip: a file that collects nothing fails, conftest.py).
pytestmark = pytest.mark.skipif(not simulator_build(),
                                reason="needs the CUDA simulator build (simulated GPUs per host)")

GPU_SBATCH = os.path.join(SOURCE, "slurm", "multi_node_gpu.sbatch")
BUS = ["0000:18:00.0", "0000:28:00.0"]  # the simulator's first two devices, on every host


@pytest.fixture(scope="module")
def env(note):
    with running_cluster(note, "multi-node GPU Slurm tests", fake_gpus=2, nodes=2) as (d, cluster):
        make_data(f"{d}/train.h5", 64, seed=1)
        cfg = write_config(f"{d}/c.yml", **dict(
            TINY_MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
            max_target_length=16, global_batch_size=8, steps=4, learning_rate=3e-3, checkpoint_period=0,
            enable_data_shuffling=True, data_shuffle_seed=5, seed=3))
        yield d, cluster, cfg


def run_gpu_job(env, run_name, sim_devices, gpus_per_node, note):
    d, cluster, cfg = env
    t0 = time.monotonic()
    job_id = cluster.submit(GPU_SBATCH, [cfg, f"run_name={run_name}", "hardware=gpu"],
                            [f"--chdir={d}", "--nodes=2", "--ntasks-per-node=2", f"--gpus-per-node={gpus_per_node}",
                             "--cpus-per-task=1"],
                            {"SFTDP_TRAIN": SFT_TRAIN, "SFTDP_SIM_DEVICES": str(sim_devices)})
    fields = cluster.wait_job(job_id, timeout=300)
    note(f"job {job_id} ({run_name}: 2 nodes x 2 tasks, {sim_devices} simulated GPU(s) per host): "
         f"{fields['JobState']} {fields['ExitCode']} in {time.monotonic() - t0:.1f} s")
    return fields


def test_one_rank_per_gpu_on_two_nodes(env, note):
    d, _, cfg = env
    fields = run_gpu_job(env, "gpu_2x2", 2, 2, note)
    assert_completed(fields, "multi_node_gpu.sbatch on 2 nodes")
    log = job_log(fields)
    want = (f"placement: 4 ranks on 2 hosts; node1: ranks 0-1, local ranks 0-1, GPUs {BUS[0]},{BUS[1]}; "
            f"node2: ranks 2-3, local ranks 0-1, GPUs {BUS[0]},{BUS[1]}")
    assert want in log, f"one device per rank, the same bus ids on both hosts\n{log[:3000]}"
    assert "sft-dp: gpt2 cuda, 4 rank(s)" in log, log[:3000]
    run_train(cfg, {"run_name": "cpu4", "hardware": "cpu"}, np_=4)
    worst = assert_same_metrics(f"{d}/out/gpu_2x2", f"{d}/out/cpu4", "2x2 simulated GPUs vs 4 CPU ranks", rel=1e-5)
    note(f"2 nodes x 2 simulated GPUs (NCCL) vs mpirun -np 4 on CPU: losses within {worst:.1e} relative")


def test_two_ranks_on_one_gpu_of_a_host_are_refused(env, note):
    fields = run_gpu_job(env, "gpu_shared", 1, 1, note)
    log = job_log(fields)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "2:0", f"{fields['ExitCode']}\n{log[-3000:]}"
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, log[-3000:]
    assert "node1 runs 2 local ranks but has 1 usable CUDA device" in errors[0], errors[0]
    assert f"ranks 0 and 1 would share device {BUS[0]}" in errors[0], errors[0]
