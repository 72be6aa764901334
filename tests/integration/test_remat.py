"""remat (docs/SPEC.md §1, §3): sft_train with remat true recomputes each transformer block's
activations in backward instead of keeping them, and must train bitwise like remat false. One rank,
GA 2, packed segments, 3 blocks (two recomputed), 4 steps with evaluation, for GPT-2 and a
Llama-family model (Qwen3 q/k norm, untied head):
- per-step loss, grad norm and weight sum, the eval losses, and the final checkpoint's params and
  AdamW moments are bitwise equal with remat true and false;
- the start-up log reports the activation memory both ways, consistently between the two runs,
  smaller with remat."""
import re

import numpy as np
import pytest

from harness import TINY_MODEL, make_data, read_metrics, read_params, run_train, write_config

STEPS = 4
MODELS = {
    "gpt2": dict(TINY_MODEL, num_decoder_layers=3),
    "llama": dict(model_name="llama-tiny", decoder_block="qwen3", tie_word_embeddings=False, vocab_size=64,
                  num_decoder_layers=3),
}
LOG = re.compile(r"activations: ([0-9.]+) MiB on this rank, remat (true|false) \(([0-9.]+) MiB with remat")


@pytest.fixture(scope="module")
def runs(workdir):
    make_data(f"{workdir}/train.h5", STEPS * 4 + 1, seed=5, masked_rows={2}, segments=True)
    make_data(f"{workdir}/eval.h5", 6, seed=6, segments=True)
    done = {}

    def get(model, remat):
        if (model, remat) not in done:
            out = f"{workdir}/{model}_{remat}"
            cfg = write_config(f"{out}.yml", **dict(
                MODELS[model], run_name="r", base_output_directory=out, train_files=f"{workdir}/train.h5",
                eval_files=f"{workdir}/eval.h5", eval_interval=2, max_target_length=16, global_batch_size=4,
                gradient_accumulation_steps=2, steps=STEPS, learning_rate=3e-3, hardware="cpu", seed=3))
            p = run_train(cfg, {"remat": remat})
            ck = f"{out}/r/checkpoints/step_{STEPS}"
            done[(model, remat)] = (p.stdout + p.stderr, read_metrics(f"{out}/r"),
                                    {g: read_params(ck, g) for g in ("params", "opt/m", "opt/v")})
        return done[(model, remat)]
    return get


@pytest.mark.parametrize("model", list(MODELS))
def test_remat_trains_bitwise_like_keeping_activations(runs, model):
    _, (on_train, on_eval), on = runs(model, True)
    _, (off_train, off_eval), off = runs(model, False)
    assert len(on_train) == STEPS and on_train[0]["weight_sum"] > 0 and len(on_eval) >= 2
    keys = ("step", "loss", "grad_norm", "weight_sum")
    assert [[m[k] for k in keys] for m in on_train] == [[m[k] for k in keys] for m in off_train]
    assert [(m["step"], m["eval_loss"]) for m in on_eval] == [(m["step"], m["eval_loss"]) for m in off_eval]
    for g in off:
        assert on[g].keys() == off[g].keys()
        for k in off[g]:
            assert np.array_equal(on[g][k], off[g][k]), f"{g}/{k} differs with remat"


@pytest.mark.parametrize("model", list(MODELS))
def test_start_up_log_reports_activation_memory_both_ways(runs, model):
    logs = {}
    for remat in (True, False):
        m = LOG.search(runs(model, remat)[0])
        assert m, f"no activations line in the log:\n{runs(model, remat)[0]}"
        assert m.group(2) == ("true" if remat else "false")
        logs[remat] = (float(m.group(1)), float(m.group(3)))
    assert logs[True][0] == logs[False][1] and logs[False][0] == logs[True][1]
    assert logs[True][0] < logs[False][0]
