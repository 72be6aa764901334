"""The data-parallel step on paper (bench/gpu_scale.py): ZeRO-3's collectives beside the compute of
bench/gpu_cost.py, overlapped as src/optim/zero_units.cpp overlaps them.
- in every build: a ring collective costs its latency steps plus its bus bytes; gathers shorter than the compute
  they run beside are hidden but the first, and the last reduce-scatter is exposed; gathers longer than the compute
  set the step; the optimizer runs on a 1/world shard;
- in a simulator build: an L-layer step is rest + L x block, from the records of one and two layers (checked against
  the record of four); with one GPU the group's step is the one-GPU step."""
import os
import sys

import pytest

from harness import BUILD, SOURCE, simulator_build

sys.path.insert(0, os.path.join(SOURCE, "bench"))
import gpu_cost  # noqa: E402
import gpu_scale  # noqa: E402

needs_recorder = pytest.mark.skipif(not simulator_build(), reason="needs a CUDA-simulator build (-DSFTDP_CUDA_SIM=ON)")


def test_a_ring_collective_is_its_latency_steps_plus_its_bus_bytes():
    assert gpu_scale.ring_us(1 << 30, 1) == 0.0
    S = 8e9
    assert gpu_scale.ring_us(S, 8) == pytest.approx(7 * gpu_scale.ALPHA_NVLINK_US + 7 / 8 * S / (gpu_scale.NVLINK_BUS_GBPS * 1e3))
    # across nodes: one ring per NIC, capped by NVLink's bus bandwidth
    busbw = min(gpu_scale.NVLINK_BUS_GBPS, gpu_scale.NICS_PER_NODE * gpu_scale.NIC_GBPS * gpu_scale.NIC_EFFICIENCY)
    assert gpu_scale.ring_us(S, 64) == pytest.approx(63 * gpu_scale.ALPHA_NIC_US + 63 / 64 * S / (busbw * 1e3))


def bytes_for(us, world):
    """The bytes a ring collective over `world` ranks moves in `us` µs (latency steps included)."""
    alpha = gpu_scale.ALPHA_NVLINK_US
    return (us - (world - 1) * alpha) * world / (world - 1) * gpu_scale.NVLINK_BUS_GBPS * 1e3


def test_gathers_shorter_than_compute_hide_but_the_first_and_the_last_reduce_scatter_is_exposed():
    w = 8
    g, r = bytes_for(100.0, w), bytes_for(300.0, w)
    uses = [dict(compute=1000.0, gather=g, reduce=0) for _ in range(3)]
    uses += [dict(compute=2000.0, gather=g, reduce=r) for _ in range(2)]
    step, compute, collectives = gpu_scale.simulate(uses, w, optimizer_us=800.0)
    # first gather (100) | compute 3·1000 + 2·2000 | the last reduce-scatter (300) after the last compute
    assert step == pytest.approx(100 + 7000 + 300 + 800 / w)
    assert compute == pytest.approx(7000 + 800 / w)
    assert collectives == pytest.approx(5 * 100 + 2 * 300)


def test_gathers_longer_than_compute_set_the_step():
    w = 8
    g = bytes_for(50.0, w)
    uses = [dict(compute=1.0, gather=g, reduce=0) for _ in range(4)]
    step, _, _ = gpu_scale.simulate(uses, w, optimizer_us=0.0)
    assert step == pytest.approx(4 * 50 + 1)  # the gathers back to back, then the last unit's compute


def test_compute_beside_a_collective_is_stretched_by_the_overlap_slowdown():
    w = 8
    g = bytes_for(40.0, w)
    uses = [dict(compute=100.0, gather=g, reduce=0) for _ in range(2)]
    step, _, _ = gpu_scale.simulate(uses, w, optimizer_us=0.0, slowdown=0.5)
    assert step == pytest.approx(40 + 100 + 0.5 * 40 + 100)  # the second gather runs beside the first compute


def fake_items(spec):
    return [gpu_cost.Item(name, "memory", 0, 0, (us, False), 0.0) for name, us in spec]


def test_the_step_splits_at_the_loss_and_sets_the_optimizer_apart():
    parts = gpu_scale.StepParts(fake_items([("encoder_fwd_kernel", 1), ("cuBLASLt GEMM, bf16 inputs", 10),
                                            ("cross_entropy_rows_kernel<__nv_bfloat16>", 2), ("rope_kernel<S>", 20),
                                            ("adamw_step_kernel", 5), ("partial_sums_kernel<Load>", 1)]))
    assert (parts.forward, parts.backward, parts.optimizer) == (11, 22, 6)
    with pytest.raises(SystemExit):
        gpu_scale.StepParts(fake_items([("rope_kernel<S>", 1)]))


TINY = "llama-tiny"


@needs_recorder
def test_one_and_two_layer_records_extrapolate_to_four_layers(workdir):
    parts = {L: gpu_scale.record_parts(BUILD, TINY, 2, 128, L, workdir)[1] for L in (1, 2, 4)}
    block = parts[2].minus(parts[1])
    rest = parts[1].minus(block)
    for field in ("forward", "backward"):
        assert getattr(parts[4], field) == pytest.approx(getattr(rest, field) + 4 * getattr(block, field), rel=1e-12)
    # the gradient norm's partial sums: one per thread block of the whole buffer, a grid rounded up (~1e-6)
    assert parts[4].optimizer == pytest.approx(rest.optimizer + 4 * block.optimizer, rel=1e-5)
    assert block.forward > 0 and block.backward > block.forward  # remat: backward re-runs the forward


@needs_recorder
def test_one_gpu_in_the_group_is_the_one_gpu_step(workdir):
    p = gpu_scale.predict(BUILD, TINY, 2, 128, 4, [1, 8], workdir, 0.0)
    one, eight = p["rows"]
    assert one["step_ms"] == pytest.approx(p["one_gpu_step_ms"], rel=1e-12)
    assert one["collectives_ms"] == 0.0
    assert eight["compute_ms"] < one["compute_ms"]  # the optimizer's shard
    assert eight["exposed_ms"] > 0
