"""train --folds all against one fold and against a plain PyTorch loop doing the same folds.

A survival cohort of patient bags (BAGS bags of TILES tiles, DIMS-d float16 features whose
hazard leans along one direction), packed with `pack --task survival --unit bag --bag-by
patient --folds 5`; abmil (hidden 64, attention 32) with the Cox loss, EPOCHS epochs, batch
BATCH, on the CPU or a GPU (--device). Measured, each the wall time of the whole command:
  one      mltool train --fold 0
  all      mltool train --folds all (5 folds, then cv.json, oof_predictions.csv, km.png)
  peer     a Python loop over the same 5 folds: a torch Dataset over np.load(mmap_mode="r"),
           a DataLoader (workers = cores, each bag a batch element, padded and masked as
           mltool does), the same model, loss, optimizer (AdamW), batch and epochs; each fold
           validated once at the end, as mltool does
The goal (issue 27): all <= 5 x one x 1.1; the ratio peer / all is the speed against the peer.

    cv_bench.py --mltool BIN --work DIR [--bags 1000] [--tiles 5000] [--dims 1024]
                [--epochs 2] [--batch 32] [--device cpu]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

a = argparse.ArgumentParser()
a.add_argument("--mltool", required=True)
a.add_argument("--work", required=True)
a.add_argument("--bags", type=int, default=1000)
a.add_argument("--tiles", type=int, default=5000)
a.add_argument("--dims", type=int, default=1024)
a.add_argument("--epochs", type=int, default=2)
a.add_argument("--batch", type=int, default=32)
a.add_argument("--device", default="cpu")
args = a.parse_args()
os.makedirs(args.work, exist_ok=True)
tag = f"{args.bags}x{args.tiles}x{args.dims}"
store, labels = os.path.join(args.work, f"features-{tag}"), os.path.join(args.work, f"clinical-{tag}.csv")
ds = os.path.join(args.work, f"ds-{tag}")


def make_cohort():
    rng = np.random.default_rng(0)
    u = rng.standard_normal(args.dims).astype(np.float32)
    u /= np.linalg.norm(u)
    z = rng.standard_normal(args.bags)
    os.makedirs(store, exist_ok=True)
    m = np.lib.format.open_memmap(os.path.join(store, "features.npy"), "w+", "<f2",
                                  (args.bags * args.tiles, args.dims))
    for b in range(args.bags):
        m[b * args.tiles:(b + 1) * args.tiles] = (rng.standard_normal((args.tiles, args.dims), np.float32)
                                                  + 1.5 * z[b] * u)
    m.flush()
    with open(os.path.join(store, "keys.txt"), "w") as f:
        for b in range(args.bags):
            f.writelines(f"P{b:05d}S0/{t:06d}_000000\n" for t in range(args.tiles))
    json.dump({"created_by": "cv_bench.py", "dims": args.dims, "dtype": "float16",
               "files": {"keys": "keys.txt", "matrix": "features.npy"}, "format": "mltool.features",
               "format_version": 1, "model": {"name": "synthetic"}, "rows": args.bags * args.tiles},
              open(os.path.join(store, "features.json"), "w"))
    te = rng.exponential(1 / np.exp(1.2 * z)) * 12
    c = rng.uniform(0, 25, args.bags)
    with open(labels, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["slide", "patient", "time", "event"])
        for b in range(args.bags):
            w.writerow([f"P{b:05d}S0", f"P{b:05d}", max(0.1, round(min(te[b], c[b]), 1)), int(te[b] <= c[b])])


def timed(cmd):
    t = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.time() - t


if not os.path.exists(os.path.join(store, "features.json")):
    make_cohort()
if not os.path.exists(os.path.join(ds, "dataset.json")):
    subprocess.run([args.mltool, "pack", store, "--labels", labels, "--key-column", "slide", "--task", "survival",
                    "--time-column", "time", "--event-column", "event", "--unit", "bag", "--bag-by", "patient",
                    "--folds", "5", "--seed", "1", "-o", ds, "--overwrite", "-q"], check=True)
spec = os.path.join(args.work, "abmil.json")
json.dump({"family": "abmil", "hidden": [64], "attention": 32}, open(spec, "w"))
common = ["--model", spec, "--epochs", str(args.epochs), "--batch", str(args.batch), "--device", args.device,
          "--overwrite", "-q"]
one = timed([args.mltool, "train", ds, *common, "--fold", "0", "-o", os.path.join(args.work, "one")])
all_ = timed([args.mltool, "train", ds, *common, "--folds", "all", "-o", os.path.join(args.work, "cv")])


# ---------------------------------------------------------------- the peer
class Bags(torch.utils.data.Dataset):
    def __init__(self, patients, outcome):
        self.patients, self.outcome = patients, outcome

    def __len__(self):
        return len(self.patients)

    def __getitem__(self, i):
        X = np.load(os.path.join(store, "features.npy"), mmap_mode="r")  # per worker: a map
        b = self.patients[i]
        x = torch.from_numpy(np.asarray(X[b * args.tiles:(b + 1) * args.tiles], dtype=np.float32))
        return x, torch.tensor(self.outcome[b], dtype=torch.float32)


def collate(items):
    n = max(x.shape[0] for x, _ in items)
    x = torch.zeros(len(items), n, args.dims)
    mask = torch.zeros(len(items), n, dtype=torch.bool)
    for i, (b, _) in enumerate(items):
        x[i, :b.shape[0]], mask[i, :b.shape[0]] = b, True
    return x, mask, torch.stack([y for _, y in items])


class ABMIL(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(args.dims, 64)
        self.V, self.U, self.w = torch.nn.Linear(64, 32), torch.nn.Linear(64, 32), torch.nn.Linear(32, 1)
        self.head = torch.nn.Linear(64, 1)

    def forward(self, x, mask):
        h = torch.relu(self.embed(x))
        s = self.w(torch.tanh(self.V(h)) * torch.sigmoid(self.U(h))).squeeze(-1).masked_fill(~mask, -1e30)
        return self.head((torch.softmax(s, 1).unsqueeze(-1) * h).sum(1))


def cox(r, y):
    t, e = y[:, 0], y[:, 1]
    order = torch.argsort(t, stable=True)
    ts, rs = t[order], r[order]
    suffix = torch.logcumsumexp(rs.flip(0), 0).flip(0)
    first = torch.searchsorted(ts, t)
    return -((r - suffix[first]) * e).sum() / e.sum().clamp_min(1)


def peer():
    d = json.load(open(os.path.join(ds, "dataset.json")))
    outcome = {}
    for row in csv.DictReader(open(labels)):
        outcome[int(row["patient"][1:])] = (float(row["time"]), float(row["event"]))
    fold_of = {int(g[1:]): int(s.split("-")[1]) for g, s in d["group_split"].items()}
    device = torch.device("cuda" if args.device != "cpu" else "cpu")
    workers = os.cpu_count()
    for f in range(5):
        train = [b for b, k in fold_of.items() if k != f]
        val = [b for b, k in fold_of.items() if k == f]
        torch.manual_seed(0)
        model = ABMIL().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(Bags(train, outcome), batch_size=args.batch, shuffle=True,
                                             num_workers=workers, collate_fn=collate,
                                             pin_memory=device.type == "cuda", persistent_workers=True)
        for _ in range(args.epochs):
            for x, mask, y in loader:
                opt.zero_grad()
                loss = cox(model(x.to(device), mask.to(device)).squeeze(1), y.to(device))
                loss.backward()
                opt.step()
        with torch.no_grad():
            vl = torch.utils.data.DataLoader(Bags(val, outcome), batch_size=args.batch, num_workers=workers,
                                             collate_fn=collate)
            for x, mask, y in vl:
                model(x.to(device), mask.to(device))


t = time.time()
peer()
peer_s = time.time() - t
result = {"bags": args.bags, "tiles_per_bag": args.tiles, "dims": args.dims, "epochs": args.epochs,
          "batch": args.batch, "device": args.device, "cpu_count": os.cpu_count(),
          "one_fold_s": one, "all_folds_s": all_, "peer_s": peer_s,
          "all_over_5_one": all_ / (5 * one), "peer_over_all": peer_s / all_}
print(json.dumps(result, indent=2))
print(f"| {tag} f16, {args.epochs} epochs, batch {args.batch}, {args.device} | one fold {one:.1f} s | "
      f"--folds all {all_:.1f} s ({all_ / (5 * one):.2f} x 5 folds) | PyTorch peer {peer_s:.1f} s "
      f"(mltool {peer_s / all_:.2f}x faster) |")
