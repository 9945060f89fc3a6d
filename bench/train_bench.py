#!/usr/bin/env python3
"""mltool train's feeds side by side, and against PyTorch training loops in Python, on the
same packed data and the same model. Run through bench/run-train.sh, which finds the binary
and the Python.

    train_bench.py --mltool MLTOOL --out OUTDIR [--work DIR] [--rows 400000] [--dims 1024]
                   [--hidden 256] [--batch 512] [--epochs 3] [--device cuda]
                   [--workers CORES] [--cpu-smoke]

1. A feature store of ROWS x DIMS float16 features (numpy, the documented layout) with 10
   labels from a random linear rule plus noise, packed with `mltool pack` (train 0.95,
   val 0.05, 64 slides as groups); kept in WORK and reused by later runs with the same size.
2. The model: {"family": "mlp", "hidden": [HIDDEN]} — Linear(DIMS, HIDDEN), ReLU,
   Linear(HIDDEN, 10) — AdamW at 1e-3, cosine schedule, batch BATCH, EPOCHS epochs.
3. Samples per second of training steps (validation and checkpoints left out: the median of
   the metrics.jsonl step lines, one every 20 steps, after the first epoch's first line) for
     pinned   mltool train --feed pinned  (the matrix on the GPU once, batches gathered there)
     pinned-eager  the same with --no-cuda-graph (every step eager, none replayed from a graph)
     host     mltool train --feed host    (worker threads gather into pinned buffers, copies
              on a side stream one batch ahead)
     sync     mltool train --feed sync    (gathered on the training thread, blocking copy)
   and for two PyTorch loops (the model, optimizer and schedule the same, in Python):
     python-dataloader  torch.utils.data.DataLoader over a TensorDataset of the memory-mapped
              matrix, shuffle, pin_memory, num_workers = WORKERS, .to(device, non_blocking)
     python-resident    the matrix on the device once, torch.randperm per epoch, indexing per
              batch in Python: mltool's pinned technique written in PyTorch
4. A markdown table (stdout and OUTDIR/train-bench.md) with the ratios the goals are stated
   in — pinned / sync >= 3x, pinned / host >= 2x, pinned / python-dataloader >= 2x, pinned /
   python-resident >= 5x (issue 37), pinned / pinned-eager what the CUDA graphs bring — and
   OUTDIR/train-bench.json with every number (rewritten after each measurement).

--cpu-smoke: 8192 rows of 64 dims, batch 128, 2 epochs, on the CPU: tries every step without
a GPU (the ratios mean nothing there).
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

CLASSES = 10
SLIDES = 64


def make_data(a, work):
    """WORK/feat (the store), WORK/ds (the packed dataset); reused when the size matches."""
    tag = f"{a.rows}x{a.dims}"
    stamp = os.path.join(work, "data.json")
    if os.path.exists(stamp) and json.load(open(stamp)).get("tag") == tag and os.path.exists(os.path.join(work, "ds")):
        return
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = np.random.default_rng(0)
    feat = os.path.join(work, "feat")
    os.makedirs(feat)
    w = rng.standard_normal((a.dims, CLASSES)).astype(np.float32)
    X = np.lib.format.open_memmap(os.path.join(feat, "features.npy"), mode="w+", dtype="<f2", shape=(a.rows, a.dims))
    labels = np.empty(a.rows, np.int64)
    chunk = 65536
    for i in range(0, a.rows, chunk):
        x = rng.standard_normal((min(chunk, a.rows - i), a.dims)).astype(np.float32)
        X[i:i + len(x)] = x
        labels[i:i + len(x)] = np.argmax(x @ w + rng.standard_normal((len(x), CLASSES)) * 4, 1)
    X.flush()
    del X
    keys = [f"S{i % SLIDES:03d}/{i // SLIDES:06d}_000000" for i in range(a.rows)]
    with open(os.path.join(feat, "keys.txt"), "w") as f:
        f.writelines(k + "\n" for k in keys)
    json.dump({"created_by": "train_bench.py", "dims": a.dims, "dtype": "float16",
               "files": {"keys": "keys.txt", "matrix": "features.npy"}, "format": "mltool.features",
               "format_version": 1, "model": {"name": "random"}, "rows": a.rows},
              open(os.path.join(feat, "features.json"), "w"))
    with open(os.path.join(work, "labels.csv"), "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["key", "label"])
        out.writerows((k, int(l)) for k, l in zip(keys, labels))
    subprocess.run([a.mltool, "pack", feat, "--labels", os.path.join(work, "labels.csv"), "-o",
                    os.path.join(work, "ds"), "--split", "train=0.95,val=0.05"], check=True)
    json.dump({"tag": tag}, open(stamp, "w"))


def split_rows(work, split):
    """(rows, labels) of a split, from predictions-free sources: the pack's own labels table
    joined with dataset.json's group_split (a slide's rows all go to its split)."""
    meta = json.load(open(os.path.join(work, "ds", "dataset.json")))
    names = meta["labels"]["names"]
    slides = {g for g, s in meta["group_split"].items() if s == split}
    rows, labels = [], []
    with open(os.path.join(work, "labels.csv")) as f:
        for i, (key, label) in enumerate(csv.reader(f)):
            if i and key.split("/")[0] in slides:
                rows.append(i - 1)
                labels.append(names.index(label))
    return np.array(rows), np.array(labels)


def step_rate(run_dir):
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rates = [l["samples_per_second"] for l in lines if l["event"] == "step"][1:]
    return statistics.median(rates) if rates else float("nan")


def mltool_run(a, work, feed, *extra):
    out = os.path.join(work, f"run-{feed}{'-'.join([''] + [e.lstrip('-') for e in extra])}")
    cmd = [a.mltool, "train", os.path.join(work, "ds"), "--model", os.path.join(work, "mlp.json"), "-o", out,
           "--overwrite", "--feed", feed, "--device", a.device, "--batch", str(a.batch), "--epochs",
           str(a.epochs), "--lr", "1e-3", "--log-every", "20", "--json", "-q", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr}")
    s = json.loads(p.stdout)
    return {"samples_per_second": step_rate(out), "loop_samples_per_second": s["samples_per_second"],
            "feed": s["feed"], "val_accuracy": s["validation"]["val_accuracy"], "seconds": s["seconds"]}


def model(a):
    return nn.Sequential(nn.Linear(a.dims, a.hidden), nn.ReLU(), nn.Linear(a.hidden, CLASSES))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def python_loop(a, work, resident):
    device = torch.device(a.device)
    torch.manual_seed(0)
    X = torch.from_numpy(np.load(os.path.join(work, "feat", "features.npy"), mmap_mode="r"))
    rows, labels = split_rows(work, "train")
    m = model(a).to(device)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    plain = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}], lr=1e-3)
    steps = len(rows) // a.batch
    total = steps * a.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + np.cos(np.pi * min(1.0, s / max(1, total)))))
    y_all = torch.from_numpy(labels)
    if resident:
        Xd = X[torch.from_numpy(rows)].to(device)  # the split's rows, once
        yd = y_all.to(device)
        batches = lambda: (lambda perm: ((Xd[perm[i * a.batch:(i + 1) * a.batch]],
                                          yd[perm[i * a.batch:(i + 1) * a.batch]]) for i in range(steps)))(
            torch.randperm(len(rows), device=device))
    else:
        ds = torch.utils.data.TensorDataset(X[torch.from_numpy(rows)], y_all)  # copies the split into RAM
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                             pin_memory=device.type == "cuda", num_workers=a.workers,
                                             persistent_workers=a.workers > 0)
        batches = lambda: ((x.to(device, non_blocking=True), y.to(device, non_blocking=True)) for x, y in loader)
    rates, window, count, t = [], 20, 0, None
    for _ in range(a.epochs):
        for x, y in batches():
            loss = nn.functional.cross_entropy(m(x.float()), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            count += 1
            if count % window == 0:  # the same measure as mltool's step lines: 20 steps at a time
                loss.item()
                now = time.perf_counter()
                if t is not None:
                    rates.append(window * a.batch / (now - t))
                t = now
    sync(device)
    return {"samples_per_second": statistics.median(rates[1:] or rates) if rates else float("nan")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mltool", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "mltool-train-bench"))
    p.add_argument("--rows", type=int, default=400000)
    p.add_argument("--dims", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    p.add_argument("--cpu-smoke", action="store_true")
    a = p.parse_args()
    if a.cpu_smoke:
        a.rows, a.dims, a.batch, a.epochs, a.device, a.workers = 8192, 64, 128, 2, "cpu", 2
        a.work += "-smoke"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("train_bench.py: no CUDA device visible to torch (use --cpu-smoke to try it on the CPU)")
    os.makedirs(a.out, exist_ok=True)
    make_data(a, a.work)
    json.dump({"family": "mlp", "hidden": [a.hidden]}, open(os.path.join(a.work, "mlp.json"), "w"))

    results = {"rows": a.rows, "dims": a.dims, "dtype": "float16", "hidden": a.hidden, "batch": a.batch,
               "epochs": a.epochs, "device": a.device, "workers": a.workers,
               "gpu": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else None, "runs": {}}
    path = os.path.join(a.out, "train-bench.json")
    runs = [("pinned", lambda: mltool_run(a, a.work, "pinned")),
            ("pinned-eager", lambda: mltool_run(a, a.work, "pinned", "--no-cuda-graph")),
            ("host", lambda: mltool_run(a, a.work, "host")), ("sync", lambda: mltool_run(a, a.work, "sync")),
            ("python-dataloader", lambda: python_loop(a, a.work, False)),
            ("python-resident", lambda: python_loop(a, a.work, True))]
    for name, fn in runs:
        results["runs"][name] = fn()
        print(f"{name}: {results['runs'][name]['samples_per_second']:.0f} samples/s", flush=True)
        json.dump(results, open(path, "w"), indent=2)

    r = {k: v["samples_per_second"] for k, v in results["runs"].items()}
    goals = [("pinned / sync", r["pinned"] / r["sync"], 3), ("pinned / host", r["pinned"] / r["host"], 2),
             ("pinned / python-dataloader", r["pinned"] / r["python-dataloader"], 2),
             ("pinned / python-resident", r["pinned"] / r["python-resident"], 5),
             ("pinned / pinned-eager (CUDA graphs)", r["pinned"] / r["pinned-eager"], None)]
    results["ratios"] = {name: v for name, v, _ in goals}
    json.dump(results, open(path, "w"), indent=2)
    md = [f"mltool train, MLP {a.dims}-{a.hidden}-{CLASSES} on {a.rows} x {a.dims} float16 features, batch {a.batch}, "
          f"{a.epochs} epochs, {results['gpu'] or a.device}", "",
          "| run | samples/s |", "|---|---:|"]
    md += [f"| {k} | {v:,.0f} |" for k, v in r.items()]
    md += ["", "| ratio | measured | goal |", "|---|---:|---:|"]
    md += [f"| {n} | {v:.2f}x | {'>= %dx' % g if g else '-'} |" for n, v, g in goals]
    md += ["", f"pinned: {r['pinned']:,.0f} samples/s (goal at batch 512 on a GPU: >= 2,000,000)."]
    text = "\n".join(md) + "\n"
    open(os.path.join(a.out, "train-bench.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
