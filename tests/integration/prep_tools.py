"""What the Python data tools' tests share: the preparer run in this process (transformers imported
once per test file), JSONL input files, and the one-`error:`-line check of a user error (exit 2)."""
import contextlib
import importlib.util
import io
import json
import os
import subprocess

from harness import SOURCE

PREPARER = os.path.join(SOURCE, "scripts", "sft_prepare_hf.py")


def load_preparer(name):
    """scripts/sft_prepare_hf.py as a module of its own (one per test file: `name`)."""
    spec = importlib.util.spec_from_file_location(name, PREPARER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare_in_process(module, tokenizer, args, check=True):
    """module.main(["--tokenizer", tokenizer] + args) as a CompletedProcess (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main(["--tokenizer", tokenizer] + args)
    p = subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
    if check:
        assert p.returncode == 0, f"{args}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


def one_error_line(p, *needles):
    """A user error: exit 2, stderr one line starting `error: ` that contains every needle."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    for s in needles:
        assert s in p.stderr, (s, p.stderr)


def write_jsonl(path, objs):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for o in objs:
            f.write(json.dumps(o) + "\n")
    return path
