"""tests/integration/startup_repeat.py — sft_train started again and again, as a cluster starts jobs:
N consecutive 1-step runs on the 2-node network-namespace Slurm cluster (srun --mpi=pmix, 2 nodes x 2
tasks: what slurm/cpu.sbatch launches) and/or with plain `mpirun -np 4` on this host. Any start-up that
does not exit 0 (a signal, a crash report, a hang past its deadline) is a failure; its log is kept and,
with --cores, Open MPI's own SIGSEGV handler is off and RLIMIT_CORE unlimited, so a crashing rank
leaves a core file in its run directory for gdb (kernel.core_pattern is the default, "core").

  /usr/bin/python3 tests/integration/startup_repeat.py [--srun N] [--mpirun N] [--cores] [--keep]

Prints one line per failure and a summary (start-ups, failures, seconds per start-up: min/median/
max); exit 0 when every start-up succeeded, 1 otherwise. The 300-start-up measurement of issue 24
is `--srun 300 --mpirun 100` (bench/results/startup_*.md); CI runs the bounded repeat
(test_startup_repeat.py). Needs root (the cluster's namespaces); needs build/sft_train."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BUILD, MPI_ENV, SFT_TRAIN, TINY_MODEL, make_data, write_config  # noqa: E402
from slurm_helpers import SlurmCluster  # noqa: E402

# What a crash looks like in a rank's output: Open MPI's handler, glibc, srun or mpirun reporting it.
CRASH_MARKS = ("Segmentation fault", "Signal: ", "signal 11", "core dumped", "Bus error", "Aborted",
               "exited on signal", "terminated with signal")


# The LD_PRELOAD probe of PMIx fences (tests/integration/probes/pmix_fence_probe.c, built by CMake).
FENCE_PROBE = os.path.join(BUILD, "tests", "libpmix_fence_probe.so")
PROBE_LINE = re.compile(r"^pmix_fence_probe: rank (\d+) fence (\d+) (enter|release) ([\d.]+)", re.M)


def early_releases(out, ranks):
    """Fences of one start-up that some rank left before every rank had entered them: [(fence,
    seconds early)] from the probe's lines. A fence every rank entered and none left is not one."""
    enter, release = {}, {}
    for m in PROBE_LINE.finditer(out):
        (enter if m[3] == "enter" else release).setdefault(int(m[2]), {})[int(m[1])] = float(m[4])
    early = []
    for fence, left in sorted(release.items()):
        entered = enter.get(fence, {})
        first_out = min(left.values())
        if len(entered) < ranks:  # a rank never entered it (it crashed first), yet one left
            early.append((fence, float("inf")))
        elif first_out < max(entered.values()):
            early.append((fence, max(entered.values()) - first_out))
    return early


def fence_env(fence):
    """SLURM_PMIX_FENCE as slurm/launch.sh exports it ("ring"), or unset ("auto": Slurm's default)."""
    return {} if fence == "auto" else {"SLURM_PMIX_FENCE": fence}


def startup_config(d):
    make_data(f"{d}/train.h5", 64, seed=1)
    return write_config(f"{d}/c.yml", **dict(
        TINY_MODEL, run_name="s", base_output_directory=f"{d}/out", train_files=f"{d}/train.h5",
        eval_interval=0, max_target_length=16, global_batch_size=8, gradient_accumulation_steps=1,
        steps=1, learning_rate=1e-3, checkpoint_period=0, hardware="cpu", seed=3))


def launch_command(kind, config, run_name, nodes=2):
    train = [SFT_TRAIN, config, f"run_name={run_name}"]
    if kind == "srun":
        per_node = ["--ntasks-per-node=2"] if nodes == 2 else ["--ntasks=4"]
        return ["srun", "--mpi=pmix", f"--nodes={nodes}", *per_node, "--kill-on-bad-exit=1", *train]
    return ["mpirun", "-np", "4", "--oversubscribe", *train]


def crash_env(cores):
    """Open MPI's handler off (the kernel then dumps core) and cores unlimited (srun passes the
    limit on to the tasks: PropagateResourceLimits=ALL, Slurm's default)."""
    return {"OMPI_MCA_opal_signal": ""} if cores else {}


def one_startup(kind, config, d, i, env, cores, timeout, nodes=2):
    run_dir = os.path.join(d, f"{kind}_{i}")
    os.makedirs(run_dir, exist_ok=True)
    cmd = launch_command(kind, config, f"{kind}_{i}", nodes)
    preexec = None
    if cores:
        import resource
        preexec = lambda: resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2)  # noqa: E731
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=run_dir,
                           preexec_fn=preexec)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    seconds = time.monotonic() - t0
    crashed = [m for m in CRASH_MARKS if m in out]
    cores_found = [f for f in os.listdir(run_dir) if f.startswith("core")]
    ok = rc == 0 and not crashed and not cores_found and "error:" not in out
    if not ok:
        with open(os.path.join(run_dir, "startup.log"), "w") as f:
            f.write(f"{' '.join(cmd)}\nexit {rc}\n{out}")
    return ok, seconds, rc, crashed, cores_found, run_dir, out


def repeat(kind, n, config, d, env, cores=False, timeout=120, log=print, nodes=2, early=None, outputs=None):
    """(failures, seconds per start-up): n consecutive start-ups of one kind. With the probe in
    env's LD_PRELOAD, early (a list) gets (start-up, fence, seconds early) for every fence released
    before all 4 ranks entered it; outputs (a list) gets each start-up's output."""
    failures, times = [], []
    for i in range(n):
        ok, seconds, rc, crashed, cores_found, run_dir, out = one_startup(kind, config, d, i, env, cores, timeout, nodes)
        times.append(seconds)
        if early is not None:
            early += [(i, fence, s) for fence, s in early_releases(out, 4)]
        if outputs is not None:
            outputs.append(out)
        if not ok:
            failures.append((i, rc, crashed, cores_found, run_dir, out))
            log(f"{kind} start-up {i}: exit {rc}, {crashed or ''} {cores_found or ''} (log {run_dir}/startup.log)")
    return failures, times


def summary(kind, n, failures, times):
    q = sorted(times)
    return (f"{kind}: {n} start-ups, {len(failures)} failed; seconds per start-up min {q[0]:.2f} "
            f"median {statistics.median(q):.2f} max {q[-1]:.2f}")


def probe_summary(probed, early):
    if not probed:
        return ""
    starts = len({i for i, _, _ in early})
    return f"; fences released before every rank entered them: {len(early)} (in {starts} start-ups)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--srun", type=int, default=300, help="2-node x 2-task start-ups (default 300)")
    ap.add_argument("--mpirun", type=int, default=0, help="mpirun -np 4 start-ups on this host")
    ap.add_argument("--cores", action="store_true", help="Open MPI's SIGSEGV handler off, core files on")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--nodes", type=int, default=2, help="srun over this many nodes (default 2)")
    ap.add_argument("--btl", help="Open MPI's btl list for every start-up (e.g. self,tcp: TCP within a host too)")
    ap.add_argument("--fence", default="ring", choices=["ring", "tree", "auto"],
                    help="SLURM_PMIX_FENCE for srun (default ring, as slurm/launch.sh; auto: unset, Slurm's default)")
    ap.add_argument("--probe", action="store_true", help="preload the PMIx fence probe; count fences released early")
    a = ap.parse_args()
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="sftdp_startup_")
    os.chmod(d, 0o755)  # munged must enter the cluster's state dir below it
    config = startup_config(d)
    probe = {"LD_PRELOAD": FENCE_PROBE} if a.probe else {}
    if a.probe and not os.path.exists(FENCE_PROBE):
        sys.exit(f"error: {FENCE_PROBE}: not built (needs pmix.h from libpmix-dev)")
    env = dict(os.environ, **MPI_ENV, **crash_env(a.cores), **probe, **fence_env(a.fence))
    results, all_ok = [], True
    cluster = None
    try:
        if a.srun:
            cluster = SlurmCluster(os.path.join(d, "cluster"), nodes=2).start()
            env.update(cluster.client_env(), **({"OMPI_MCA_btl": a.btl} if a.btl else {}))
            early = []
            failures, times = repeat("srun", a.srun, config, d, env, a.cores, nodes=a.nodes, early=early)
            results.append(summary(f"srun 4 tasks on {a.nodes} node(s), SLURM_PMIX_FENCE={a.fence}", a.srun,
                                   failures, times) + probe_summary(a.probe, early))
            all_ok &= not failures
        if a.mpirun:
            local = dict(os.environ, **MPI_ENV, **crash_env(a.cores), **probe)  # not the cluster's TCP settings
            if a.btl:
                local["OMPI_MCA_btl"] = a.btl
            early = []
            failures, times = repeat("mpirun", a.mpirun, config, d, local, a.cores, early=early)
            results.append(summary("mpirun -np 4", a.mpirun, failures, times) + probe_summary(a.probe, early))
            all_ok &= not failures
    finally:
        if cluster:
            cluster.stop()
        for line in results:
            print(line, flush=True)
        if a.keep or not all_ok:
            print(f"work directory kept: {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
