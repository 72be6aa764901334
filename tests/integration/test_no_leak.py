"""A long run does not leak (issue 24), bounded for CI: 2,000 steps of the tiny model on 2 CPU ranks
with eval every 250 steps, a checkpoint every 500 (two kept) and TensorBoard, each rank's resident
memory and open descriptors sampled from /proc (tests/integration/leak_run.py): from step 1,000 to
the end RSS grows by less than 1% and the descriptor count does not grow. The 20,000-step run is
bench/results/leak_*.md."""
from harness import tempdir
from leak_run import growth, run, table

STEPS, WARM = 2000, 1000


def test_two_thousand_steps_do_not_leak(note):
    samples, wall_s, rc, out = run(tempdir(), STEPS)
    assert rc == 0, out[-3000:]
    results = {r: growth(s, STEPS, WARM) for r, s in samples.items()}
    note(table(results, STEPS, WARM, wall_s))
    for r, g in results.items():
        assert g["rss_growth"] < 0.01, f"rank {r}: RSS grew {100 * g['rss_growth']:.2f}%\n{table(results, STEPS, WARM, wall_s)}"
        assert g["fds_end"] <= g["fds_warm"], f"rank {r}: descriptors {g['fds_warm']} -> {g['fds_end']}"


def test_the_measure_sees_a_climb_and_not_the_teardown():
    """growth() on made-up samples: 1 KiB per step from step 1,000 is a 1% climb it reports, fds that
    climb are seen, and the last step's samples (final save, MPI teardown) are left out."""
    steady = [(s, 100_000, 20) for s in range(0, 2000, 2)]
    teardown = [(2000, 300_000, 4)] * 400
    flat = growth(steady + teardown, STEPS, WARM)
    assert flat["rss_growth"] == 0 and flat["fds_end"] == flat["fds_warm"] == 20 and flat["rss_max_kib"] == 100_000
    climbing = growth([(s, 100_000 + max(0, s - WARM), 20 + s // 500) for s, _, _ in steady], STEPS, WARM)
    assert climbing["rss_growth"] > 0.008 and climbing["fds_end"] > climbing["fds_warm"]
