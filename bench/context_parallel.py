"""Context parallelism (issue 37), measured on this machine's CPU ranks (2 cores; 4 ranks oversubscribe them):

1. Memory per rank at context_parallelism 1, 2 and 4: smollm2-135m cut to 4 layers (the per-layer activations
   are what CP divides; 4 layers keep a step at T = 16384 within minutes on 2 cores), one row of T = 16384,
   one step, one data-parallel group: every rank's peak resident memory (/usr/bin/time) and the activation
   bytes the model allocated (its "activations:" log line); beside them the memory plan's activations per
   rank for the whole smollm2-135m (30 layers) at T = 16384.
2. Step time at equal tokens on 4 ranks: 4 rows of T = 4096 per step as 4 data-parallel ranks (cp 1), 2
   groups of 2 (cp 2) and 1 group of 4 (cp 4), same model; the median of steps 2-3 (metrics.jsonl).
3. Bytes sent per step per rank by the group's collectives against the formula: Open MPI over TCP on the
   loopback (btl tcp,self), the loopback's transmitted bytes of a 3-step minus a 1-step run, minus the same
   for the data-parallel run of the same ranks and rows (its traffic, the gradient allreduce, is the CP run's
   too), over 2 steps and the ranks. Formula per rank per step: every layer all-gathers the k/v heads in
   forward and again in backward but the last (whose forward's gather is still there), and reduce-scatters
   their gradients once, each moving (n - 1) blocks of B·(T/n)·2·KVH·HS floats per rank:
   (3L - 1)·(n - 1)·B·(T/n)·2·KVH·HS·4 bytes (+ TCP/IP headers).

  SFTDP_BUILD_DIR=build [SECTIONS=123] /usr/bin/python3 bench/context_parallel.py [out.md]
Prints Markdown tables (and writes them to out.md). About 15 minutes on 2 cores."""
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../tests/integration"))
from harness import MPI_ENV, SFT_TRAIN, make_data, tempdir, write_config  # noqa: E402

OUT_MD = sys.argv[1] if len(sys.argv) > 1 else None
VOCAB, LAYERS = 49152, 4
KVH, HS = 3, 64  # smollm2-135m: 9 query heads, 3 k/v heads of 64


def run(d, cfg, world, tag, keys, mpi_args=()):
    """(stdout+stderr, every rank's peak MiB, step times from metrics.jsonl)."""
    kb = f"{d}/kb_{tag}"
    os.makedirs(kb, exist_ok=True)
    wrap = ["sh", "-c", f'exec /usr/bin/time -o "{kb}/$OMPI_COMM_WORLD_RANK" -f "%M" "$@"', "sh"]
    cmd = ["mpirun", "-np", str(world), "--oversubscribe", *mpi_args] + wrap + [
        SFT_TRAIN, cfg, f"run_name={tag}", f"base_output_directory={d}/out", f"num_decoder_layers={LAYERS}",
        *[f"{k}={v}" for k, v in keys.items()]]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **MPI_ENV), timeout=3600)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    peaks = [int(open(f"{kb}/{r}").read().split()[-1]) / 1024 for r in range(world)]
    with open(f"{d}/out/{tag}/metrics.jsonl") as f:
        times = [m["step_time_s"] for m in map(json.loads, f) if "step_time_s" in m]
    return p.stdout + p.stderr, peaks, times


def loopback_tx():
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                return int(line.split(":")[1].split()[8])
    raise SystemExit("no loopback counters in /proc/net/dev")


def planned_activations(cfg, T, cp):
    p = subprocess.run([SFT_TRAIN, "--plan", "--ranks", str(cp), "--memory-gib", "1000", cfg, f"max_target_length={T}",
                        f"context_parallelism={cp}", "global_batch_size=1"], capture_output=True, text=True)
    m = re.search(r"^\| activations +\| +([\d.]+) (MiB|GiB) \|", p.stdout, re.M)
    if not m:
        sys.exit(p.stdout + p.stderr)
    return float(m.group(1)) * (1024 if m.group(2) == "GiB" else 1)


def memory(d, base, out):
    T = 16384
    make_data(f"{d}/t16k.h5", 4, T=T, vocab=VOCAB, seed=1, unequal=False)
    cfg = write_config(f"{d}/mem.yml", **dict(base, train_files=f"{d}/t16k.h5", max_target_length=T,
                                               global_batch_size=1, steps=1))
    out.append(f"## 1. Memory per rank, smollm2-135m cut to {LAYERS} layers, 1 row of T = {T}, one step\n")
    out.append("| context_parallelism | ranks | positions per rank | activations allocated per rank (log) | "
               "ratio to cp 1 | peak RSS per rank (MiB) | plan: activations per rank, all 30 layers |")
    out.append("|---|---|---|---|---|---|---|")
    act1 = None
    for cp in (1, 2, 4):
        log, peaks, _ = run(d, cfg, cp, f"mem_cp{cp}", {"context_parallelism": cp})
        act = float(re.search(r"activations: ([\d.]+) MiB on this rank", log).group(1))
        act1 = act1 or act
        full = planned_activations(cfg, T, cp)
        out.append(f"| {cp} | {cp} | {T // cp} | {act:.1f} MiB | {act / act1:.3f} | "
                   f"{' / '.join(f'{p:.0f}' for p in peaks)} | {full:.1f} MiB |")
        print(out[-1], flush=True)


def step_time(d, base, out):
    T = 4096
    make_data(f"{d}/t4k.h5", 16, T=T, vocab=VOCAB, seed=2, unequal=False)
    cfg = write_config(f"{d}/step.yml", **dict(base, train_files=f"{d}/t4k.h5", max_target_length=T,
                                                global_batch_size=4, steps=3))
    out.append(f"\n## 2. Step time at equal tokens: 4 CPU ranks, 4 rows of T = {T} per step ({LAYERS} layers)\n")
    out.append("| layout | step time (median of steps 2-3) | ratio to cp 1 |")
    out.append("|---|---|---|")
    t1 = None
    for cp in (1, 2, 4):
        _, _, times = run(d, cfg, 4, f"step_cp{cp}", {"context_parallelism": cp})
        t = statistics.median(times[1:])
        t1 = t1 or t
        out.append(f"| cp {cp} x {4 // cp} data-parallel | {t:.2f} s | {t / t1:.2f} |")
        print(out[-1], flush=True)


def bytes_sent(d, base, out):
    T = 2048
    make_data(f"{d}/t2k.h5", 16, T=T, vocab=VOCAB, seed=3, unequal=False)
    tcp = ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]
    out.append(f"\n## 3. Bytes sent per step per rank by the group's collectives (T = {T}, 1 row per group, "
               f"{LAYERS} layers, TCP over the loopback)\n")
    out.append("| context_parallelism | ranks | measured per rank per step | formula (3L-1)·(n-1)·B·(T/n)·2·KVH·HS·4 | "
               "measured / formula |")
    out.append("|---|---|---|---|---|")
    for cp in (2, 4):
        per_step = {}
        for layout in (cp, 1):
            cfg = write_config(f"{d}/bytes{cp}_{layout}.yml", **dict(
                base, train_files=f"{d}/t2k.h5", max_target_length=T, global_batch_size=cp // layout))
            sent = []
            for steps in (1, 3):
                before = loopback_tx()
                run(d, cfg, cp, f"bytes_cp{layout}_w{cp}_s{steps}", {"context_parallelism": layout, "steps": steps},
                    tcp)
                sent.append(loopback_tx() - before)
            per_step[layout] = (sent[1] - sent[0]) / 2
        measured = (per_step[cp] - per_step[1]) / cp
        formula = (3 * LAYERS - 1) * (cp - 1) * 1 * (T // cp) * 2 * KVH * HS * 4
        out.append(f"| {cp} | {cp} | {measured / 2**20:.2f} MiB | {formula / 2**20:.2f} MiB | {measured / formula:.3f} |")
        print(out[-1], flush=True)


def main():
    d = tempdir()
    out = []
    base = dict(model_name="smollm2-135m", max_position_embeddings=16384, hardware="cpu", checkpoint_period=0,
                async_checkpointing=False, learning_rate=1e-4, enable_data_shuffling=False)
    sections = os.environ.get("SECTIONS", "123")  # which of the three to run
    for key, section in (("1", memory), ("2", step_time), ("3", bytes_sent)):
        if key in sections:
            section(d, base, out)
    text = "\n".join(out) + "\n"
    print("\n" + text)
    if OUT_MD:
        with open(OUT_MD, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
