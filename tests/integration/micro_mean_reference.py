"""Float64 reference for regression test (a): for the rows of one global batch (no shuffling),
prints the token-weighted loss Σ loss sums / Σ weight sums and the mean of the GA micro-batch
means, using tests/model/reference_gpt2.py's forward on the given weights.

usage: micro_mean_reference.py PARAMS.h5 DATA.h5 STEP G GA"""
import os
import sys

import h5py
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../model"))
from reference_gpt2 import forward  # noqa: E402

torch.set_default_dtype(torch.float64)
params_path, data_path, step, G, GA = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
with h5py.File(params_path, "r") as f:
    L, NH = int(f.attrs["L"]), int(f.attrs["NH"])
    p = {k: torch.tensor(f["params"][k][...], dtype=torch.float64) for k in f["params"].keys()}
with h5py.File(data_path, "r") as f:
    rows = slice(step * G, step * G + G)
    inputs = torch.tensor(f["inputs"][rows], dtype=torch.long)
    targets = torch.tensor(f["targets"][rows], dtype=torch.long)
    weights = torch.tensor(f["loss_weights"][rows], dtype=torch.float64)
T = inputs.shape[1]
positions = torch.arange(T).expand(G, T)
b = G // GA
loss_sum, weight_sum = forward(p, L, NH, inputs, targets, weights, None, positions)
means = []
for m in range(GA):
    s = slice(m * b, (m + 1) * b)
    ls, ws = forward(p, L, NH, inputs[s], targets[s], weights[s], None, positions[s])
    means.append(ls.item() / ws.item() if ws.item() > 0 else 0.0)  # the buggy per-micro-batch mean
print((loss_sum / weight_sum).item(), sum(means) / GA)
