#!/usr/bin/python3
"""Independent float64 reference of SPEC §5's GPT-2 and SPEC §1's loss sums, in PyTorch.

usage: reference_gpt2.py PARAMS.h5 BATCH.json GRADS_OUT.h5
PARAMS.h5 holds /params/<name> (float32, SPEC names and shapes) and root attributes L, NH.
BATCH.json holds B, T, inputs, targets, loss_weights and optionally segment_ids, positions.
Writes the gradient of the LOSS SUM w.r.t. every parameter to GRADS_OUT.h5 as /params/<name>
(float32) and prints {"loss_sum": ..., "weight_sum": ...} on stdout.
"""
import json
import math
import sys

import h5py
import torch

torch.set_default_dtype(torch.float64)


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def logits_of(p, L, NH, inputs, segments, positions):
    """(B, T, V) logits of SPEC §5's GPT-2 for (B, T) token ids."""
    B, T = inputs.shape
    C = p["wte"].shape[1]
    hs = C // NH
    x = p["wte"][inputs] + p["wpe"][positions]
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, T, T)
    if segments is not None:
        allowed = allowed & (segments[:, :, None] == segments[:, None, :])
    for l in range(L):
        h = f"h.{l}."
        a = layernorm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        qkv = a @ p[h + "attn.qkv.weight"].T + p[h + "attn.qkv.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~allowed[:, None, :, :], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.proj.weight"].T + p[h + "attn.proj.bias"]
        m = layernorm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        m = gelu_tanh(m @ p[h + "mlp.fc.weight"].T + p[h + "mlp.fc.bias"])
        x = x + m @ p[h + "mlp.proj.weight"].T + p[h + "mlp.proj.bias"]
    x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte"].T


def forward(p, L, NH, inputs, targets, weights, segments, positions):
    """SPEC §1's loss sum Σ w·(−log softmax(logits)[target]) and weight sum Σ w."""
    logits = logits_of(p, L, NH, inputs, segments, positions)
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    return (weights * nll).sum(), weights.sum()


def main():
    params_path, batch_path, out_path = sys.argv[1:4]
    with h5py.File(params_path, "r") as f:
        L, NH = int(f.attrs["L"]), int(f.attrs["NH"])
        p = {k: torch.tensor(f["params"][k][...], dtype=torch.float64, requires_grad=True)
             for k in f["params"].keys()}
    batch = json.load(open(batch_path))
    B, T = batch["B"], batch["T"]
    as_int = lambda k: torch.tensor(batch[k], dtype=torch.long).view(B, T)
    inputs, targets = as_int("inputs"), as_int("targets")
    weights = torch.tensor(batch["loss_weights"], dtype=torch.float64).view(B, T)
    segments = as_int("segment_ids") if batch.get("segment_ids") else None
    positions = as_int("positions") if batch.get("positions") else torch.arange(T).expand(B, T)
    loss_sum, weight_sum = forward(p, L, NH, inputs, targets, weights, segments, positions)
    loss_sum.backward()
    with h5py.File(out_path, "w") as f:
        g = f.create_group("params")
        for k, t in p.items():
            g.create_dataset(k, data=t.grad.numpy().astype("float32"))
    print(json.dumps({"loss_sum": loss_sum.item(), "weight_sum": weight_sum.item()}))


if __name__ == "__main__":
    main()
