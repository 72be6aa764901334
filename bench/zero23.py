"""ZeRO-2/3 on CPU ranks (issue 25): per-rank memory and step time at zero_stage 0, 1, 2 and 3.

Runs sft_train on W CPU ranks (default 4) for a few steps of one model (default smollm2-135m, seeded
init, T tokens per row, 1 row per rank per micro-step) at each stage and GA 1 and 4, and prints two
Markdown tables:
- memory: per rank, what the optimiser and ZeRO hold (AdamW moments; ZeRO's shards and unit slots;
  the model's own parameters and gradient buffer, from the memory plan's start-up line) — the model
  state — and the measured peak RSS of ranks 1..W-1 (rank 0 also writes the final checkpoint, whose
  host copies are the global layout at every stage); the ratio of each stage's model state to stage 0's;
- time: the median step time (metrics.jsonl, the first step dropped) at GA 1 and 4, and its ratio to
  zero_stage 0 at the same GA: what the per-micro-step reduce-scatters (2, 3) and the per-unit
  all-gathers (3) cost on this machine. Runs alternate stages within a round, two rounds.

  SFTDP_BUILD_DIR=build .pyref/bin/python bench/zero23.py [--model smollm2-135m] [--ranks 4] [--T 128] [--vocab V]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/integration"))
from harness import MPI_ENV, SFT_TRAIN, make_data, tempdir, write_config  # noqa: E402

MIB = re.compile(r"([0-9.]+) (GiB|MiB)")


def mib(text):
    v, unit = MIB.match(text).groups()
    return float(v) * (1024 if unit == "GiB" else 1)


def run(cfg, out, world, zero, ga, steps):
    os.makedirs(out, exist_ok=True)
    wrap = ["sh", "-c", f'exec /usr/bin/time -o "{out}/maxrss_kb.$OMPI_COMM_WORLD_RANK" -f "%M" "$@"', "sh"]
    cmd = ["mpirun", "-np", str(world), "--oversubscribe"] + wrap + [
        SFT_TRAIN, cfg, f"base_output_directory={out}", f"zero_stage={zero}", f"gradient_accumulation_steps={ga}",
        f"global_batch_size={world * ga}", f"steps={steps}"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **MPI_ENV), timeout=3600)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    plan = re.search(r"memory: this rank needs [^(]+\(parameters ([0-9.]+ [GM]iB), gradient sums ([0-9.]+ [GM]iB), "
                     r"AdamW moments ([0-9.]+ [GM]iB)", p.stdout)
    moments = float(re.search(r"AdamW moments ([0-9.]+) MiB on this rank", p.stdout).group(1))
    z = re.search(r"zero_stage \d: gradient-sum and master shards plus unit slots ([0-9.]+) MiB", p.stdout)
    rss = [int(open(f"{out}/maxrss_kb.{r}").read().split()[-1]) / 1024 for r in range(world)]
    with open(f"{out}/m/metrics.jsonl") as f:
        times = [j["step_time_s"] for j in map(json.loads, f) if "step_time_s" in j]
    return dict(plan_params=mib(plan.group(1)), plan_grads=mib(plan.group(2)), moments=moments,
                zero=float(z.group(1)) if z else 0.0, rss_others=max(rss[1:]) if world > 1 else rss[0],
                step_ms=1e3 * statistics.median(times[1:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--T", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=49152, help="the data's token ids: below the model's vocab_size")
    a = ap.parse_args()
    d = tempdir()
    make_data(f"{d}/train.h5", a.ranks * 4 * (a.steps + 1), T=a.T, vocab=a.vocab, seed=1)
    cfg = write_config(f"{d}/c.yml", model_name=a.model, run_name="m", train_files=f"{d}/train.h5",
                       max_target_length=a.T, hardware="cpu", seed=1, checkpoint_period=0, eval_interval=0,
                       param_check_period=0)
    stages = [0, 1, 2, 3]
    res = {}
    for rnd in range(a.rounds):
        for ga in (1, 4):
            for zero in (stages if rnd % 2 == 0 else stages[::-1]):
                r = run(cfg, f"{d}/r{rnd}z{zero}ga{ga}", a.ranks, zero, ga, a.steps)
                res.setdefault((zero, ga), []).append(r)
                print(f"round {rnd} zero_stage {zero} GA {ga}: {r['step_ms']:.0f} ms/step, "
                      f"RSS ranks 1.. {r['rss_others']:.0f} MiB", file=sys.stderr, flush=True)
    print(f"model {a.model}, {a.ranks} CPU ranks, T={a.T}, 1 row per rank per micro-step, {a.steps} steps "
          f"(first dropped), {a.rounds} rounds\n")
    print("| zero_stage | parameters (MiB) | gradient sums (MiB) | AdamW moments (MiB) | of which ZeRO shards + slots "
          "(MiB) | model state per rank (MiB) | vs stage 0 | peak RSS ranks 1..W-1 (MiB) |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    state = {}
    for zero in stages:
        r = res[(zero, 1)][0]
        state[zero] = r["plan_params"] + r["plan_grads"] + r["moments"]
        print(f"| {zero} | {r['plan_params']:.0f} | {r['plan_grads']:.0f} | {r['moments']:.0f} | {r['zero']:.0f} | "
              f"{state[zero]:.0f} | {state[zero] / state[0]:.2f} | {r['rss_others']:.0f} |")
    print("\n| zero_stage | GA 1 ms/step (median of runs) | vs stage 0 | GA 4 ms/step | vs stage 0 |")
    print("|---|--:|--:|--:|--:|")
    med = {k: statistics.median(r["step_ms"] for r in v) for k, v in res.items()}
    for zero in stages:
        print(f"| {zero} | {med[(zero, 1)]:.0f} | {med[(zero, 1)] / med[(0, 1)]:.2f} | {med[(zero, 4)]:.0f} | "
              f"{med[(zero, 4)] / med[(0, 4)]:.2f} |")


if __name__ == "__main__":
    main()
