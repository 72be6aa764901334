"""bench/llmc_compare.py, the helper of the side-by-side runs against llm.c (bench/llmc_cpu.sh on the
CPU, scripts/gpu_check.sh's llmc_vs_sftdp step on a GPU): its parsers of llm.c's per-step lines on
canned output written with the format strings of llm.c's own printf calls, the table's arithmetic,
the files it writes for llm.c (token files, a checkpoint) read back by their formats, and, where the
llm.c anchor is beside the checkout (../shared/anchors/llm.c or .anchors/llm.c), llm.c's real CPU
trainer built and run on those files beside sft_train at a tiny shape."""
import math
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import pytest

SOURCE = os.environ.get("SFTDP_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("SFTDP_BUILD_DIR") or os.path.join(SOURCE, "build")
sys.path.insert(0, os.path.join(SOURCE, "bench"))
import llmc_compare as lc  # noqa: E402

# The format strings of llm.c's per-step printf calls, as they are in its sources (train_gpt2.cu's
# printf0 and train_gpt2.c's printf); Python's % operator formats these conversions as C does.
GPU_FORMAT = ("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | "
              "%.0f tok/s\n")
CPU_FORMAT = "step %d: train loss %f (took %f ms)\n"


def gpu_sample(ms, steps=None, mfu=-100.0, first_loss=11.0127):
    """train_gpt2.cu's output around its step lines: the config table, allocations, val loss, the
    z-scores nan until the outlier window fills, its moving-average tok/s, the closing average."""
    steps = steps or len(ms)
    out = ["+-----------------------+----------------------------------------------------+",
           "| device                | NVIDIA H200                                        |",
           "| peak TFlops           | -1.0                                               |",
           "num_parameters: 124475904 => bytes: 248951808", "allocating 237 MiB for parameter gradients",
           "val loss 11.009531"]
    for i, t in enumerate(ms):
        z = float("nan") if i < 3 else 0.12 * (-1) ** i
        out.append((GPU_FORMAT % (i + 1, steps, first_loss - 0.01 * i, z, 5.123 - i * 0.1, -z, 3e-4, t, mfu,
                                  8192 / t * 1e3)).rstrip("\n"))
    out += ["val loss 10.90", f"total average iteration time: {sum(ms[1:]) / max(len(ms) - 1, 1):f} ms"]
    return "\n".join(out) + "\n"


def test_gpu_parser_reads_every_step_line_of_train_gpt2cu():
    ms = [250.5, 41.25, 40.0, 39.75, 40.5, 1234.56, 9.87]
    recs = lc.parse_llmc_gpu(gpu_sample(ms, steps=7, mfu=31.4))
    assert [r["step"] for r in recs] == list(range(1, 8))
    assert [r["ms"] for r in recs] == pytest.approx(ms)
    assert recs[0]["loss"] == pytest.approx(11.0127) and recs[0]["steps"] == 7
    assert all(r["mfu_percent"] == pytest.approx(31.4) for r in recs)
    assert recs[2]["lr"] == pytest.approx(3e-4)


def test_gpu_parser_ignores_other_lines_and_a_line_cut_short():
    text = gpu_sample([50.0, 40.0])
    cut = (GPU_FORMAT % (3, 3, 10.9, 0.1, 1.0, 0.1, 3e-4, 40.0, -100.0, 200000.0))[:40]  # killed mid-line
    recs = lc.parse_llmc_gpu("garbage step 1/ | loss\n" + text + "generating:\n---\n12 34 56\n---\n" + cut)
    assert [r["ms"] for r in recs] == [50.0, 40.0]
    assert recs[0]["mfu_percent"] == -100.0  # a GPU llm.c's table does not know
    assert lc.parse_llmc_gpu("no step lines at all\n") == []


def test_cpu_parser_reads_train_gpt2c_step_lines():
    text = ("[GPT-2]\nmax_seq_len: 1024\nvocab_size: 50257\nnum_parameters: 16299520\n"
            "train dataset num_batches: 14\nval dataset num_batches: 14\n---\nWARNING: Failed to open the "
            "tokenizer file gpt2_tokenizer.bin\n---\nval loss 10.863029\n"
            + "".join(CPU_FORMAT % (i, 10.9 - 0.01 * i, 810.0 + i) for i in range(12)) + "step 12: train lo")
    recs = lc.parse_llmc_cpu(text)
    assert [r["step"] for r in recs] == list(range(12))
    assert [r["ms"] for r in recs] == pytest.approx([810.0 + i for i in range(12)])
    assert recs[0]["loss"] == pytest.approx(10.9)


def test_report_skips_warm_up_and_takes_the_ratio_of_medians(tmp_path):
    llmc_runs = [lc.parse_llmc_gpu(gpu_sample([300.0] * 5 + [40.0, 41.0, 39.0, 40.0])),
                 lc.parse_llmc_gpu(gpu_sample([300.0] * 5 + [44.0, 44.0, 44.0, 44.0]))]
    sft_runs = []
    for r, t in enumerate((50.0, 55.0)):
        path = tmp_path / f"m{r}.jsonl"
        with open(path, "w") as f:
            f.write('{"step": 0, "eval_loss": 10.9, "eval_weight_sum": 100}\n')
            for i in range(9):
                f.write(f'{{"step": {i + 1}, "loss": 10.85, "lr": 0.0003, "step_time_s": '
                        f'{(0.9 if i < 5 else t / 1e3)}, "tokens_per_s": 1}}\n')
        sft_runs.append(lc.read_sftdp_metrics(path))
    assert len(sft_runs[0]) == 9, "the eval record is not a step"
    llmc, sft = lc.Side("llm.c", llmc_runs, 5), lc.Side("sft-dp", sft_runs, 5)
    flops = 7.0e12
    res = lc.compare(llmc, sft, 8 * 1024, flops, 989.0)
    a, b = res["sides"]
    assert (a["n"], a["min"], a["max"]) == (8, 39.0, 44.0) and a["median"] == pytest.approx(42.5)
    assert (b["n"], b["median"]) == (8, pytest.approx(52.5))
    assert res["ratio"] == pytest.approx(42.5 / 52.5)  # of all timed steps' medians
    assert res["round_ratios"] == pytest.approx([40.0 / 50.0, 44.0 / 55.0])
    assert a["tok_s"] == pytest.approx(8192 / 0.0425)
    assert b["mfu"] == pytest.approx(100 * flops / 0.0525 / 989e12)
    assert all(ok for _, ok in res["checks"]), res["checks"]
    text = lc.markdown(res, "t", ["fact"], ["cmd"])
    assert "**Ratio sft-dp / llm.c (tokens/s, medians): 0.81×**" in text
    assert "| llm.c | 2 × 4 | 39.00 | 42.50 | 44.00 | 192753 |" in text


def test_report_without_llmc_steps_has_no_ratio_and_fails_its_check():
    sft = lc.Side("sft-dp", [[{"step": i, "loss": 10.8, "ms": 50.0} for i in range(8)]], 5)
    res = lc.compare(lc.Side("llm.c", [[]], 5), sft, 8192)
    assert "ratio" not in res
    assert not all(ok for _, ok in res["checks"])
    assert "not measured" in lc.markdown(res, "t", [], [])


def test_a_first_loss_far_from_ln_v_fails_its_check():
    runs = [[{"step": i, "loss": 3.0, "ms": 40.0} for i in range(8)]]
    res = lc.compare(lc.Side("llm.c", runs, 2), lc.Side("sft-dp", runs, 2), 8192, vocab=50257)
    assert [ok for what, ok in res["checks"] if "first step" in what] == [False, False]


def test_gpu_report_command_end_to_end(tmp_path):
    logs, metrics = [], []
    for r in range(2):
        log = tmp_path / f"llmc_{r}.log"
        log.write_text(gpu_sample([200.0] * 5 + [40.0] * 10, mfu=-100.0))
        m = tmp_path / f"m{r}.jsonl"
        m.write_text("".join(f'{{"step": {i + 1}, "loss": 10.9, "step_time_s": 0.032}}\n' for i in range(15)))
        logs += ["--llmc-log", str(log)]
        metrics += ["--sftdp-metrics", str(m)]
    (tmp_path / "flops.txt").write_text("flops_per_step=6999559372800 B=8 T=1024 block=gpt2 L=12\n")
    out = tmp_path / "gpu_vs_llmc.md"
    rc = lc.main(["gpu-report"] + logs + metrics + ["--flops", str(tmp_path / "flops.txt"), "--device",
                                                    "NVIDIA H200", "--B", "8", "--T", "1024", "--out", str(out)])
    text = out.read_text()
    assert rc == 0, text
    assert "**Ratio sft-dp / llm.c (tokens/s, medians): 1.25×**" in text
    assert "989 TFLOP/s" in text and "unknown GPU to llm.c" in text
    mfu = 100 * 6999559372800 / 0.032 / 989e12
    assert f"{mfu:.1f}%" in text


def test_gpu_report_gives_llmc_with_cudnn_its_own_section_and_ratio(tmp_path):
    """issue 34's next anchor: llm.c built with USE_CUDNN=1, its runs in their own logs, its own table and
    ratio below the default build's (which stays the first ratio), and the SFT rows' ratio against it."""
    args = []
    for r in range(2):
        for name, ms in (("llmc", 40.0), ("cudnn", 30.0)):
            log = tmp_path / f"{name}_{r}.log"
            log.write_text(gpu_sample([200.0] * 5 + [ms] * 10, mfu=31.0))
            args += ["--llmc-log" if name == "llmc" else "--llmc-cudnn-log", str(log)]
        for name, s in (("sftdp", 0.032), ("sft", 0.024)):
            m = tmp_path / f"{name}_{r}.jsonl"
            m.write_text("".join(f'{{"step": {i + 1}, "loss": 10.9, "step_time_s": {s}}}\n' for i in range(15)))
            args += ["--sftdp-metrics" if name == "sftdp" else "--sftdp-sft-metrics", str(m)]
    out = tmp_path / "gpu_vs_llmc.md"
    rc = lc.main(["gpu-report"] + args + ["--device", "NVIDIA H200", "--B", "8", "--T", "1024", "--out", str(out)])
    text = out.read_text()
    assert rc == 0, text
    assert "**Ratio sft-dp / llm.c (tokens/s, medians): 1.25×**" in text, "the default build's ratio first"
    section = text.split("## Beside llm.c with cuDNN attention", 1)[1]
    assert "| llm.c train_gpt2cu (bf16, USE_CUDNN=1) | 2 × 10 | 30.00 | 30.00 | 30.00 |" in section
    assert "**Ratio sft-dp / llm.c (cuDNN) (tokens/s, medians): 0.94×**" in section  # 30 / 32 ms
    assert "sft-dp (SFT rows) / llm.c with cuDNN = 1.25×" in section  # 30 / 24 ms
    assert "31.0%" in section, "llm.c's own MFU figure"

    for r in range(2):  # runs that failed (the step's own exit status says so too)
        (tmp_path / f"cudnn_{r}.log").write_text("cuDNN error: no engine for this graph\n")
    rc = lc.main(["gpu-report"] + args + ["--B", "8", "--T", "1024", "--device", "NVIDIA H200"])
    assert rc == 1, "an anchor without timed steps fails the report's checks"


def test_token_files_have_llmc_header_and_size(tmp_path):
    lc.make_data(str(tmp_path), rows=6, T=16, vocab=300, seed=3)
    raw = (tmp_path / "train.bin").read_bytes()
    magic, version, count = struct.unpack("<3i", raw[:12])
    assert (magic, version, count) == (20240520, 1, 6 * 16 + 1)
    assert raw[12:1024] == bytes(1012), "the rest of the 256-int header is zero"
    assert len(raw) == 256 * 4 + 2 * count, "llm.c's loader checks the file size exactly"
    tokens = np.frombuffer(raw[1024:], dtype="<u2")
    assert tokens.max() < 300
    assert np.array_equal(lc.read_tokens(str(tmp_path / "train.bin")), tokens)
    with h5py.File(tmp_path / "train.h5") as f:  # SPEC §4, the same stream: targets one further on
        assert f["inputs"].dtype == np.int32 and f["targets"].dtype == np.int32
        assert f["loss_weights"].dtype == np.float32 and f.attrs["vocab_size"] == 300
        assert np.array_equal(f["inputs"][:].ravel(), tokens[:-1])
        assert np.array_equal(f["targets"][:].ravel(), tokens[1:])
        assert (f["loss_weights"][:] == 1).all() and f["inputs"].shape == (6, 16)
    with h5py.File(tmp_path / "train_sft.h5") as f:  # the same rows as SFT data: 60% of each row a prompt
        assert np.array_equal(f["inputs"][:].ravel(), tokens[:-1])
        w = f["loss_weights"][:]
        assert (w[:, :10] == 0).all() and (w[:, 10:] == 1).all(), "round(0.6 · 16) = 10 prompt positions"


def test_checkpoint_has_train_gpt2c_layout(tmp_path):
    path = tmp_path / "gpt2_124M.bin"
    L, NH, C, V, maxT = 2, 4, 64, 300, 32
    n = lc.write_checkpoint(str(path), L, NH, C, V, maxT)
    Vp = 384  # 300 padded to a multiple of 128
    assert n == Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C  # fill_in_parameter_sizes, summed
    raw = path.read_bytes()
    assert struct.unpack("<8i", raw[:32]) == (20240326, 3, maxT, V, L, NH, C, Vp)
    assert len(raw) == 1024 + 4 * n
    p = np.frombuffer(raw[1024:], dtype="<f4")
    wte = p[:Vp * C].reshape(Vp, C)
    assert (wte[V:] == 0).all() and 0.015 < wte[:V].std() < 0.025, "padded rows zero, N(0, 0.02) rows"
    off = Vp * C + maxT * C
    assert (p[off:off + L * C] == 1).all(), "ln1w"
    assert (p[off + L * C:off + 2 * L * C] == 0).all(), "ln1b"
    assert (p[-2 * C:-C] == 1).all() and (p[-C:] == 0).all(), "lnfw, lnfb"
    # GPT-2 124M in llm.c's layout: the count its loader prints
    assert sum(s for _, s in lc.checkpoint_tensors(12, 768, 50257, 1024)) == 124475904


def anchor():
    for d in (os.environ.get("SFTDP_LLMC_SRC", ""), os.path.join(SOURCE, ".anchors", "llm.c"),
              os.path.join(SOURCE, "..", "shared", "anchors", "llm.c")):
        if d and os.path.isfile(os.path.join(d, "train_gpt2.c")):
            return d
    return None


@pytest.mark.skipif(anchor() is None, reason="no llm.c anchor beside the checkout")
@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None, reason="no gcc/make")
def test_llmc_cpu_trainer_runs_on_our_files_beside_sft_train(tmp_path):
    """The real llm.c: our checkpoint and token files are what its loaders accept (they exit on a bad
    magic, version or size), its step lines parse, it is stopped after the wanted steps, and the
    table of `cpu` comes out with both sides measured."""
    src = tmp_path / "llm.c"
    shutil.copytree(anchor(), src)
    subprocess.run(["make", "train_gpt2", "CC=gcc"], cwd=src, check=True, capture_output=True, timeout=300)
    sft_train, flops = os.path.join(BUILD, "sft_train"), os.path.join(BUILD, "bench", "bench_flops")
    if not os.access(sft_train, os.X_OK):
        pytest.skip(f"no {sft_train}")
    out = tmp_path / "table.md"
    args = ["cpu", "--llmc", str(src / "train_gpt2"), "--sft-train", sft_train, "--work", str(tmp_path / "w"),
            "--shape", "tiny", "--rounds", "2", "--steps", "4", "--skip", "1", "--threads", "1", "--out", str(out)]
    if os.access(flops, os.X_OK):
        args += ["--bench-flops", flops]
    rc = lc.main(args)
    text = out.read_text()
    assert rc == 0, text
    for r in (1, 2):
        recs = lc.parse_llmc_cpu((tmp_path / "w" / "tiny" / f"llmc_{r}.log").read_text())
        assert [x["step"] for x in recs] == [0, 1, 2, 3], "stopped after 4 step lines"
        assert abs(recs[0]["loss"] - math.log(512)) < 1.0
    assert "| llm.c train_gpt2 (fp32) | 2 × 3 |" in text and "| sft-dp sft_train (fp32) | 2 × 3 |" in text
    assert "**Ratio sft-dp / llm.c" in text
    assert str(tmp_path) not in text, "no path of this machine in the report"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
