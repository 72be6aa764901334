"""configs/recipes/: a full fine-tuning and a LoRA recipe for each model family's preset (GPT-2 124M,
SmolLM2, Qwen2.5, Qwen3, Llama 3.2), every recipe a config sft_train accepts as written:
- `sft_train --plan --ranks N --memory-gib 80` on the file as it is, for each rank count N its comments
  run it on (`sft_train ...`: 1, `mpirun -np N sft_train ...`): its keys parse and validate, the batch
  splits over N ranks, and it fits 80 GB GPUs;
- one optimizer step of each on a tiny stand-in of the same family: the recipe's own keys, with
  key=value overrides only for the model's size (a tiny model of the same preset: its block, norms,
  RoPE and tying), the hardware (CPU, float32), the data (a small generated file) and the length of
  the run. A key the trainer does not know, or a value it rejects, fails here."""
import glob
import os
import re
import subprocess

import pytest

from harness import SFT_TRAIN, SOURCE, make_data, run_train

RECIPES = os.path.join(SOURCE, "configs", "recipes")
FAMILY_PRESETS = ["gpt2-124m", "smollm2-135m", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-1b"]
VOCAB, T = 64, 16

# Tiny dimensions per family; everything else (decoder block, q/k/v biases, q/k norms, RoPE base and
# scaling, tied head) stays the recipe's preset's.
TINY_GPT2 = dict(num_decoder_layers=2, num_heads=4, emb_dim=32, mlp_dim=64, vocab_size=VOCAB,
                 max_position_embeddings=T)
TINY_LLAMA = dict(num_decoder_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, emb_dim=32, mlp_dim=48,
                  vocab_size=VOCAB, max_position_embeddings=T)


def recipe_files():
    return sorted(glob.glob(os.path.join(RECIPES, "*.yml")))


def recipe_key(path, key):
    """The value of a top-level `key:` line of a recipe (recipes are flat YAML), without a comment."""
    with open(path) as f:
        for line in f:
            m = re.match(rf"^{re.escape(key)}:\s*(.*?)\s*(#.*)?$", line)
            if m:
                return m.group(1)
    return None


def test_every_family_has_a_full_and_a_lora_recipe():
    names = {os.path.basename(p) for p in recipe_files()}
    for preset in FAMILY_PRESETS:
        for kind in ("full", "lora"):
            assert f"{preset}-{kind}.yml" in names, f"configs/recipes/{preset}-{kind}.yml is missing"
    for preset in FAMILY_PRESETS:
        full, lora = (os.path.join(RECIPES, f"{preset}-{k}.yml") for k in ("full", "lora"))
        assert recipe_key(full, "model_name") == preset and recipe_key(lora, "model_name") == preset
        assert recipe_key(full, "lora_rank") in (None, "0"), f"{full}: a full fine-tuning recipe sets lora_rank"
        assert int(recipe_key(lora, "lora_rank")) > 0, f"{lora}: a LoRA recipe needs lora_rank > 0"


def header_rank_counts(path):
    """The rank counts of the `mpirun -np N sft_train` commands in a recipe's comments, and 1 for the
    plain `sft_train` one."""
    with open(path) as f:
        text = f.read()
    counts = [int(n) for n in re.findall(r"^#.*mpirun -np (\d+) sft_train", text, re.M)]
    if re.search(r"^#\s+sft_train configs/recipes/", text, re.M):
        counts.append(1)
    return sorted(set(counts))


@pytest.mark.parametrize("recipe", recipe_files(), ids=os.path.basename)
def test_recipe_plan_fits_80gb(recipe):
    ranks = header_rank_counts(recipe)
    assert ranks, f"{recipe}: its comments give no command to run it"
    for n in ranks:
        p = subprocess.run([SFT_TRAIN, "--plan", "--ranks", str(n), "--memory-gib", "80", recipe],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"sft_train --plan --ranks {n} {recipe}: exit {p.returncode}\n" \
                                  f"{p.stdout[-3000:]}\n{p.stderr}"
        assert "error" not in p.stderr


@pytest.mark.parametrize("recipe", recipe_files(), ids=os.path.basename)
def test_recipe_trains_one_step_on_a_tiny_standin(recipe, workdir):
    name = os.path.basename(recipe)[:-4]
    d = os.path.join(workdir, name)
    os.makedirs(d)
    train = make_data(os.path.join(d, "train.h5"), 64, T=T, vocab=VOCAB, seed=1)
    evals = make_data(os.path.join(d, "eval.h5"), 16, T=T, vocab=VOCAB, seed=2)
    preset = recipe_key(recipe, "model_name")
    tiny = TINY_GPT2 if preset.startswith("gpt2") else TINY_LLAMA
    overrides = dict(tiny, load_parameters_path='""', hardware="cpu", dtype="float32", weight_dtype="float32",
                     train_files=train, eval_files=evals, max_target_length=T, num_epochs="null", steps=1,
                     base_output_directory=os.path.join(d, "out"))
    if recipe_key(recipe, "hf_export_tokenizer") not in (None, '""', ""):
        overrides["hf_export_tokenizer"] = '""'  # the recipe's tokenizer is the real model's directory
    p = run_train(recipe, overrides, timeout=120)
    run_name = recipe_key(recipe, "run_name")
    run_dir = os.path.join(d, "out", run_name)
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "step_1")), p.stdout[-2000:]
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [line for line in f if '"loss"' in line]
    assert len(steps) == 1
    if recipe_key(recipe, "hf_export") == "true":
        lora = int(recipe_key(recipe, "lora_rank") or 0) > 0
        expect = "adapter_config.json" if lora else "config.json"
        assert os.path.exists(os.path.join(run_dir, "hf", expect))
