"""TRL's learning-rate schedules step by step (issue 42; SPEC §3): a config with TRL's lr_scheduler_type
(linear, its default; cosine; constant_with_warmup; constant) and warmup_steps (a count) or warmup_ratio
trains at exactly the rate transformers' get_scheduler gives each optimizer step (the rate metrics.jsonl
logs equals LambdaLR's, bit for bit: the same expressions in doubles). Tiny GPT-2, 12 steps, one CPU rank."""
import os

import pytest

from harness import TINY_MODEL, make_data, read_metrics, run_train, write_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

STEPS, PEAK = 12, 1e-3


def transformers_rates(name, warmup_steps=0, warmup_ratio=0.0):
    """The rate of each optimizer step under transformers' Trainer: get_scheduler with
    TrainingArguments.get_warmup_steps' count, stepped after every optimizer step."""
    args = transformers.TrainingArguments(output_dir="unused", warmup_steps=warmup_steps, warmup_ratio=warmup_ratio,
                                          report_to=[])
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    sched = transformers.get_scheduler(name, opt, num_warmup_steps=args.get_warmup_steps(STEPS),
                                       num_training_steps=STEPS)
    rates = []
    for _ in range(STEPS):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


@pytest.fixture(scope="module")
def cfg(workdir):
    make_data(f"{workdir}/train.h5", 8, seed=1)
    return write_config(f"{workdir}/trl.yml", **TINY_MODEL, run_name="r", train_files=f"{workdir}/train.h5",
                        max_seq_length=16, per_device_train_batch_size=2, max_steps=STEPS, learning_rate=PEAK,
                        hardware="cpu", base_output_directory=f"{workdir}/runs")


@pytest.mark.parametrize("name,warmup", [("linear", {"warmup_steps": 3}), ("linear", {}),
                                         ("cosine", {"warmup_ratio": 0.2}), ("constant_with_warmup", {"warmup_steps": 4}),
                                         ("constant", {})])
def test_each_step_trains_at_transformers_rate(cfg, workdir, name, warmup, note):
    run = f"{name}_{'_'.join(f'{k}{v}' for k, v in warmup.items()) or 'none'}"
    p = run_train(cfg, dict({"lr_scheduler_type": name, "run_name": run}, **warmup))
    assert f"config: lr_scheduler_type={name} read as" in p.stdout, p.stdout
    train, _ = read_metrics(os.path.join(workdir, "runs", run))
    got = [m["lr"] for m in train]
    want = transformers_rates(name, warmup.get("warmup_steps", 0), warmup.get("warmup_ratio", 0.0))
    assert [m["step"] for m in train] == list(range(1, STEPS + 1))
    assert got == want, f"{name} {warmup}:\nsft-dp       {got}\ntransformers {want}"
    note(f"lr_scheduler_type {name} {warmup}: {STEPS} rates equal to transformers {transformers.__version__}'s")
