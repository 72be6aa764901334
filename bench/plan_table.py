"""The memory plan's verdicts for the models users bring (issue 25): `sft_train --plan` for
Qwen3-4B, Llama-3.1-8B and a Llama-3.1-70B-shaped config (llama-3.1-8b with 80 layers, emb_dim
8192, mlp_dim 28672, 64 heads) on 8 and 64 GPUs of 80 GiB (hardware gpu, dtype and weight_dtype
bfloat16), at zero_stage 0 to 3, with and without remat, at the seed's settings (T=1024, 4 rows per
GPU x GA 4) and at T=4096 (2 rows x GA 8, and 1 row x GA 16); and on this machine's CPU ranks. Every
figure is rank 0's, from the real run's memory plan. weight_dtype: bfloat16 stores the parameters as
bf16 at zero_stage 1, 2 and 3 (fp32 masters in the optimiser's shard) and as float32 at 0 (the
masters, with the GEMMs' bf16 copy beside them); gradient sums are float32 at every stage.

  SFTDP_BUILD_DIR=build python3 bench/plan_table.py
Prints Markdown tables (a few seconds: the plan allocates nothing)."""
import os
import re
import subprocess
import sys
import tempfile

BUILD = os.environ.get("SFTDP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../build"))
SFT_TRAIN = os.path.join(BUILD, "sft_train")

MODELS = {
    "Qwen3-4B": ["model_name=qwen3-4b"],
    "Llama-3.1-8B": ["model_name=llama-3.1-8b"],
    "Llama-3.1-70B": ["model_name=llama-3.1-8b", "num_decoder_layers=80", "emb_dim=8192", "mlp_dim=28672",
                      "num_heads=64"],
}
GPU = ["hardware=gpu", "dtype=bfloat16", "weight_dtype=bfloat16"]


def plan(keys, ranks, memory_gib=None):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("train_files: none.h5\n")
    args = [SFT_TRAIN, "--plan", "--ranks", str(ranks)] + (["--memory-gib", str(memory_gib)] if memory_gib else [])
    p = subprocess.run(args + [f.name] + keys, capture_output=True, text=True, timeout=120)
    os.unlink(f.name)
    if p.returncode not in (0, 2):
        sys.exit(p.stdout + p.stderr)
    needs = re.search(r"this rank needs ([\d.]+ [GM]iB)", p.stdout + p.stderr)
    params = re.search(r"(\d+) parameters", p.stdout)
    return needs.group(1), p.returncode == 0, int(params.group(1)) if params else 0


STAGES = (0, 1, 2, 3)
SHAPES = ((1024, 4, 4), (4096, 2, 8), (4096, 1, 16))  # T, rows per GPU, GA: the seed's, then long context


def main():
    print("weight_dtype: bfloat16 stores bf16 parameters (2 bytes each) at zero_stage 1 to 3, fp32 masters "
          "in the optimiser's shard; at zero_stage 0 the fp32 parameters and their bf16 copy for the GEMMs. "
          "Gradient sums are float32 (4 bytes each) throughout.\n")
    print("| model | parameters | GPUs × 80 GiB | T | rows per GPU × GA | remat | "
          + " | ".join(f"zero_stage {s}" for s in STAGES) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(STAGES))
    for name, model in MODELS.items():
        for ranks in (8, 64):
            for T, micro, ga in SHAPES:
                for remat in ("false", "true"):
                    cells, params = [], 0
                    for stage in STAGES:
                        keys = model + GPU + [f"max_target_length={T}", f"per_device_batch_size={micro}",
                                              f"gradient_accumulation_steps={ga}", f"zero_stage={stage}",
                                              f"remat={remat}"]
                        needs, fits, params = plan(keys, ranks, 80)
                        cells.append(f"{needs} {'fits' if fits else 'no'}")
                    print(f"| {name} | {params / 1e9:.2f} B | {ranks} | {T} | {micro} × {ga} | {remat} | "
                          + " | ".join(cells) + " |")
    print("\nThis machine's CPU ranks (MemAvailable shared by the ranks), smollm2-360m, T=1024, 1 row per rank:\n")
    print("| CPU ranks | remat | " + " | ".join(f"zero_stage {s}" for s in STAGES) + " |")
    print("|---|---|" + "---|" * len(STAGES))
    for ranks in (1, 2, 4):
        for remat in ("false", "true"):
            cells = []
            for stage in STAGES:
                keys = ["model_name=smollm2-360m", "hardware=cpu", "max_target_length=1024",
                        "per_device_batch_size=1", f"zero_stage={stage}", f"remat={remat}"]
                needs, fits, _ = plan(keys, ranks)
                cells.append(f"{needs} {'fits' if fits else 'no'}")
            print(f"| {ranks} | {remat} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
