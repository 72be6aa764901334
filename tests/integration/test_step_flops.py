"""The training log's speed in model FLOPs (docs/SPEC.md §6): metrics.jsonl carries each step's achieved
TFLOP/s as `tflops`, the step's model FLOPs (train::train_flops, the benches' count) over its time; the
console's step line shows the same over the mean step time of the last max(log_period, 10) steps, the
process's first step only while it is alone (issue 35: one step is no speed on a busy machine). On CPU
ranks there is no known peak, so no MFU is printed or written (a GPU the cost model knows adds `MFU x%`
and `mfu`; tests/train/test_flops.cpp checks which GPUs those are)."""
import re

import pytest

from harness import TINY_MODEL, make_data, read_metrics, run_train, write_config

T, G = 16, 8
STEPS = 13  # past the first window of 10 steps after step 1
LINE = re.compile(r"^step (\d+)/\d+ \| loss \S+ \| lr \S+ \| grad_norm \S+ \| (\d+) tok/s \| (\S+) TFLOP/s( \| MFU)?"
                  r".* \| ([\d.]+) ms \|")
WINDOW = 10  # the console's speed: a mean over the last max(log_period, 10) steps


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
                       train_files=train, max_target_length=T, global_batch_size=G, steps=STEPS, log_period=1,
                       hardware="cpu")
    p = run_train(cfg)
    logged = [LINE.match(line) for line in p.stdout.splitlines()]
    logged = [m for m in logged if m]
    assert [int(m.group(1)) for m in logged] == list(range(1, STEPS + 1)), p.stdout
    steps, _ = read_metrics(f"{d}/{family}")
    flops = train_flops(model["num_decoder_layers"], model["emb_dim"], model["mlp_dim"], model["vocab_size"], T,
                        G * T, llama)
    for k, (m, s) in enumerate(zip(logged, steps), start=1):
        assert s["tflops"] > 0
        assert s["tflops"] * s["step_time_s"] * 1e12 == pytest.approx(flops, rel=1e-9)
        assert s["tokens_per_s"] * s["step_time_s"] == pytest.approx(G * T, rel=1e-9)
        window = [steps[0]] if k == 1 else steps[max(1, k - WINDOW):k]  # step 1 only while it is alone
        mean_s = sum(w["step_time_s"] for w in window) / len(window)
        assert float(m.group(3)) == pytest.approx(flops / mean_s / 1e12, rel=1e-3), f"step {k}"  # 4 digits
        assert float(m.group(5)) == pytest.approx(mean_s * 1e3, abs=0.051), f"step {k}"  # %.1f ms
        assert int(m.group(2)) == pytest.approx(G * T / mean_s, abs=0.51), f"step {k}"  # %.0f tok/s
        assert m.group(4) is None and "mfu" not in s  # CPU ranks: no known peak
