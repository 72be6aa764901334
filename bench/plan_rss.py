"""The memory plan against measured memory (issue 25): `sft_train --plan --ranks 4` for one model,
then the same run for real on 4 CPU ranks (2 steps, a checkpoint at the end), each rank's peak
resident memory from /usr/bin/time (%M), at zero_stage 0 to 3 (or those named). The plan's figure is
rank 0's total, and for ranks 1..3 its "total on ranks 1 to 3" row (the starting parameters on the
host instead of the parameters and both moments of a checkpoint). A process's own code, libraries
and MPI are not in the plan: the same run of gpt2-tiny (whose plan is a few MiB) measures them, and
its peak is reported beside.

  SFTDP_BUILD_DIR=build .pyref/bin/python bench/plan_rss.py [model_name] [T] [stages, e.g. 0,1,2,3]
Prints a Markdown table."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/integration"))
from harness import MPI_ENV, SFT_TRAIN, make_data, tempdir, write_config  # noqa: E402

MODEL = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
T = int(sys.argv[2]) if len(sys.argv) > 2 else 256
STAGES = [int(s) for s in sys.argv[3].split(",")] if len(sys.argv) > 3 else [0, 1, 2, 3]
WORLD = 4
VOCAB = {"gpt2-tiny": 264}


def config(d, model, vocab):
    data = f"{d}/train_{vocab}.h5"
    if not os.path.exists(data):
        make_data(data, 16, T=T, vocab=vocab, seed=1)
    return write_config(f"{d}/{model}.yml", model_name=model, run_name=model, base_output_directory=f"{d}/out",
                        train_files=data, max_target_length=T, global_batch_size=WORLD, steps=2,
                        checkpoint_period=2, hardware="cpu", log_period=1)


def planned(cfg, zero):
    p = subprocess.run([SFT_TRAIN, "--plan", "--ranks", str(WORLD), cfg, f"zero_stage={zero}"], capture_output=True,
                       text=True, env=dict(os.environ, **MPI_ENV), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr

    def row(name):  # the table has a column per zero_stage, 0 to 3
        m = re.search(rf"^\| {re.escape(name)} +\|(.*)$", p.stdout, re.M)
        cell = m.group(1).split("|")[zero].strip()
        value, unit = cell.split()
        return float(value) * (1024 if unit == "GiB" else 1)

    return row("total"), row(f"total on ranks 1 to {WORLD - 1}")


def measured(cfg, d, zero):
    out = f"{d}/rss_{os.path.basename(cfg)}_{zero}"
    os.makedirs(out, exist_ok=True)
    wrap = ["sh", "-c", f'exec /usr/bin/time -o "{out}/maxrss_kb.$OMPI_COMM_WORLD_RANK" -f "%M" "$@"', "sh"]
    cmd = ["mpirun", "-np", str(WORLD), "--oversubscribe"] + wrap + [
        SFT_TRAIN, cfg, f"zero_stage={zero}", f"run_name={os.path.basename(cfg)[:-4]}_{zero}"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **MPI_ENV), timeout=3600)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return [int(open(f"{out}/maxrss_kb.{r}").read().split()[-1]) / 1024 for r in range(WORLD)]


def main():
    d = tempdir()
    base = measured(config(d, "gpt2-tiny", 264), d, 0)
    print(f"{MODEL}, T={T}, {WORLD} CPU ranks x 1 row, 2 steps and a checkpoint; MiB. The process itself "
          f"(gpt2-tiny, same run): {max(base):.0f} MiB peak.\n")
    print("| zero_stage | rank | plan | measured peak RSS | measured / plan | measured − process / plan |")
    print("|---|---|---|---|---|---|")
    cfg = config(d, MODEL, VOCAB.get(MODEL, 49152))
    for zero in STAGES:
        plan0, plan_rest = planned(cfg, zero)
        rss = measured(cfg, d, zero)
        for r, m in enumerate(rss):
            plan = plan0 if r == 0 else plan_rest
            print(f"| {zero} | {r} | {plan:.0f} | {m:.0f} | {m / plan:.3f} | {(m - base[r]) / plan:.3f} |")


if __name__ == "__main__":
    main()
