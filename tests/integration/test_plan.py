"""sft_train --plan (src/train/plan.h): the memory plan of a config for a cluster this machine need
not be part of, from the real run's own plan, with nothing allocated, no data file opened, no MPI.
- Each Llama-family preset is the released model: its dimensions are the public config.json values
  written here, and its parameter count is that of the transformers model of the same values
  (built on no memory, accelerate's init_empty_weights). transformers 4.44 has no Qwen3: a Qwen3
  model is Mistral's shapes (explicit head_dim, no biases) plus a q_norm and a k_norm of head_dim
  weights per layer.
- The plan's figures are the real run's: the `memory: this rank needs ...` line of a run on 1 and 2
  CPU ranks (zero_stage 0 to 3) is the plan's for --ranks 1 and 2; on the CUDA simulator too (zero_stage
  0 on one GPU, 3 on two).
- What does not fit is the real run's `error: memory:` line, exit 2, with what would fit: the least
  zero_stage that fits among them. The table has a column per zero_stage, 0 to 3. Llama-3.1-8B at
  T=4096 with remat fits 8 x 80 GiB at zero_stage 2 and 3, not at 0 or 1.
- Bad flags are one `error:` line naming the flag, exit 2."""
import os
import re
import subprocess

import pytest

from harness import MPI_ENV, SFT_TRAIN, SOURCE, TINY_MODEL, make_data, run_train, simulator_build, write_config

# public config.json values: (transformers class, keys)
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
LLAMA32_ROPE = dict(LLAMA31_ROPE, factor=32.0)
RELEASED = {
    "smollm2-135m": ("llama", dict(num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                                   num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
                                   rope_theta=100000, rms_norm_eps=1e-5, tie_word_embeddings=True)),
    "qwen2.5-0.5b": ("qwen2", dict(num_hidden_layers=24, hidden_size=896, intermediate_size=4864, num_attention_heads=14,
                                   num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                                   rope_theta=1000000, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "qwen3-0.6b": ("qwen3", dict(num_hidden_layers=28, hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                                 rope_theta=1000000, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "llama-3.2-1b": ("llama", dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                                   rope_theta=500000, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                   rope_scaling=LLAMA32_ROPE)),
    "qwen3-1.7b": ("qwen3", dict(num_hidden_layers=28, hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                                 rope_theta=1000000, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "qwen3-4b": ("qwen3", dict(num_hidden_layers=36, hidden_size=2560, intermediate_size=9728, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                               rope_theta=1000000, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "llama-3.1-8b": ("llama", dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                                   rope_theta=500000, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                   rope_scaling=LLAMA31_ROPE)),
    "qwen3-8b": ("qwen3", dict(num_hidden_layers=36, hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                               rope_theta=1000000, rms_norm_eps=1e-6, tie_word_embeddings=False)),
}


def plan(config, *args, overrides=()):
    return subprocess.run([SFT_TRAIN, "--plan", *args, config, *overrides], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, **MPI_ENV))


def transformers_parameters(family, keys):
    transformers = pytest.importorskip("transformers")
    accelerate = pytest.importorskip("accelerate")
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
                    "qwen3": transformers.MistralConfig}[family]
    cfg = config_class(**keys)
    with accelerate.init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.tie_weights()  # init_empty_weights leaves the head its own meta tensor until tied again
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == keys["tie_word_embeddings"]
    n = sum(p.numel() for p in model.parameters())  # a tied head is one tensor
    if family == "qwen3":
        assert model.model.layers[0].self_attn.q_proj.weight.shape[0] == keys["num_attention_heads"] * keys["head_dim"]
        n += keys["num_hidden_layers"] * 2 * keys["head_dim"]  # Qwen3Attention's q_norm and k_norm
    return n


@pytest.mark.parametrize("preset", list(RELEASED))
def test_presets_are_the_released_models(tmp_path, preset):
    family, keys = RELEASED[preset]
    cfg = write_config(f"{tmp_path}/c.yml", model_name=preset, train_files=f"{tmp_path}/none.h5", hardware="cpu",
                       max_target_length=16, global_batch_size=1)
    p = plan(cfg, "--memory-gib", "1000000")
    assert p.returncode == 0, p.stdout + p.stderr
    head = re.search(r"^plan: .*?(\d+) parameters", p.stdout, re.M)
    assert head, p.stdout
    model = re.search(r"^plan: model: (\d+) layers, emb_dim (\d+), mlp_dim (\d+), (\d+) heads \((\d+) k/v\) of (\d+), "
                      r"vocab_size (\d+), max_position_embeddings (\d+), rope_theta ([\d.e+-]+), rms_norm_eps ([\d.e+-]+)"
                      r"(?:, llama3 rope scaling \(factor ([\d.]+), low ([\d.]+), high ([\d.]+), original (\d+)\))?, "
                      r"head (tied|untied)$", p.stdout, re.M)
    assert model, p.stdout
    g = model.groups()
    head_dim = keys.get("head_dim", keys["hidden_size"] // keys["num_attention_heads"])
    assert [int(x) for x in g[:8]] == [keys["num_hidden_layers"], keys["hidden_size"], keys["intermediate_size"],
                                       keys["num_attention_heads"], keys["num_key_value_heads"], head_dim,
                                       keys["vocab_size"], keys["max_position_embeddings"]]
    assert float(g[8]) == keys["rope_theta"] and float(g[9]) == keys["rms_norm_eps"]
    scaling = keys.get("rope_scaling")
    assert (g[10] is not None) == (scaling is not None)
    if scaling:
        assert [float(g[10]), float(g[11]), float(g[12]), int(g[13])] == [
            scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"],
            scaling["original_max_position_embeddings"]]
    assert g[14] == ("tied" if keys["tie_word_embeddings"] else "untied")
    assert int(head.group(1)) == transformers_parameters(family, keys)


def tiny_config(d, **extra):
    make_data(f"{d}/train.h5", 16, seed=1)
    keys = dict(TINY_MODEL, run_name="r", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
                max_target_length=16, global_batch_size=4, steps=1, hardware="cpu")
    return write_config(f"{d}/c.yml", **{**keys, **extra})  # extra wins (hardware="gpu")


def needs(text, prefix):
    m = re.search(rf"{prefix}memory: this rank needs (.+?)(?: of [\d.]+ MiB available| but |$)", text, re.M)
    assert m, text
    return m.group(1)


@pytest.mark.parametrize("ranks,stage", [(1, 0), (2, 0), (2, 1), (2, 2), (2, 3)])
def test_the_plan_is_the_real_runs_plan(tmp_path, ranks, stage):
    # Wide enough (3.2 M parameters) that describe()'s 0.1 MiB tells the stages' shards and slots apart.
    cfg = tiny_config(str(tmp_path), zero_stage=stage, num_decoder_layers=4, emb_dim=256, mlp_dim=1024, num_heads=4)
    run = run_train(cfg, np_=ranks)
    p = plan(cfg, "--ranks", str(ranks))
    assert p.returncode == 0, p.stdout + p.stderr
    assert needs(p.stdout, "plan: ") == needs(run.stdout + run.stderr, "")
    assert re.search(r"^\| component +\| +zero_stage 0 \| +zero_stage 1 \| +zero_stage 2 \| +zero_stage 3 \|$",
                     p.stdout, re.M), p.stdout
    assert "not built yet" not in p.stdout


@pytest.mark.skipif(not simulator_build(), reason="needs the CUDA simulator build")
@pytest.mark.parametrize("ranks,stage", [(1, 0), (2, 3)])
def test_the_gpu_plan_is_the_simulated_runs_plan(tmp_path, ranks, stage):
    cfg = tiny_config(str(tmp_path), hardware="gpu", dtype="bfloat16", zero_stage=stage)
    run = run_train(cfg, np_=ranks, env_extra={"SFTDP_SIM_DEVICES": str(ranks)})
    p = plan(cfg, "--ranks", str(ranks), "--memory-gib", "16")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(cuda-bf16 kernels)" in p.stdout
    assert needs(p.stdout, "plan: ") == needs(run.stdout + run.stderr, "")


def test_what_does_not_fit_is_the_real_runs_error(tmp_path):
    d = str(tmp_path)
    cfg = write_config(f"{d}/c.yml", model_name="llama-3.1-8b", train_files=f"{d}/none.h5", hardware="gpu",
                       dtype="bfloat16", max_target_length=4096, global_batch_size=64, base_output_directory=f"{d}/out")
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80")
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: memory: this rank needs "), p.stderr
    assert "but 80.00 GiB is available (--memory-gib 80 per GPU)" in lines[0]
    assert "| AdamW moments" in p.stdout and "zero_stage 3 |" in p.stdout
    assert not (tmp_path / "out").exists()
    # Llama-3.1-8B full fine-tuning at T=4096 with remat, one row per GPU: zero_stage 2 and 3 fit 8 x 80 GiB,
    # 0 and 1 do not; at zero_stage 0 the error names the least stage that fits.
    llama = ["per_device_batch_size=1", "global_batch_size=null", "gradient_accumulation_steps=8", "remat=true"]
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80", overrides=llama + ["zero_stage=3"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^\| fits +\| +no \| +no \| +yes \| +yes \|$", p.stdout, re.M), p.stdout
    assert re.search(r"^plan: fits \(zero_stage 3, remat true\)$", p.stdout, re.M), p.stdout
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80", overrides=llama + ["zero_stage=0"])
    assert p.returncode == 2, p.stdout + p.stderr
    assert re.search(r"; would fit: zero_stage: 2 \([\d.]+ GiB\)$", p.stderr.strip()), p.stderr
    # The seed's Qwen3-4B run on 8 GPUs (per_device_batch_size 4, GA 4, T=1024) fits at zero_stage 1.
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80",
             overrides=["model_name=qwen3-4b", "max_target_length=1024", "global_batch_size=null",
                        "per_device_batch_size=4", "gradient_accumulation_steps=4", "zero_stage=1"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^plan: fits \(zero_stage 1, remat false\)$", p.stdout, re.M), p.stdout
    assert re.search(r"^\| fits +\| +no \| +yes \| +yes \| +yes \|$", p.stdout, re.M), p.stdout  # zero_stage 0 would not


def test_context_parallelism_fits_llama_8b_at_64k_and_128k(tmp_path):
    """Issue 37: Llama-3.1-8B full fine-tuning (zero_stage 3, remat, 1 row x GA 16, bf16 GEMMs) on 8 x 80 GiB
    does not fit at T = 65536 or 131072 with every rank holding whole rows; it does at 131072 with
    context_parallelism 8 and at 65536 with 4 (x 2 data-parallel groups), and the plan's activations per rank
    shrink with the group (T/N positions each), in bf16 as without context parallelism (issue 43).
    --context-parallelism N is the key's flag."""
    d = str(tmp_path)
    cfg = write_config(f"{d}/c.yml", model_name="llama-3.1-8b", train_files=f"{d}/none.h5", hardware="gpu",
                       dtype="bfloat16", weight_dtype="bfloat16", per_device_batch_size=1,
                       gradient_accumulation_steps=16, zero_stage=3, remat=True)

    def activations(p):
        row = re.search(r"^\| activations +\| +([\d.]+) GiB \|", p.stdout, re.M)
        return float(row.group(1))

    for T in (65536, 131072):
        p = plan(cfg, "--ranks", "8", "--memory-gib", "80", overrides=[f"max_target_length={T}"])
        assert p.returncode == 2 and "error: memory: this rank needs" in p.stderr, p.stdout + p.stderr
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80", "--context-parallelism", "8", overrides=["max_target_length=131072"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^plan: fits \(zero_stage 3, remat true\)$", p.stdout, re.M), p.stdout
    assert "context_parallelism 8: 1 data-parallel group(s) of 8 adjacent ranks; each rank holds 16384 of every " \
           "row's 131072 positions" in p.stdout, p.stdout
    cp8 = activations(p)
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80", overrides=["max_target_length=65536", "context_parallelism=4"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "global batch 32 = 2 data-parallel group(s) x GA 16 x 1 rows" in p.stdout, p.stdout
    cp4 = activations(p)
    # Both hold 16384 positions per rank; the gathered k/v buffers grow with T (the whole rows' keys).
    assert cp8 > cp4 > 0.9 * cp8, (cp4, cp8)
    # Issue 43: dtype bfloat16 keeps bf16 activations with context parallelism too (the act16 path's context-parallel
    # attention on tensor cores, k/v gathered as bf16): at most 0.8x the float32 plan's.
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80",
             overrides=["max_target_length=65536", "context_parallelism=4", "dtype=float32", "weight_dtype=float32"])
    f32 = activations(p)
    assert cp4 <= 0.8 * f32, (cp4, f32)


def test_a_larger_stage_1_gradient_row_is_explained(tmp_path):
    """bf16 weights at zero_stage 1 keep the full fp32 gradient buffer beside the slots and the shard it is
    reduce-scattered into: larger than stage 0's row, which a note says is no bug (issue 35)."""
    d = str(tmp_path)
    cfg = write_config(f"{d}/c.yml", model_name="smollm2-135m", train_files=f"{d}/none.h5", hardware="gpu",
                       dtype="bfloat16", weight_dtype="bfloat16", max_target_length=1024, global_batch_size=8)
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80")
    assert p.returncode == 0, p.stdout + p.stderr
    row = re.search(r"^\| gradient sums +\| +([\d.]+) (MiB|GiB) \| +([\d.]+) (MiB|GiB) \|", p.stdout, re.M)
    assert row and row.group(2) == row.group(4) == "MiB" and float(row.group(3)) > float(row.group(1)), p.stdout
    notes = [line for line in p.stdout.splitlines() if line.startswith("plan: note: gradient sums are larger at "
                                                                       "zero_stage 1 than at 0 here")]
    assert len(notes) == 1 and "full fp32 gradient buffer" in notes[0], p.stdout
    p = plan(cfg, "--ranks", "8", "--memory-gib", "80", overrides=["weight_dtype=float32"])
    assert p.returncode == 0 and "plan: note: gradient sums" not in p.stdout, "no note where stage 1 is not larger"


@pytest.mark.parametrize("args,key", [(["--ranks", "0"], "--ranks"), (["--ranks", "two"], "--ranks"),
                                      (["--ranks-per-node", "-1"], "--ranks-per-node"),
                                      (["--memory-gib", "0"], "--memory-gib"), (["--memory-gib"], "--memory-gib"),
                                      (["--nodes", "2"], "--nodes")])
def test_bad_flags_are_one_error_line(tmp_path, args, key):
    cfg = tiny_config(str(tmp_path))
    p = plan(cfg, *args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith(f"error: {key}: ") and p.stderr.count("\n") == 1, p.stderr


def test_the_seed_recipe_fits_as_its_comments_say():
    """configs/recipes/qwen3-4b-seed.yml: the plan's figures in its comments are the plan's today."""
    recipe = os.path.join(SOURCE, "configs", "recipes", "qwen3-4b-seed.yml")
    p = plan(recipe, "--ranks", "8", "--memory-gib", "80")
    assert p.returncode == 0, p.stdout + p.stderr
    with open(recipe) as f:
        text = f.read()
    total = re.search(r"^\| total +\| +([\d.]+) GiB \| +([\d.]+) GiB \|( +[\d.]+ GiB \|){2}$", p.stdout, re.M)
    remat = re.search(r"^\| total with remat true +\| +[\d.]+ GiB \| +([\d.]+) GiB \|( +[\d.]+ GiB \|){2}$",
                      p.stdout, re.M)
    assert total and remat, p.stdout
    assert f"zero_stage 0: {total.group(1)} GiB" in text and "does not fit" in text
    assert f"zero_stage 1: {total.group(2)} GiB" in text and f"with remat: true {remat.group(1)} GiB" in text
    assert re.search(r"^\| fits +\| +no \| +yes \| +yes \| +yes \|$", p.stdout, re.M), p.stdout
