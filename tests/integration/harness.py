"""Shared helpers for the integration tests: tiny data files (docs/SPEC.md §4), configs, sft_train
runs (plain or under mpirun), metrics and checkpoint readers. Run under Debian's /usr/bin/python3."""
import json
import os
import shutil
import subprocess
import tempfile

import h5py
import numpy as np

BUILD = os.environ.get("SFTDP_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
SOURCE = os.environ.get("SFTDP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
SFT_TRAIN = os.path.join(BUILD, "sft_train")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}

# A small model that trains in well under a second per step.
TINY_MODEL = dict(model_name="gpt2-tiny", num_decoder_layers=2, num_heads=2, emb_dim=32,
                  mlp_dim=64, vocab_size=64, max_position_embeddings=16)


def simulator_build():
    """True for a build with SFTDP_CUDA_SIM=ON: hardware=gpu runs on simulated GPUs."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return "SFTDP_CUDA_SIM:BOOL=ON" in f.read()
    except OSError:
        return False


def real_gpu():
    """True where nvidia-smi lists a GPU: the GPU tests run on it in a build without the simulator."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def tempdir():
    d = tempfile.mkdtemp(prefix="sftdp_it_")
    if not os.environ.get("SFTDP_KEEP_TMP"):
        import atexit
        atexit.register(shutil.rmtree, d, True)
    return d


def make_data(path, n, T=16, vocab=64, seed=0, masked_rows=(), unequal=True, segments=False):
    """Rows with very unequal token counts: row r has a loss-weighted suffix whose length varies
    from 1 to T; rows in masked_rows have no weighted token at all."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, vocab, size=(n, T), dtype=np.int32)
    targets = rng.integers(0, vocab, size=(n, T), dtype=np.int32)
    weights = np.zeros((n, T), dtype=np.float32)
    for r in range(n):
        if r in masked_rows:
            continue
        k = int(rng.integers(1, T + 1)) if unequal else T // 2
        weights[r, T - k:] = 1.0
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=inputs)
        f.create_dataset("targets", data=targets)
        f.create_dataset("loss_weights", data=weights)
        if segments:
            seg = np.ones((n, T), dtype=np.int32)
            seg[:, T // 2:] = 2
            pos = np.concatenate([np.arange(T // 2), np.arange(T - T // 2)]).astype(np.int32)
            f.create_dataset("segment_ids", data=seg)
            f.create_dataset("positions", data=np.tile(pos, (n, 1)))
        f.attrs["vocab_size"] = np.int64(vocab)
    return path


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def write_config(path, **keys):
    with open(path, "w") as f:
        for k, v in keys.items():
            f.write(f"{k}: {yaml_value(v)}\n")
    return path


def run_train(config, overrides=(), np_=1, check=True, timeout=300, env_extra=None):
    """Runs sft_train (under mpirun when np_ > 1). Returns the CompletedProcess; with check, a
    non-zero exit raises AssertionError carrying the command and the tail of its output."""
    cmd = [SFT_TRAIN, config] + [f"{k}={yaml_value(v)}" if not isinstance(k, int) else v
                                 for k, v in (overrides.items() if isinstance(overrides, dict) else [])]
    if not isinstance(overrides, dict):
        cmd += list(overrides)
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
    env = dict(os.environ, **MPI_ENV, **(env_extra or {}))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"command failed ({p.returncode}): {' '.join(cmd)}\n"
                             f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    return p


def read_metrics(run_dir):
    train, evals = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            (evals if "eval_loss" in j else train).append(j)
    return train, evals


def read_params(path, group="params"):
    """One group ("params", "opt/m", "opt/v") of a checkpoint, {tensor name: array}: a single file
    step_<S>.h5, or a sharded step_<S>/ directory (SPEC §5: the pieces the index names, put together)."""
    if os.path.isdir(path):
        return read_sharded(path, group)
    with h5py.File(path, "r") as f:
        return {k: f[group][k][...] for k in f[group].keys()}


def read_sharded(step_dir, group="params"):
    """read_params of a sharded checkpoint directory, straight from its files (no sft-dp code)."""
    g = {"params": "params", "opt/m": "m", "opt/v": "v"}[group]
    with h5py.File(f"{step_dir}/index.h5", "r") as index:
        names = [n.decode() if isinstance(n, bytes) else n for n in index["tensors/names"][...]]
        shapes = [[d for d in row if d >= 0] for row in index["tensors/shapes"][...]]
        pieces = index[f"pieces/{g}"][...]
    flat = {n: np.full(int(np.prod(s)), np.nan, np.float32) for n, s in zip(names, shapes)}
    shards = {}
    try:
        for t, start, count, r in pieces:
            if r not in shards:
                shards[r] = h5py.File(f"{step_dir}/shard_{r}.h5", "r")
            flat[names[t]][start:start + count] = shards[r][g][f"{names[t]}@{start}"][...]
    finally:
        for f in shards.values():
            f.close()
    return {n: flat[n].reshape(s) for n, s in zip(names, shapes)}


def checkpoint_path(run_dir, step):
    """Where sft_train writes the checkpoint of `step` (SPEC §5: a sharded directory)."""
    return f"{run_dir}/checkpoints/step_{step}"


def checkpoint_state(path):
    """The root attributes of a checkpoint (file, or a directory's index)."""
    with h5py.File(f"{path}/index.h5" if os.path.isdir(path) else path, "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}


def max_rel(a, b):
    """Relative error ||a-b|| / ||b|| of the whole parameter vector (every tensor, by name).

    Not per tensor: the key third of attn.qkv.bias has an exactly zero true gradient (softmax
    ignores a constant added to every key's score), so its gradient is pure rounding noise that
    Adam turns into ±lr steps; on its own that slice differs by ~1e-4 between any two summation
    orders, while every tensor with a real gradient agrees to ~1e-6 (worst_tensors shows it)."""
    assert set(a) == set(b), "different tensor names"
    num = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in b)
    den = sum(float(np.sum(b[k].astype(np.float64) ** 2)) for k in b)
    return (num / max(den, 1e-300)) ** 0.5


def weighted_nll(logits, targets, weights):
    """The SPEC loss in float64 torch: sum(w · nll) / sum(w) over (B, T) logits; the reference the
    Hugging Face tests compare sft-dp's first-step loss with (torch is imported here, not above:
    most tests run without it)."""
    import torch
    logits = logits.double()
    nll = -torch.log_softmax(logits, -1).gather(-1, torch.as_tensor(targets, dtype=torch.long)[..., None])[..., 0]
    w = torch.as_tensor(weights, dtype=torch.float64)
    return (w * nll).sum() / w.sum()


def worst_tensors(a, b, n=3):
    """The n tensors with the largest relative error, for diagnostics."""
    rel = [(float(np.linalg.norm(a[k].astype(np.float64) - b[k]) / max(np.linalg.norm(b[k]), 1e-12)), k)
           for k in b]
    return sorted(rel, reverse=True)[:n]


def gpt2_shapes(L, C, F, V, maxT):
    """docs/SPEC.md §5 names and shapes."""
    s = {"wte": (V, C), "wpe": (maxT, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(L):
        h = f"h.{l}."
        s.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,), h + "attn.qkv.weight": (3 * C, C),
                  h + "attn.qkv.bias": (3 * C,), h + "attn.proj.weight": (C, C),
                  h + "attn.proj.bias": (C,), h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
                  h + "mlp.fc.weight": (F, C), h + "mlp.fc.bias": (F,), h + "mlp.proj.weight": (C, F),
                  h + "mlp.proj.bias": (C,)})
    return s


def write_init_params(path, seed=0, model=None):
    """Random initial weights (normal 0.02, LayerNorm weights near 1) for load_parameters_path."""
    m = dict(TINY_MODEL, **(model or {}))
    rng = np.random.default_rng(seed)
    shapes = gpt2_shapes(m["num_decoder_layers"], m["emb_dim"], m["mlp_dim"], m["vocab_size"],
                         m["max_position_embeddings"])
    with h5py.File(path, "w") as f:
        g = f.create_group("params")
        for k, shp in shapes.items():
            x = rng.normal(0.0, 0.02, size=shp)
            if k.endswith("ln_1.weight") or k.endswith("ln_2.weight") or k == "ln_f.weight":
                x += 1.0
            g.create_dataset(k, data=x.astype(np.float32))
        f.attrs["L"] = m["num_decoder_layers"]
        f.attrs["NH"] = m["num_heads"]
    return path


# ---- processes of an mpirun job (for the rank-failure tests) ----

def children(pid):
    """PIDs whose parent is pid (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out


def world_rank(pid):
    """The MPI rank of an Open MPI process, from its environment; None if unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(var.split(b"=", 1)[1])
    except OSError:
        pass
    return None


def spec_of_hf_gpt2(sd, L):
    """SPEC §5 tensors (numpy) of an L-layer Hugging Face GPT-2 state dict, names with or without
    "transformer." (Conv1D [in, out] -> SPEC [out, in]); values as given (torch or numpy)."""
    sd = {k.removeprefix("transformer."): v for k, v in sd.items()}
    out = {"wte": sd["wte.weight"], "wpe": sd["wpe.weight"], "ln_f.weight": sd["ln_f.weight"],
           "ln_f.bias": sd["ln_f.bias"]}
    for l in range(L):
        h = f"h.{l}."
        for spec, hf in [("ln_1", "ln_1"), ("ln_2", "ln_2"), ("attn.qkv", "attn.c_attn"),
                         ("attn.proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")]:
            w = sd[h + hf + ".weight"]
            out[h + spec + ".weight"] = w.T if w.ndim == 2 else w
            out[h + spec + ".bias"] = sd[h + hf + ".bias"]
    return {k: np.ascontiguousarray(np.asarray(v)) for k, v in out.items()}


def spec_of_hf_llama(sd, L):
    """SPEC §5 tensors (numpy) of an L-layer Hugging Face Llama-family state dict (LlamaForCausalLM,
    Qwen2/Qwen3ForCausalLM; names with or without "model."): attn.qkv = [q_proj; k_proj; v_proj]
    rows (weights, and biases when present), mlp.fc = [gate_proj; up_proj], q_norm/k_norm when
    present, lm_head.weight when present (untied)."""
    sd = {k.removeprefix("model."): np.asarray(v) for k, v in sd.items()}
    out = {"wte": sd["embed_tokens.weight"], "ln_f.weight": sd["norm.weight"]}
    if "lm_head.weight" in sd:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for l in range(L):
        h, a = f"h.{l}.", f"layers.{l}."
        out[h + "ln_1.weight"] = sd[a + "input_layernorm.weight"]
        out[h + "ln_2.weight"] = sd[a + "post_attention_layernorm.weight"]
        out[h + "attn.qkv.weight"] = np.concatenate([sd[a + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        if a + "self_attn.q_proj.bias" in sd:
            out[h + "attn.qkv.bias"] = np.concatenate([sd[a + f"self_attn.{x}_proj.bias"] for x in "qkv"])
        for n in ("q_norm", "k_norm"):
            if a + f"self_attn.{n}.weight" in sd:
                out[h + f"attn.{n}.weight"] = sd[a + f"self_attn.{n}.weight"]
        out[h + "attn.proj.weight"] = sd[a + "self_attn.o_proj.weight"]
        out[h + "mlp.fc.weight"] = np.concatenate([sd[a + "mlp.gate_proj.weight"], sd[a + "mlp.up_proj.weight"]])
        out[h + "mlp.proj.weight"] = sd[a + "mlp.down_proj.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}
