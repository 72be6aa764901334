"""ZeRO-1 memory per rank (issue 11): runs sft_train for 2 steps at world 1, 2, 4 with zero_stage 0
and 1 on one model and reports, per rank, the AdamW moments the optimizer allocated (its log line)
and the measured peak resident memory (/usr/bin/time's maximum RSS of each rank's process).
Rank 0's peak includes writing the final checkpoint (host copies of params, m and v in the global
layout, whatever the stage), so the steady-state saving shows on ranks 1..W-1.

  SFTDP_BUILD_DIR=build /work/main/.pyref/bin/python bench/zero1_memory.py [emb_dim layers vocab]
Prints a Markdown table."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/integration"))
from harness import MPI_ENV, SFT_TRAIN, make_data, tempdir, write_config  # noqa: E402

C, L, V = (int(x) for x in (sys.argv[1:4] if len(sys.argv) >= 4 else (512, 4, 8192)))
T = 32


def run(cfg, out, world, zero):
    # each rank's peak RSS into its own file: ranks writing to one stderr interleave their lines
    os.makedirs(out, exist_ok=True)
    wrap = ["sh", "-c", f'exec /usr/bin/time -o "{out}/maxrss_kb.$OMPI_COMM_WORLD_RANK" -f "%M" "$@"', "sh"]
    cmd = wrap + [SFT_TRAIN, cfg, f"base_output_directory={out}", f"zero_stage={zero}"]
    if world > 1:
        cmd = ["mpirun", "-np", str(world), "--oversubscribe"] + cmd
    env = dict(os.environ, **MPI_ENV, OMPI_COMM_WORLD_RANK=os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    m = re.search(r"AdamW moments ([0-9.]+) MiB on this rank \((\d+) of (\d+) floats", p.stdout)
    rss = {r: int(open(f"{out}/maxrss_kb.{r}").read().split()[-1]) / 1024 for r in range(world)}
    assert m and len(rss) == world, (p.stdout[-2000:], p.stderr[-2000:])
    return float(m.group(1)), int(m.group(2)), int(m.group(3)), rss


def main():
    d = tempdir()
    make_data(f"{d}/train.h5", 16, T=T, vocab=V, seed=1)
    cfg = write_config(f"{d}/c.yml", model_name="gpt2-tiny", num_decoder_layers=L, num_heads=8,
                       emb_dim=C, mlp_dim=4 * C, vocab_size=V, max_position_embeddings=T,
                       run_name="m", train_files=f"{d}/train.h5", max_target_length=T,
                       global_batch_size=4, steps=2, hardware="cpu", seed=1)
    print(f"model: GPT-2 L{L} C{C} V{V} (T={T}, global batch 4, 2 steps)\n")
    print("| world | zero_stage | params P | moment floats per rank (m, v each) | AdamW moments per rank (MiB) "
          "| peak RSS rank 0 (MiB) | peak RSS ranks 1..W-1 (MiB, max) |")
    print("|---|---|---|---|---|---|---|")
    for world, zero in [(1, 0), (2, 0), (2, 1), (4, 0), (4, 1)]:
        mib, owned, total, rss = run(cfg, f"{d}/w{world}z{zero}", world, zero)
        others = f"{max(v for r, v in rss.items() if r > 0):.0f}" if world > 1 else "–"
        print(f"| {world} | {zero} | {total} | {owned} | {mib:.1f} | {rss[0]:.0f} | {others} |", flush=True)


if __name__ == "__main__":
    main()
