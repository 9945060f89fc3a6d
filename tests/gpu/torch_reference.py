"""PyTorch's own training of what a gpu test trains with mltool, so that a check can bound
mltool's difference between two ways of running (CUDA vs CPU, micro-batched vs whole) by
PyTorch's difference between the same two, instead of by a number widened until it passes.
AdamW's first steps divide by the gradient's own size, so a gradient near zero that rounds
to either sign moves its weight by a full step either way: how far two correct runs end apart
depends on the data, the weights and the device, and only a reference run measures it.

The loop is mltool train's for a TorchScript module (tests/cli/train_test.py checks it equal
to mltool's on the CPU within 1e-5): the training split in the order --val-split train lists
it in predictions.csv, the epoch orders of lib/train/loop.cpp, the last partial batch dropped,
AdamW (weight decay 0.01 on tensors of 2 or more dimensions, none on the others) at a
constant rate, and the cross-entropy summed over each part and divided by the batch's size.
"""
import copy
import csv
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
from train_test import epoch_order  # noqa: E402


class ScriptMLP(torch.nn.Module):
    """dims → hidden... → classes with ReLU, no dropout or batch norm (nothing random)."""

    def __init__(self, dims, hidden, classes):
        super().__init__()
        layers, d = [], dims
        for h in hidden:
            layers += [torch.nn.Linear(d, h), torch.nn.ReLU()]
            d = h
        layers.append(torch.nn.Linear(d, classes))
        self.body = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.body(x)


def script_mlp(path, dims, hidden, classes, seed):
    """A ScriptMLP drawn after torch.manual_seed(seed), saved as TorchScript at `path`."""
    torch.manual_seed(seed)
    module = ScriptMLP(dims, hidden, classes)
    torch.jit.script(module).save(path)
    return module


def training_split(run_dir, features):
    """The training split of a run trained with --val-split train: its rows of `features`
    (float32) and label ids, in the split's order (predictions.csv's)."""
    with open(os.path.join(run_dir, "predictions.csv")) as f:
        preds = list(csv.DictReader(f))
    labels = sorted({p["label"] for p in preds})
    rows = [int(p["sample"]) for p in preds]
    x = torch.from_numpy(np.asarray(features, dtype=np.float32)[rows])
    y = torch.tensor([labels.index(p["label"]) for p in preds])
    return x, y


def train(module, x, y, seed, epochs, batch, lr, device, parts=1):
    """The weights (name → float64 array) after mltool's loop over (x, y) on `device`, each
    batch's forward and backward in `parts` parts as mltool's --micro-batches does."""
    model = copy.deepcopy(module).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}],
                            lr=lr, foreach=False)
    x, y = x.to(device), y.to(device)
    n = len(x)
    for epoch in range(epochs):
        order = epoch_order(seed, epoch, n).to(device)
        for b in range(0, n - n % batch, batch):
            idx = order[b:b + batch]
            opt.zero_grad()
            sizes = [batch // parts + (1 if i < batch % parts else 0) for i in range(parts)]
            begin = 0
            for size in sizes:
                part = idx[begin:begin + size]
                (F.cross_entropy(model(x[part]), y[part], reduction="sum") / batch).backward()
                begin += size
            opt.step()
    return {k: v.detach().cpu().double().numpy() for k, v in model.state_dict().items()}


def max_abs(a, b):
    """The largest difference between two sets of weights (name → array, any shape: a
    safetensors reader may give them flat)."""
    return max(float(np.abs(np.ravel(a[k]) - np.ravel(b[k])).max()) for k in b)


def max_rel(a, b):
    """max_abs relative to each tensor's largest magnitude in `b`."""
    return max(float(np.abs(np.ravel(a[k]) - np.ravel(b[k])).max() / max(np.abs(b[k]).max(), 1e-30)) for k in b)
