"""The memory plan's verdicts for the models users bring (issue 25): `sft_train --plan` for
Qwen3-4B, Llama-3.1-8B and a Llama-3.1-70B-shaped config (llama-3.1-8b with 80 layers, emb_dim
8192, mlp_dim 28672, 64 heads) on 8 and 64 GPUs of 80 GiB (hardware gpu, dtype and weight_dtype
bfloat16), at zero_stage 0 and 1, with and without remat, at the seed's per-device batch and at one
row; and on this machine's CPU ranks. Every figure is rank 0's, from the real run's memory plan.

  SFTDP_BUILD_DIR=build python3 bench/plan_table.py
Prints Markdown tables."""
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


def main():
    print("| model | parameters | GPUs × 80 GiB | T | rows per GPU × GA | zero_stage | remat | rank 0 needs | fits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model in MODELS.items():
        for ranks in (8, 64):
            for T, micro, ga in ((1024, 4, 4), (4096, 2, 8)):
                for stage in (0, 1):
                    for remat in ("false", "true"):
                        keys = model + GPU + [f"max_target_length={T}", f"per_device_batch_size={micro}",
                                              f"gradient_accumulation_steps={ga}", f"zero_stage={stage}",
                                              f"remat={remat}"]
                        needs, fits, params = plan(keys, ranks, 80)
                        print(f"| {name} | {params / 1e9:.2f} B | {ranks} | {T} | {micro} × {ga} | {stage} | {remat} | "
                              f"{needs} | {'yes' if fits else 'no'} |")
    print("\nThis machine's CPU ranks (MemAvailable shared by the ranks), smollm2-360m, T=1024, 1 row per rank:\n")
    print("| CPU ranks | zero_stage | remat | rank 0 needs | fits |")
    print("|---|---|---|---|---|")
    for ranks in (1, 2, 4):
        for stage in (0, 1):
            for remat in ("false", "true"):
                keys = ["model_name=smollm2-360m", "hardware=cpu", "max_target_length=1024",
                        "per_device_batch_size=1", f"zero_stage={stage}", f"remat={remat}"]
                needs, fits, _ = plan(keys, ranks)
                print(f"| {ranks} | {stage} | {remat} | {needs} | {'yes' if fits else 'no'} |")


if __name__ == "__main__":
    main()
