"""sft_train hardware=gpu end to end against the CPU run, as scripts/gpu_check.sh checks a real GPU,
here on the CUDA simulator (a build with SFTDP_CUDA_SIM=ON; any other build skips unless a real GPU
is visible). Tiny GPT-2 and Llama-family runs of 6 steps on rows with very unequal token counts:
- GPU vs CPU: per-step losses within 1e-5 relative, final parameters within 1e-4 (whole vector);
  the Llama family (GQA, RoPE, SwiGLU, untied head) as well; two GPU runs are bitwise equal;
- 2 ranks over NCCL (one simulated GPU each) vs 1 GPU rank (the §1 factorisation) and vs 2 CPU
  ranks; zero_stage 1 and allreduce_overlap on 2 GPU ranks equal the plain 2-rank run; so do
  zero_stage 2 (reduce-scatters per micro-step, GA 2) and zero_stage 3 (parameters all-gathered per
  unit, with dtype bfloat16: each gathered unit packed to the GEMMs' bf16 copy) on the Llama family,
  and zero_stage 3 on 4 GPUs x GA 2 is the 1-GPU run; weight_dtype bfloat16 at zero_stage 1, 2 and 3
  stores bf16 parameters (stages 2 and 3 bitwise equal, stage 1 within 1e-4, fp32 masters in the
  checkpoint, a stage-3 checkpoint continued at stage 2 bitwise);
- dtype bfloat16 (attention on tensor cores) tracks fp32 (5e-2) without being it, 2 ranks of it equal
  1 rank (1e-5), the log names the tensor-core attention, and its bf16 activation storage is bitwise
  weight_dtype bfloat16's fp32 storage (both round the GEMM inputs); remat on the GPU is bitwise
  remat off;
- resume from a CPU checkpoint on the GPU, and from a GPU checkpoint on the CPU, continue the
  trajectory (1e-5 relative against the uninterrupted run);
- two ranks on a host with one GPU: hardware=auto runs both on the CPU, hardware=gpu exits 2;
- a rank stopped (SIGSTOP) in a 2-GPU job ends it within collective_timeout_s, named by rank 0;
- LoRA (issue 17, all-linear adapters with dropout on the Llama family): 2 GPU ranks over NCCL,
  with zero_stage 1, 3 or allreduce_overlap, train the adapters of 1 CPU rank (1e-5 / 1e-4)."""
import json
import os
import re
import shutil

import numpy as np
import pytest

from harness import (TINY_MODEL, make_data, max_rel, read_metrics, read_params, real_gpu, run_train, simulator_build,
                     write_config)


SIM = simulator_build()
# Collected and skipped (not a module-level skip: a file that collects nothing fails, conftest.py).
pytestmark = pytest.mark.skipif(not SIM and not real_gpu(), reason="neither the CUDA simulator build nor a GPU")

STEPS, G = 6, 8
MODELS = {"gpt2": TINY_MODEL,
          "llama": dict(model_name="llama-tiny", decoder_block="qwen2", tie_word_embeddings=False,
                        vocab_size=64)}
# Simulated GPUs per host: one per rank of the 2-rank runs (the one-GPU refusal sets its own).
GPUS = {"SFTDP_SIM_DEVICES": "2"}
# The runs whose every kernel launch, shape and precision another run of this module already makes
# under the simulator's two thread schedules (its racecheck) run one schedule: what they test is a
# configuration's equality (a repeat, zero_stage 1, overlap, 2 ranks of bf16, remat, a resume), and
# the schedule comparison is the same comparison again at twice the simulator time.
ONE_SCHEDULE = ("gpt2_gpu_again", "gpt2_gpu_w2_zero1", "gpt2_gpu_w2_overlap", "llama_lora_gpu_w2_zero1",
                "llama_lora_gpu_w2_overlap", "gpt2_gpu_bf16_w2", "llama_gpu_bf16_w2", "llama_gpu_remat", "resume",
                "gpt2_gpu_w2_ga2", "llama_lora_gpu_w2_zero3", "llama_gpu_w4_zero3", "gpt2_gpu_bf16w_w2_ga2_zero2",
                "llama_gpu_bf16w", "resume_bf16w", "gpt2_gpu_bf16w_w2_ga2_zero1", "gpt2_gpu_bf16w_w2_ga2_zero3")


def sim_env(name):
    gpus = {"SFTDP_SIM_DEVICES": "4"} if "_w4" in name else GPUS  # one per rank of a 4-rank run
    return dict(gpus, SFTDP_SIM_SCHEDULES="1") if name.startswith(ONE_SCHEDULE) else gpus


@pytest.fixture(scope="module")
def cfg(workdir):
    make_data(f"{workdir}/train.h5", STEPS * G + 5, seed=11, masked_rows={0, 1, 9})
    make_data(f"{workdir}/eval.h5", 8, seed=12)
    return {m: write_config(f"{workdir}/{m}.yml", **dict(
        keys, run_name="e", train_files=f"{workdir}/train.h5", eval_files=f"{workdir}/eval.h5",
        eval_interval=0, max_target_length=16, global_batch_size=G, steps=STEPS, learning_rate=3e-3,
        enable_data_shuffling=False, checkpoint_period=3, keep_checkpoints=3, hardware="cpu", seed=5,
        collective_timeout_s=120)) for m, keys in MODELS.items()}


@pytest.fixture(scope="module")
def runs(cfg, workdir):
    """runs(name, model=..., world=..., **keys) -> (train metrics, {group: {tensor: array}} at the end)."""
    done = {}

    def get(name, model="gpt2", world=1, **keys):
        if name not in done:
            out = f"{workdir}/{name}"
            run_train(cfg[model], dict(keys, base_output_directory=out), np_=world, env_extra=sim_env(name),
                      timeout=900)
            ck = f"{out}/e/checkpoints/step_{STEPS}"
            done[name] = (read_metrics(f"{out}/e")[0], {g: read_params(ck, g) for g in ("params", "opt/m", "opt/v")})
        return done[name]
    return get


def losses(train):
    return np.array([m["loss"] for m in train])


def rel(a, b):
    return float(np.max(np.abs(a - b) / np.abs(b)))


def bitwise(a, b):
    return losses(a[0]).tobytes() == losses(b[0]).tobytes() and all(
        a[1][g].keys() == b[1][g].keys() and all(np.array_equal(a[1][g][k], b[1][g][k]) for k in a[1][g])
        for g in a[1])


@pytest.mark.parametrize("model", list(MODELS))
def test_gpu_matches_cpu(runs, model, note):
    gpu, cpu = runs(f"{model}_gpu", model, hardware="gpu"), runs(f"{model}_cpu", model, hardware="cpu")
    assert len(gpu[0]) == STEPS
    worst_loss, worst_params = rel(losses(gpu[0]), losses(cpu[0])), max_rel(gpu[1]["params"], cpu[1]["params"])
    note(f"cuda e2e {model}: GPU vs CPU over {STEPS} steps: losses {worst_loss:.1e}, params {worst_params:.1e}")
    assert worst_loss <= 1e-5
    assert worst_params <= 1e-4


def test_two_gpu_runs_are_bitwise_equal(runs):
    assert bitwise(runs("gpt2_gpu", hardware="gpu"), runs("gpt2_gpu_again", hardware="gpu"))


def test_two_ranks_over_nccl_are_one_big_batch(runs, note):
    two = runs("gpt2_gpu_w2", world=2, hardware="gpu")
    one, cpu_two = runs("gpt2_gpu", hardware="gpu"), runs("gpt2_cpu_w2", world=2, hardware="cpu")
    note(f"cuda e2e: 2 GPU ranks vs 1: losses {rel(losses(two[0]), losses(one[0])):.1e}; "
         f"vs 2 CPU ranks: {rel(losses(two[0]), losses(cpu_two[0])):.1e}")
    assert rel(losses(two[0]), losses(one[0])) <= 1e-5
    assert rel(losses(two[0]), losses(cpu_two[0])) <= 1e-5
    assert max_rel(two[1]["params"], one[1]["params"]) <= 1e-4


def test_zero1_and_overlap_over_nccl_equal_the_plain_run(runs, note):
    plain = runs("gpt2_gpu_w2", world=2, hardware="gpu")
    zero1 = runs("gpt2_gpu_w2_zero1", world=2, hardware="gpu", zero_stage=1)
    overlap = runs("gpt2_gpu_w2_overlap", world=2, hardware="gpu", allreduce_overlap=True)
    note(f"cuda e2e: zero_stage 1 vs 0 over NCCL: losses {rel(losses(zero1[0]), losses(plain[0])):.1e}, "
         f"params {max_rel(zero1[1]['params'], plain[1]['params']):.1e}")
    assert rel(losses(zero1[0]), losses(plain[0])) <= 1e-6
    assert max_rel(zero1[1]["params"], plain[1]["params"]) <= 1e-6
    # Each bucket's elements are summed as the whole buffer's are: the same bits (two ranks).
    assert bitwise(overlap, plain)


def test_zero2_and_zero3_over_nccl_equal_the_plain_run(runs, note):
    # zero_stage 2 at GA 2: two reduce-scatters of every unit per step into the shard, against the
    # plain run's one allreduce of the summed micro-steps; zero_stage 3 in bf16 on the Llama family
    # (untied head, its own unit): every unit all-gathered before use and packed to bf16 once.
    plain2 = runs("gpt2_gpu_w2_ga2", world=2, hardware="gpu", gradient_accumulation_steps=2)
    zero2 = runs("gpt2_gpu_w2_ga2_zero2", world=2, hardware="gpu", gradient_accumulation_steps=2, zero_stage=2)
    plain3 = runs("llama_gpu_bf16_w2", "llama", world=2, hardware="gpu", dtype="bfloat16")
    zero3 = runs("llama_gpu_bf16_w2_zero3", "llama", world=2, hardware="gpu", dtype="bfloat16", zero_stage=3)
    for name, z, p in [("zero_stage 2", zero2, plain2), ("zero_stage 3 bf16", zero3, plain3)]:
        note(f"cuda e2e: {name} vs 0 over NCCL: losses {rel(losses(z[0]), losses(p[0])):.1e}, "
             f"params {max_rel(z[1]['params'], p[1]['params']):.1e}, m {max_rel(z[1]['opt/m'], p[1]['opt/m']):.1e}")
        assert rel(losses(z[0]), losses(p[0])) <= 1e-6, name
        assert max_rel(z[1]["params"], p[1]["params"]) <= 1e-5, name
        assert max_rel(z[1]["opt/m"], p[1]["opt/m"]) <= 1e-5, name
    # 4 GPUs at GA 2 (1 row per micro-step), fp32: NCCL's 4-rank reduce-scatters and all-gathers, and
    # the §1 factorisation against 1 GPU (the bounds of the 2-rank one above).
    one = runs("llama_gpu", "llama", hardware="gpu")
    w4 = runs("llama_gpu_w4_zero3", "llama", world=4, hardware="gpu", zero_stage=3, gradient_accumulation_steps=2)
    note(f"cuda e2e: zero_stage 3 on 4 GPUs x GA 2 vs 1 GPU: losses {rel(losses(w4[0]), losses(one[0])):.1e}, "
         f"params {max_rel(w4[1]['params'], one[1]['params']):.1e}")
    assert rel(losses(w4[0]), losses(one[0])) <= 1e-5
    assert max_rel(w4[1]["params"], one[1]["params"]) <= 1e-4


def test_bf16_weights_are_bf16_parameters_with_fp32_masters(cfg, runs, workdir, note):
    # weight_dtype bfloat16 at zero_stage 1, 2 and 3 (issue 25): the model holds bf16 parameters (stages
    # 1 and 2 the full bf16 buffer, stage 3 bf16 units all-gathered) and every kernel reads bf16(master), the
    # embeddings and norms included; the fp32 masters live in the shard. Stages 2 and 3 are then the
    # same computation, bitwise; against weight_dtype bfloat16 with fp32 storage (stage 0, whose GEMMs
    # read the same bf16 copies) only the non-GEMM reads differ: close, but not within the 1e-6 that
    # stage 2 with fp32 storage keeps to stage 0.
    z2 = runs("gpt2_gpu_bf16w_w2_ga2_zero2", world=2, hardware="gpu", weight_dtype="bfloat16", zero_stage=2,
              gradient_accumulation_steps=2)
    z3 = runs("gpt2_gpu_bf16w_w2_ga2_zero3", world=2, hardware="gpu", weight_dtype="bfloat16", zero_stage=3,
              gradient_accumulation_steps=2)
    fp32_stored = runs("gpt2_gpu_bf16_weights", hardware="gpu", weight_dtype="bfloat16")
    assert bitwise(z2, z3)
    # Stage 1 (the full gradient buffer, reduce-scattered once per step) sums the micro-steps before the
    # ranks, stages 2 and 3 the ranks per micro-step: the same bf16 computation up to that order.
    z1 = runs("gpt2_gpu_bf16w_w2_ga2_zero1", world=2, hardware="gpu", weight_dtype="bfloat16", zero_stage=1,
              gradient_accumulation_steps=2)
    note(f"cuda e2e: bf16 weights, zero_stage 1 vs 3 (2 GPUs x GA 2): losses {rel(losses(z1[0]), losses(z3[0])):.1e}, "
         f"params {max_rel(z1[1]['params'], z3[1]['params']):.1e}")
    assert rel(losses(z1[0]), losses(z3[0])) <= 1e-4
    assert max_rel(z1[1]["params"], z3[1]["params"]) <= 1e-4
    r = rel(losses(z3[0]), losses(fp32_stored[0]))
    note(f"cuda e2e: bf16 weights (zero_stage 3, 2 GPUs x GA 2) vs fp32-stored weight_dtype bfloat16: losses {r:.1e}")
    assert 1e-6 < r <= 1e-3, r
    # The checkpoint holds the fp32 masters, not their bf16 rounding (low 16 bits not all zero).
    assert any((np.ascontiguousarray(v, np.float32).view(np.uint32) & 0xFFFF).any() for v in z3[1]["params"].values())
    # Llama (untied head, RMSNorm): stage 3 on 2 GPUs against stage 2 on 1. The order of the gradient
    # sums differs; a master one fp32 ulp apart can round to the neighbouring bf16 value (2^-8 relative)
    # in the next forward, hence bounds 1e-4 rather than fp32 storage's 1e-6 (measured: 5.7e-6).
    ll3 = runs("llama_gpu_bf16w_w2_zero3", "llama", world=2, hardware="gpu", weight_dtype="bfloat16", zero_stage=3)
    ll2 = runs("llama_gpu_bf16w", "llama", hardware="gpu", weight_dtype="bfloat16", zero_stage=2)
    note(f"cuda e2e: Llama bf16 weights, zero_stage 3 on 2 GPUs vs zero_stage 2 on 1: losses "
         f"{rel(losses(ll3[0]), losses(ll2[0])):.1e}, params {max_rel(ll3[1]['params'], ll2[1]['params']):.1e}")
    assert rel(losses(ll3[0]), losses(ll2[0])) <= 1e-4
    assert max_rel(ll3[1]["params"], ll2[1]["params"]) <= 1e-4
    # Resume: the stage-3 run's step-3 checkpoint continued at stage 2 is the straight run, bitwise (the
    # masters and moments came back exactly; a bf16-rounded checkpoint would not continue it).
    out = f"{workdir}/resume_bf16w"
    shutil.copytree(f"{workdir}/gpt2_gpu_bf16w_w2_ga2_zero3", out)
    shutil.rmtree(f"{out}/e/checkpoints/step_{STEPS}")
    with open(f"{out}/e/metrics.jsonl") as f:
        kept = [line for line in f if json.loads(line).get("step", 0) <= 3 and "eval_loss" not in line]
    with open(f"{out}/e/metrics.jsonl", "w") as f:
        f.writelines(kept)
    p = run_train(cfg["gpt2"], {"base_output_directory": out, "hardware": "gpu", "weight_dtype": "bfloat16",
                                "zero_stage": 2, "gradient_accumulation_steps": 2}, np_=2,
                  env_extra=sim_env("resume_bf16w"), timeout=900)
    assert "step_3" in p.stdout and "parameters stored as bf16" in p.stdout, p.stdout
    resumed = (read_metrics(f"{out}/e")[0], {g: read_params(f"{out}/e/checkpoints/step_{STEPS}", g)
                                             for g in ("params", "opt/m", "opt/v")})
    assert bitwise(resumed, z3)


LORA = dict(lora_rank=4, lora_alpha=8, lora_dropout=0.1, lora_target_modules="all-linear", learning_rate=1e-2)


def test_lora_over_nccl_trains_the_cpu_ranks_adapters(runs, note):
    cpu = runs("llama_lora_cpu", "llama", hardware="cpu", **LORA)
    assert sorted(cpu[1]["params"]) == sorted(k for k in cpu[1]["params"] if ".lora_" in k)  # adapters only
    for name, keys in {"plain": {}, "zero1": {"zero_stage": 1}, "zero3": {"zero_stage": 3},
                       "overlap": {"allreduce_overlap": True}}.items():
        gpu = runs(f"llama_lora_gpu_w2_{name}", "llama", world=2, hardware="gpu", **LORA, **keys)
        note(f"cuda e2e LoRA {name}: 2 GPU ranks vs 1 CPU rank: losses {rel(losses(gpu[0]), losses(cpu[0])):.1e}, "
             f"adapters {max_rel(gpu[1]['params'], cpu[1]['params']):.1e}")
        assert rel(losses(gpu[0]), losses(cpu[0])) <= 1e-5, name
        assert max_rel(gpu[1]["params"], cpu[1]["params"]) <= 1e-4, name


def test_bf16_tracks_fp32(runs):
    bf16, fp32 = runs("gpt2_gpu_bf16", "gpt2", hardware="gpu", dtype="bfloat16"), runs("gpt2_gpu", hardware="gpu")
    assert rel(losses(bf16[0]), losses(fp32[0])) <= 5e-2
    assert not bitwise(bf16, fp32), "dtype bfloat16 gave the fp32 results"


@pytest.mark.parametrize("model", list(MODELS))
def test_bf16_on_tensor_cores_two_ranks_are_one_big_batch(runs, model, note):
    # dtype bfloat16 runs the act16 path (bf16 activations, attention on tensor cores: head size 16 in both tiny
    # models); 2 ranks over NCCL are the 1-rank run: every row's activations are the same bits whatever the split, so
    # step 1's loss and gradient norm agree to the order of the gradient sums; after that a parameter one fp32 ulp
    # apart can round an activation to the neighbouring bf16 value, so the trajectories agree to bf16's precision.
    one = runs(f"{model}_gpu_bf16", model, hardware="gpu", dtype="bfloat16")
    two = runs(f"{model}_gpu_bf16_w2", model, world=2, hardware="gpu", dtype="bfloat16")
    note(f"cuda e2e {model} bf16 (act16 path, tensor-core attention): 2 GPU ranks vs 1: losses "
         f"{rel(losses(two[0]), losses(one[0])):.1e}, params {max_rel(two[1]['params'], one[1]['params']):.1e}")
    first = lambda run: (run[0][0]["loss"], run[0][0]["grad_norm"])  # noqa: E731
    assert first(two) == pytest.approx(first(one), rel=1e-6)
    assert rel(losses(two[0]), losses(one[0])) <= 1e-4
    assert max_rel(two[1]["params"], one[1]["params"]) <= 2e-3


@pytest.mark.parametrize("model", list(MODELS))
def test_bf16_activations_take_the_act16_path(cfg, runs, workdir, model):
    # dtype bfloat16 stores the activations that only GEMMs and attention read as bf16 (the act16 path, kernels/act16.h);
    # weight_dtype bfloat16 alone keeps fp32 activations and rounds the GEMM inputs: the two stay within bf16's
    # precision of each other, and are not the same run.
    stored = runs(f"{model}_gpu_bf16", model, hardware="gpu", dtype="bfloat16")
    rounded = runs(f"{model}_gpu_bf16_weights", model, hardware="gpu", weight_dtype="bfloat16")
    assert rel(losses(stored[0]), losses(rounded[0])) <= 1e-2
    assert not bitwise(stored, rounded)
    p = run_train(cfg[model], {"base_output_directory": f"{workdir}/{model}_bf16_log", "hardware": "gpu",
                               "dtype": "bfloat16", "steps": 1}, env_extra=GPUS)
    assert "activations stored as bf16 (act16 path)" in p.stdout, p.stdout
    assert "attention: tensor cores (mma.sync bf16, flash attention), head size 16" in p.stdout, p.stdout


def test_remat_on_the_gpu_is_bitwise_remat_off(runs):
    assert bitwise(runs("llama_gpu_remat", "llama", hardware="gpu", remat=True), runs("llama_gpu", "llama", hardware="gpu"))


@pytest.mark.parametrize("first,then", [("cpu", "gpu"), ("gpu", "cpu")])
def test_resume_across_hardware_continues_the_trajectory(cfg, runs, workdir, first, then):
    straight = runs(f"gpt2_{first}", hardware=first)
    # The run as a crash after step 3 leaves it (checkpoints at 3 and 6: drop 6 and what followed 3).
    out = f"{workdir}/resume_{first}_to_{then}"
    shutil.copytree(f"{workdir}/gpt2_{first}", out)
    shutil.rmtree(f"{out}/e/checkpoints/step_{STEPS}")
    with open(f"{out}/e/metrics.jsonl") as f:
        kept = [line for line in f if json.loads(line).get("step", 0) <= 3 and "eval_loss" not in line]
    with open(f"{out}/e/metrics.jsonl", "w") as f:
        f.writelines(kept)
    p = run_train(cfg["gpt2"], {"base_output_directory": out, "hardware": then}, env_extra=sim_env("resume"),
                  timeout=900)
    assert "resuming from" in p.stdout and "step_3" in p.stdout, p.stdout
    resumed = read_metrics(f"{out}/e")[0]
    assert [m["step"] for m in resumed] == list(range(1, STEPS + 1))
    assert rel(losses(resumed), losses(straight[0])) <= 1e-5
    params = read_params(f"{out}/e/checkpoints/step_{STEPS}")
    assert max_rel(params, straight[1]["params"]) <= 1e-4


def test_a_stopped_rank_ends_a_two_gpu_job(tmp_path, note):
    # The NCCL communicator polls its collective under collective_timeout_s and aborts NCCL (its
    # "GPU-CHECK" until now): rank 1 stopped, rank 0 names it and the job ends within the bound.
    from test_rank_stopped_mpi import BOUND_S, TIMEOUT_S, stop_one_rank
    # The smallest model: a simulated step (~0.8 s under ASan) must stay well below the 3 s deadline
    # even on a loaded machine, or a slow rank would look stopped. The stop lands a third of a step
    # after step 3's metrics: rank 1 is then in step 4's forward/backward, not still at step 3's
    # closing host allreduce (which a stop at once once hit: rank 0 waited there, not in NCCL).
    code, elapsed, out, step = stop_one_rank(str(tmp_path), 1, hardware="gpu", env_extra=GPUS,
                                             model=dict(emb_dim=32, mlp_dim=64, num_heads=2), into_step=0.33)
    note(f"cuda e2e: rank 1 stopped after step {step} of a 2-GPU job: exit {code} {elapsed:.1f} s later")
    assert "hardware: gpu" in out, out[-2000:]
    assert code not in (None, 0), f"mpirun exits non-zero (got {code})"
    assert TIMEOUT_S <= elapsed < BOUND_S, f"ended by the deadline, within {BOUND_S} s ({elapsed:.1f} s)"
    assert "[rank 0@" in out and "error: rank 1 (" in out and "the gradient allreduce of step" in out, out[-2000:]


@pytest.mark.skipif(not SIM, reason="the one-GPU host is made with simulated devices")
def test_two_ranks_on_one_gpu(cfg, workdir):
    one_gpu = {"SFTDP_SIM_DEVICES": "1"}
    auto = run_train(cfg["gpt2"], {"base_output_directory": f"{workdir}/two_auto", "hardware": "auto", "steps": 2},
                     np_=2, env_extra=one_gpu)
    assert re.search(r"hardware: auto: the CPU on every rank, since .* runs 2 local ranks", auto.stdout + auto.stderr)
    gpu = run_train(cfg["gpt2"], {"base_output_directory": f"{workdir}/two_gpu", "hardware": "gpu", "steps": 2},
                    np_=2, env_extra=one_gpu, check=False)
    assert gpu.returncode == 2, gpu.stdout + gpu.stderr
    assert re.search(r"error: hardware: gpu: .* runs 2 local ranks", gpu.stderr), gpu.stderr


def test_a_dropped_wait_before_the_overlapped_allreduce_is_a_streamcheck_report(cfg, workdir):
    """Issue 43: the simulator plants what a reviewer would (start_allreduce_sum's cudaStreamWaitEvent deleted:
    the gradient sum reads what backward is still writing) and its streamcheck reports it, on every run and
    schedule, where the lazy streams alone let it pass (a later host wait ordered the work)."""
    if not SIM:
        pytest.skip("plants a bug through the CUDA simulator")
    out = f"{workdir}/planted_wait"
    p = run_train(cfg["gpt2"], dict(base_output_directory=out, hardware="gpu", allreduce_overlap=True, steps=1),
                  np_=2, check=False, timeout=900,
                  env_extra=dict(GPUS, SFTDP_SIM_SCHEDULES="1", SFTDP_SIM_PLANT="drop-wait-before:ncclAllReduce"))
    assert p.returncode != 0, p.stdout[-2000:]
    assert "sftdp-cudasim: plant: dropped the cudaStreamWaitEvent before ncclAllReduce" in p.stderr, p.stderr[-4000:]
    race = [line for line in p.stderr.splitlines() if "sftdp-cudasim: streamcheck:" in line]
    assert race and "ncclAllReduce" in race[0], p.stderr[-4000:]
