"""The training log's speed in model FLOPs (docs/SPEC.md §6): every step line carries the job's achieved
TFLOP/s, the step's model FLOPs (train::train_flops, the benches' count) over its time, and metrics.jsonl
the same figure as `tflops`. On CPU ranks there is no known peak, so no MFU is printed or written (a GPU
the cost model knows adds `MFU x%` and `mfu`; tests/train/test_flops.cpp checks which GPUs those are)."""
import re

import pytest

from harness import TINY_MODEL, make_data, read_metrics, run_train, write_config

T, G = 16, 8
LINE = re.compile(r"^step (\d+)/\d+ \| loss \S+ \| lr \S+ \| grad_norm \S+ \| \d+ tok/s \| (\S+) TFLOP/s( \| MFU)?")


def train_flops(L, C, F, V, T, tokens, llama=None):
    """train::train_flops (src/train/flops.h) restated: 6 per GEMM weight per token, 12·L·T·width for attention."""
    if llama:
        NH, KVH, HS = llama
        qkv, a = (NH + 2 * KVH) * HS, NH * HS
        gemm = L * (C * qkv + a * C + C * 2 * F + F * C) + C * V
        return (6 * gemm + 12 * L * a * T) * tokens
    gemm = L * (3 * C * C + C * C + 2 * C * F) + C * V
    return (6 * gemm + 12 * L * C * T) * tokens


MODELS = {
    "gpt2": (dict(TINY_MODEL), None),
    "qwen3": (dict(TINY_MODEL, model_name="llama-tiny", decoder_block="qwen3", num_heads=4, num_kv_heads=2,
                   head_dim=8), (4, 2, 8)),
}


@pytest.mark.parametrize("family", sorted(MODELS))
def test_log_line_and_metrics_carry_tflops(family, workdir):
    model, llama = MODELS[family]
    d = f"{workdir}/{family}"
    train = make_data(f"{workdir}/train_{family}.h5", 32, T=T, vocab=model["vocab_size"], seed=1)
    cfg = write_config(f"{workdir}/{family}.yml", **model, run_name=family, base_output_directory=d,
                       train_files=train, max_target_length=T, global_batch_size=G, steps=3, log_period=1,
                       hardware="cpu")
    p = run_train(cfg)
    logged = [LINE.match(line) for line in p.stdout.splitlines()]
    logged = [m for m in logged if m]
    assert [int(m.group(1)) for m in logged] == [1, 2, 3], p.stdout
    steps, _ = read_metrics(f"{d}/{family}")
    flops = train_flops(model["num_decoder_layers"], model["emb_dim"], model["mlp_dim"], model["vocab_size"], T,
                        G * T, llama)
    for m, s in zip(logged, steps):
        tflops = float(m.group(2))
        assert tflops > 0
        assert s["tflops"] * s["step_time_s"] * 1e12 == pytest.approx(flops, rel=1e-9)
        assert tflops == pytest.approx(s["tflops"], rel=1e-3)  # printed with 4 significant digits
        assert m.group(3) is None and "mfu" not in s  # CPU ranks: no known peak
