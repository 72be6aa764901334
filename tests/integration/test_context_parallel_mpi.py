"""Context parallelism (issue 37, docs/SPEC.md §1) end to end: the same 20-step run as (context
parallelism, ranks, GA) in {(1,1,1) reference, (2,2,1), (2,2,2), (2,4,1) = 2 data-parallel groups,
(4,4,1), (4,4,2)} gives the step-1 loss to 1e-6 rel, every step's loss to 1e-5, the same eval loss and
final parameters to 1e-4, for gpt2-tiny and a Llama-family model (GQA) on packed rows whose segments
end inside the ranks' chunks; so do zero_stage 1, 2 and 3 with context parallelism (sharded over the
whole world), and LoRA's adapters. A context-parallel run is bitwise the same run to run, and a checkpoint
resumes across any factorisation: written at context parallelism 4, resumed as 2 data-parallel ranks,
and the other way round, both ending where the reference ends."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from harness import (TINY_MODEL, make_data, max_rel, read_metrics, read_params, run_train, worst_tensors,
                     write_config)

G, STEPS = 8, 20
RUNS = [(2, 2, 1), (2, 2, 2), (2, 4, 1), (4, 4, 1), (4, 4, 2)]  # (context_parallelism, ranks, GA)
# ZeRO shards over the whole world (SPEC §1): (context_parallelism, ranks, zero_stage)
ZERO = [(2, 4, 1), (2, 2, 2), (4, 4, 3)]
MODELS = {
    "gpt2": (TINY_MODEL, False),
    "llama": (dict(model_name="llama-tiny", decoder_block="llama", num_heads=4, num_kv_heads=2, emb_dim=32,
                   mlp_dim=64, vocab_size=64, tie_word_embeddings=False), True),
}


def pack_unevenly(path, seed):
    """Two segments a row, cut at a random place (not on a chunk boundary as a rule), positions restarting."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "r+") as f:
        n, T = f["inputs"].shape
        cuts = rng.integers(1, T, size=n)
        t = np.arange(T)[None, :]
        f["segment_ids"][...] = np.where(t < cuts[:, None], 1, 2).astype(np.int32)
        f["positions"][...] = np.where(t < cuts[:, None], t, t - cuts[:, None]).astype(np.int32)


@pytest.fixture(scope="module")
def setup(workdir):
    made = {}

    def make(model):
        if model not in made:
            keys, packed = MODELS[model]
            d = f"{workdir}/{model}"
            os.makedirs(d)
            make_data(f"{d}/train.h5", G * STEPS + 3, seed=21, masked_rows={0, 9}, segments=packed)
            make_data(f"{d}/eval.h5", 12, seed=22, segments=packed)
            if packed:
                pack_unevenly(f"{d}/train.h5", 23)
                pack_unevenly(f"{d}/eval.h5", 24)
            base = dict(keys, run_name="c", train_files=f"{d}/train.h5", eval_files=f"{d}/eval.h5",
                        max_target_length=16, global_batch_size=G, num_epochs=1, learning_rate=3e-3,
                        warmup_steps_fraction=0.1, enable_data_shuffling=True, data_shuffle_seed=4,
                        hardware="cpu", seed=7, eval_interval=10, checkpoint_period=10)
            made[model] = d, write_config(f"{d}/c.yml", **base)
        return made[model]
    return make


def train(setup, model, cp, ranks, ga, name, extra=None):
    """(train metrics, eval metrics, step-20 params, stdout, output dir) of one run."""
    d, cfg = setup(model)
    out = f"{d}/{name}"
    keys = {"base_output_directory": out, "context_parallelism": cp, "gradient_accumulation_steps": ga}
    p = run_train(cfg, dict(keys, **(extra or {})), np_=ranks)
    t, e = read_metrics(f"{out}/c")
    return t, e, read_params(f"{out}/c/checkpoints/step_{STEPS}"), p.stdout, out


@pytest.fixture(scope="module")
def runs(setup):
    done = {}

    def get(model):
        if model not in done:
            done[model] = {(1, 1, 1): train(setup, model, 1, 1, 1, "ref")}
            for cp, ranks, ga in RUNS:
                done[model][(cp, ranks, ga)] = train(setup, model, cp, ranks, ga, f"cp{cp}w{ranks}ga{ga}")
        return done[model]
    return get


def expect_reference(got, ref, what, note):
    t, e, params = got[:3]
    rt, re_, rparams = ref[:3]
    assert len(t) == len(rt) == STEPS, f"{what}: {len(t)} steps, want {STEPS}"
    assert [m["weight_sum"] for m in t] == [m["weight_sum"] for m in rt], f"{what}: the same rows every step"
    first = abs(t[0]["loss"] - rt[0]["loss"]) / rt[0]["loss"]
    worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(t, rt))
    rel = max_rel(params, rparams)
    eval_rel = abs(e[-1]["eval_loss"] - re_[-1]["eval_loss"]) / re_[-1]["eval_loss"]
    note(f"{what}: step-1 loss rel {first:.1e}, worst step {worst:.1e}, params {rel:.1e}, eval {eval_rel:.1e}")
    assert first <= 1e-6, f"{what}: step-1 loss within 1e-6 rel ({first:.2e})"
    assert worst <= 1e-5, f"{what}: every step's loss within 1e-5 rel ({worst:.2e})"
    assert rel <= 1e-4, f"{what}: final params within 1e-4 ({rel:.2e}); {worst_tensors(params, rparams)}"
    assert eval_rel <= 1e-5, f"{what}: eval loss ({eval_rel:.2e})"


@pytest.mark.parametrize("model, cp, ranks, ga", [(m, *r) for m in MODELS for r in RUNS],
                         ids=[f"{m}-cp{r[0]}-ranks{r[1]}-GA{r[2]}" for m in MODELS for r in RUNS])
def test_factorisation_matches_reference(runs, model, cp, ranks, ga, note):
    got = runs(model)[(cp, ranks, ga)]
    expect_reference(got, runs(model)[(1, 1, 1)], f"{model} context_parallelism {cp} x {ranks} ranks x GA {ga}",
                     note)
    assert f"context_parallelism {cp}" in got[3], "the start-up log names the layout"


@pytest.mark.parametrize("model, cp, ranks, stage", [(m, *z) for m in MODELS for z in ZERO],
                         ids=[f"{m}-cp{z[0]}-ranks{z[1]}-zero{z[2]}" for m in MODELS for z in ZERO])
def test_zero_stages_with_context_parallelism(setup, runs, model, cp, ranks, stage, note):
    got = train(setup, model, cp, ranks, 1, f"cp{cp}w{ranks}zero{stage}", {"zero_stage": stage})
    expect_reference(got, runs(model)[(1, 1, 1)], f"{model} context_parallelism {cp} x {ranks} ranks, zero_stage "
                     f"{stage}", note)


def test_lora_with_context_parallelism(setup, note):
    """LoRA's adapters (all linear modules) train the same at context_parallelism 2 as on one rank, dropout
    included (issue 43: each rank draws the whole rows' masks at its global positions)."""
    lora = {"lora_rank": 4, "lora_target_modules": "all-linear", "learning_rate": 1e-2, "lora_dropout": 0.25}
    ref = train(setup, "llama", 1, 1, 1, "lora_ref", lora)
    got = train(setup, "llama", 2, 2, 1, "lora_cp2", lora)
    expect_reference(got, ref, "llama LoRA context_parallelism 2 x 2 ranks", note)


def test_bitwise_run_to_run(setup, runs):
    a = runs("llama")[(4, 4, 2)]
    b = train(setup, "llama", 4, 4, 2, "again")
    assert [m["loss"] for m in a[0]] == [m["loss"] for m in b[0]], "the same losses, bit for bit"
    assert all(np.array_equal(a[2][k], b[2][k]) for k in a[2]), "the same parameters, bit for bit"


@pytest.mark.parametrize("first, then", [((4, 4, 1), (1, 2, 1)), ((1, 2, 1), (4, 4, 1))],
                         ids=["cp4-then-2-data-parallel-ranks", "2-data-parallel-ranks-then-cp4"])
def test_resume_across_factorisations(setup, runs, first, then, note):
    """A run in one layout, cut back to its step-10 checkpoint (what a crash after it leaves), resumed
    in the other layout for the last 10 steps."""
    d, _ = setup("llama")
    done = runs("llama")
    full = done[first] if first in done else train(setup, "llama", *first, f"cp{first[0]}w{first[1]}")
    out = f"{d}/resume_cp{first[0]}w{first[1]}_to_cp{then[0]}w{then[1]}"
    shutil.copytree(full[4], out)
    shutil.rmtree(f"{out}/c/checkpoints/step_{STEPS}")
    with open(f"{out}/c/metrics.jsonl") as f:
        lines = [l for l in f if json.loads(l).get("step", 0) <= 10]
    with open(f"{out}/c/metrics.jsonl", "w") as f:
        f.writelines(lines)
    _, cfg = setup("llama")
    p = run_train(cfg, {"base_output_directory": out, "context_parallelism": then[0],
                        "gradient_accumulation_steps": then[2]}, np_=then[1])
    assert "resuming from" in p.stdout + p.stderr, "the second run resumes from step 10"
    t, e = read_metrics(f"{out}/c")
    got = (t, e, read_params(f"{out}/c/checkpoints/step_{STEPS}"))
    expect_reference(got, done[(1, 1, 1)], f"context_parallelism {first[0]} on {first[1]} ranks, resumed at "
                     f"{then[0]} on {then[1]} ranks", note)
