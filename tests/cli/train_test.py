"""mltool train, end to end on synthetic data packed with `mltool pack`: that it learns
(separable tile features with an MLP, a bag task with attention MIL, tinted tiles with the
residual CNN), that the feeds give identical weights, that a stopped or killed run resumes to
exactly the weights of an uninterrupted one, that PyTorch loads the exported weights and its
own forward pass (written here with torch.nn.functional) reproduces the logits the tool
wrote, and that bad input stops with a clear message and exit code.

    train_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import os
import signal
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zlib

import numpy as np
import sklearn.metrics
import torch
import torch.nn.functional as F

import report_page
from bootstrap_ref import MIN_GROUPS, expect_interval, expect_not_estimable, group_bootstrap, too_few_groups
from cli_common import (MATH_PATHS, command_json, command_ok, expect, run, run_checks, run_json,
                        run_with_sigterms, second_writer_refused, tmp, write_feature_store)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])

TIMING = {"seconds", "samples_per_second"}  # the only fields that may differ between equal runs


# ---------------------------------------------------------------- fixtures

def write_labels(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        w.writerows(rows)


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def pack(features, labels, out, *args):
    code, _, err = run([mltool, "pack", features, "--labels", labels, "-o", out, "--seed", "1", *args])
    expect(code == 0, f"pack {out}: exit {code}: {err.strip()}")


def fixtures():
    rng = np.random.default_rng(5)
    # Tiles: three Gaussian blobs in 32-d, 20 slides of 15 tiles, labels mixed within slides;
    # float16, so the feeds' widening is exercised.
    centers = rng.standard_normal((3, 32)) * 1.5
    keys, rows, labels = [], [], []
    for s in range(20):
        for t in range(15):
            c = int(rng.integers(0, 3))
            keys.append(f"S{s:02d}/{t:06d}_000000")
            rows.append(centers[c] + rng.standard_normal(32))
            labels.append((keys[-1], ["normal", "stroma", "tumor"][c]))
    write_feature_store(tmp("feat"), np.array(rows), keys, "float16")
    write_labels(tmp("tiles.csv"), labels)
    pack(tmp("feat"), tmp("tiles.csv"), tmp("ds"), "--split", "train=0.7,val=0.3")
    write_json(tmp("mlp.json"), {"family": "mlp", "hidden": [32], "batch_norm": True, "dropout": 0.1})

    # Bags: 40 slides of 4-16 instances in 16-d; a positive bag holds 1-3 instances shifted
    # along one direction.
    u = rng.standard_normal(16)
    u /= np.linalg.norm(u)
    keys, rows, slides = [], [], []
    for s in range(40):
        n = int(rng.integers(4, 17))
        x = rng.standard_normal((n, 16))
        positive = s % 2 == 1
        if positive:
            x[rng.choice(n, int(rng.integers(1, 4)), replace=False)] += 6 * u
        keys += [f"B{s:02d}/{t:06d}_000000" for t in range(n)]
        rows += list(x)
        slides.append((f"B{s:02d}", "pos" if positive else "neg"))
    write_feature_store(tmp("bagfeat"), np.array(rows), keys)
    write_labels(tmp("bags.csv"), slides)
    pack(tmp("bagfeat"), tmp("bags.csv"), tmp("bagds"), "--unit", "bag", "--split", "train=0.6,val=0.4")
    write_json(tmp("abmil.json"), {"family": "abmil", "hidden": [16], "attention": 8})
    return "tiles 300 x 32 (float16), 40 bags"


def train(*args):
    """mltool train ARGS --json -q; (code, summary or None, stderr)."""
    return command_json(mltool, "train", *args)


def train_ok(*args):
    return command_ok(mltool, "train", *args)


def metrics(run_dir, timing=False):
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    if not timing:
        for l in lines:
            for k in TIMING:
                l.pop(k, None)
    return lines


def read_safetensors(path):
    """{name: np.ndarray} and the metadata, parsed from the format's spec alone."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    expect(n % 8 == 0, f"{path}: header of {n} bytes is not 8-byte aligned")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "U8": "u1"}
    out, end = {}, 0
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = h["data_offsets"]
        expect(b == end, f"{path}: {name} starts at {b}, the previous tensor ended at {end}")
        end = e
        a = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dtypes[h["dtype"]])
        out[name] = a.reshape(h["shape"])
    expect(8 + n + end == len(data), f"{path}: {len(data) - 8 - n - end} trailing bytes")
    return out, meta


def predictions(run_dir):
    with open(os.path.join(run_dir, "predictions.csv")) as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------- checks

def check_mlp_learns():
    s = train_ok(tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("run_mlp"), "--epochs", "8",
                 "--batch", "32", "--lr", "0.01", "--log-every", "4", "--warmup", "3")
    expect(s["status"] == "complete" and s["unit"] == "tile" and s["blocks"] == ["hidden1", "head"],
           f"summary {s}")
    lines = metrics(tmp("run_mlp"))
    epochs = [l for l in lines if l["event"] == "epoch"]
    expect(len(epochs) == 8, f"{len(epochs)} epoch lines")
    expect(epochs[-1]["val_accuracy"] >= 0.95, f"final val accuracy {epochs[-1]['val_accuracy']}")
    expect(lines[-1]["event"] == "end" and lines[-1]["status"] == "complete", f"last line {lines[-1]}")
    manifest = json.load(open(tmp("run_mlp", "run.json")))
    expect(manifest["status"] == "complete" and manifest["format"] == "mltool.train-run", "run.json status")
    spe, total = manifest["steps_per_epoch"], manifest["total_steps"]
    expect(total == 8 * spe == s["steps"], f"steps {s['steps']}, steps_per_epoch {spe}")
    # The schedule: linear warmup over 3 steps, then cosine to 0 at the end.
    for l in lines:
        if l["event"] != "step":
            continue
        i = l["step"] - 1
        want = 0.01 * (i + 1) / 3 if i < 3 else 0.01 * 0.5 * (1 + np.cos(np.pi * (i - 3) / (total - 3)))
        expect(abs(l["lr"] - want) < 1e-12, f"step {l['step']}: lr {l['lr']}, expected {want}")
        expect(l["step"] % 4 == 0 and np.isfinite(l["loss"]), f"step line {l}")
    for f in ("model.safetensors", "model.pt", "best.safetensors", "predictions.csv",
              "checkpoints/last.pt", "checkpoints/best.pt"):
        expect(os.path.isfile(tmp("run_mlp", f)), f"{f} missing")
    best = [l["epoch"] for l in epochs if l["best"]]
    expect(best and best[-1] == s["best_epoch"] == manifest["result"]["best_epoch"], f"best epochs {best}, {s}")
    # Three labels: balanced accuracy only, its groups the slides (the tiles' own). The
    # validation split's few slides are too few for an interval: run.json and the page say so.
    keys = open(tmp("feat", "keys.txt")).read().split()
    preds = predictions(tmp("run_mlp"))
    slides = [keys[int(p["sample"])].split("/")[0] for p in preds]
    y, yhat = [p["label"] for p in preds], [p["prediction"] for p in preds]
    iv = manifest["result"]["intervals"]
    expect(iv["unit"] == "slide" and iv["groups"] == len(set(slides)) < MIN_GROUPS and
           sorted(iv["metrics"]) == ["val_balanced_accuracy"], f"intervals {iv}")
    bacc = sklearn.metrics.balanced_accuracy_score
    why = too_few_groups(len(set(slides)), "slide")
    expect_not_estimable(expect, iv, "val_balanced_accuracy", bacc(y, yhat), why)
    page = report_page.parse(tmp("run_mlp", "report.html"))
    rows = [r for r in page.rows if r and r[0] == "val_balanced_accuracy" and len(r) == 3]
    expect(rows and rows[-1][2] == f"not estimable: {why}", f"report.html's interval cells {rows}")
    expect(abs(manifest["result"]["validation"]["val_balanced_accuracy"] - bacc(y, yhat)) <= 1e-12,
           "val_balanced_accuracy is scikit-learn's")
    names = ["normal", "stroma", "tumor"]
    charts = manifest["result"]["charts"]
    expect(sorted(charts) == ["confusion", "pr", "roc"] and
           charts["confusion"]["matrix"] == sklearn.metrics.confusion_matrix(y, yhat, labels=names).tolist(),
           f"three labels: the confusion matrix (scikit-learn's) and one-vs-rest curves: {charts}")
    cells = svg_group(tmp("run_mlp", "confusion.svg"), "cells")
    expect(len(list(cells.iter(SVG + "rect"))) == 9, "confusion.svg: 3 x 3 cells")
    # One vs rest: each label's softmax probability (of the float32 logits) against the rest.
    logits = np.array([[p[f"logit_{n}"] for n in names] for p in preds], dtype=np.float32).astype(np.float64)
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    lines = list(svg_group(tmp("run_mlp", "roc.svg"), "curves").iter(SVG + "polyline"))
    expect(len(lines) == 3, f"roc.svg: {len(lines)} curves")
    for k, n in enumerate(names):
        truth = np.array([l == n for l in y], dtype=int)
        auc, ap = sklearn.metrics.roc_auc_score(truth, prob[:, k]), sklearn.metrics.average_precision_score(truth, prob[:, k])
        expect(abs(charts["roc"]["auc"][n] - auc) <= 1e-12 and abs(charts["pr"]["auprc"][n] - ap) <= 1e-12,
               f"{n}: AUC {charts['roc']['auc'][n]} vs {auc}, AUPRC {charts['pr']['auprc'][n]} vs {ap}")
        fpr, tpr, _ = sklearn.metrics.roc_curve(truth, prob[:, k], drop_intermediate=False)
        pts = np.array([[float(v) for v in q.split(",")] for q in lines[k].get("points").split()])
        want = np.stack([120 + 740 * fpr, 640 - 560 * tpr], axis=1)
        expect(pts.shape == want.shape and np.abs(pts - want).max() <= 0.006, f"{n}: roc.svg curve")


def check_feeds_agree():
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "3", "--batch", "16"]
    runs = {}
    for feed in ("pinned", "host", "sync"):
        s = train_ok(*args, "-o", tmp(f"run_{feed}"), "--feed", feed, "--seed", "7")
        expect(s["feed"] == feed, f"--feed {feed}: ran {s['feed']}")
        runs[feed] = open(tmp(f"run_{feed}", "model.safetensors"), "rb").read()
    expect(runs["pinned"] == runs["host"] == runs["sync"], "pinned, host and sync feeds give different weights")
    expect(metrics(tmp("run_pinned")) == metrics(tmp("run_host")), "pinned and host metrics differ")
    s = train_ok(*args, "-o", tmp("run_seed8"), "--seed", "8")
    expect(open(tmp("run_seed8", "model.safetensors"), "rb").read() != runs["pinned"], "--seed changes nothing")


def check_resume():
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "4", "--batch", "16", "--log-every", "3"]
    train_ok(*args, "-o", tmp("run_full"))
    s = train_ok(*args, "-o", tmp("run_part"), "--max-steps", "17")  # inside epoch 2
    expect(s["status"] == "stopped" and s["steps"] == 17, f"stopped run: {s}")
    expect(not os.path.exists(tmp("run_part", "model.safetensors")), "a stopped run exported final weights")
    expect(json.load(open(tmp("run_part", "run.json")))["status"] == "stopped", "run.json of a stopped run")
    s = train_ok(*args, "-o", tmp("run_part"), "--resume")
    expect(s["resumed_from"] == 17 and s["status"] == "complete", f"resumed run: {s}")
    a = open(tmp("run_full", "model.safetensors"), "rb").read()
    expect(open(tmp("run_part", "model.safetensors"), "rb").read() == a, "resumed weights differ")
    expect(metrics(tmp("run_part")) == metrics(tmp("run_full")), "resumed metrics.jsonl differs")
    # Resuming a finished run changes nothing.
    train_ok(*args, "-o", tmp("run_part"), "--resume")
    expect(open(tmp("run_part", "model.safetensors"), "rb").read() == a, "a second resume changed the weights")
    # What may not change, and what is refused.
    code, _, err = train(*args, "-o", tmp("run_part"))
    expect(code == 1 and "--resume" in err, f"existing run without --resume: exit {code}: {err.strip()}")
    code, _, err = train(*args, "-o", tmp("run_part"), "--resume", "--seed", "3")
    expect(code == 1 and "--seed" in err, f"--resume with another seed: exit {code}: {err.strip()}")


def check_kill_and_resume():
    # Long enough that the kill lands mid-run: many small steps, a checkpoint every 5.
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "40", "--batch", "8",
            "--checkpoint-every", "5", "-q"]
    train_ok(*args, "-o", tmp("run_nokill"))
    p = subprocess.Popen([mltool, "train", *args, "-o", tmp("run_kill")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    last = tmp("run_kill", "checkpoints", "last.pt")
    deadline = time.time() + 120
    while not os.path.exists(last) and p.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    killed = p.poll() is None
    if killed:
        p.send_signal(signal.SIGKILL)
    p.wait()
    status = json.load(open(tmp("run_kill", "run.json")))["status"]
    expect(not killed or status == "running", f"run.json of a killed run says {status}")
    s = train_ok(*args, "-o", tmp("run_kill"), "--resume")
    expect(not killed or s["resumed_from"] > 0, f"killed run resumed from {s['resumed_from']}")
    expect(open(tmp("run_kill", "model.safetensors"), "rb").read() ==
           open(tmp("run_nokill", "model.safetensors"), "rb").read(), "killed and resumed run: other weights")
    expect(metrics(tmp("run_kill")) == metrics(tmp("run_nokill")), "killed and resumed run: other metrics")
    if not killed:
        print("note: kill_and_resume: the run finished before the kill", flush=True)


def check_sigterm():
    """SIGTERM at random points: each run ends the step in hand, saves last.pt, says
    "interrupted" in run.json and exits 75; --resume after each gives the uninterrupted
    run's weights and metrics byte for byte. Also through --nproc 2 (the signal to the parent
    reaches every rank; they stop after the same step)."""
    import random
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "40", "--batch", "8", "-q"]
    t0 = time.time()
    train_ok(*args, "-o", tmp("run_sig_ref"))
    whole = time.time() - t0
    for seed in (1, 2):
        out = tmp(f"run_sig_{seed}")
        stopped = run_with_sigterms([mltool, "train", *args, "-o", out], random.Random(seed), 0.6 * whole,
                                    resume_args=["--resume"])
        print(f"  stopped {stopped} time(s) by SIGTERM before finishing", flush=True)
        expect(open(tmp(out, "model.safetensors"), "rb").read() ==
               open(tmp("run_sig_ref", "model.safetensors"), "rb").read(),
               f"seed {seed}: stopped {stopped} times, resumed: other weights")
        expect(metrics(out) == metrics(tmp("run_sig_ref")),
               f"seed {seed}: stopped {stopped} times, resumed: other metrics")
    # A stopped run's run.json.
    p = subprocess.Popen([mltool, "train", *args, "-o", tmp("run_sig_status")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(whole / 2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate()
    if p.returncode == 75:
        run = json.load(open(tmp("run_sig_status", "run.json")))
        expect(run["status"] == "interrupted" and "SIGTERM" in run["result"]["error"],
               f"run.json of a SIGTERMed run: {run['status']}, {run.get('result')}")
        expect(os.path.exists(tmp("run_sig_status", "checkpoints", "last.pt")), "no last.pt")
    dp = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "20", "--batch", "8", "-q",
          "--device", "cpu", "--math-threads", "1"]
    t0 = time.time()
    train_ok(*dp, "--nproc", "2", "-o", tmp("run_sig_dp_ref"))
    whole = time.time() - t0
    out = tmp("run_sig_dp")
    stopped = run_with_sigterms([mltool, "train", *dp, "--nproc", "2", "-o", out], random.Random(3),
                                0.6 * whole, resume_args=["--resume"], rounds=3)
    print(f"  stopped {stopped} time(s) by SIGTERM before finishing", flush=True)
    expect(open(tmp(out, "model.safetensors"), "rb").read() ==
           open(tmp("run_sig_dp_ref", "model.safetensors"), "rb").read(),
           f"--nproc 2 stopped {stopped} times, resumed: other weights")


def mlp_forward(sd, x, spec):
    h = x
    for i in range(1, len(spec["hidden"]) + 1):
        p = f"hidden{i}."
        h = F.linear(h, sd[p + "linear.weight"], sd[p + "linear.bias"])
        if spec.get("batch_norm"):
            h = F.batch_norm(h, sd[p + "norm.running_mean"], sd[p + "norm.running_var"], sd[p + "norm.weight"],
                             sd[p + "norm.bias"], training=False, eps=1e-5)
        h = F.relu(h)
    return F.linear(h, sd["head.linear.weight"], sd["head.linear.bias"])


def abmil_forward(sd, bag):
    h = F.relu(F.linear(bag, sd["embed1.linear.weight"], sd["embed1.linear.bias"]))
    a = torch.tanh(F.linear(h, sd["attention.V.weight"], sd["attention.V.bias"]))
    a = a * torch.sigmoid(F.linear(h, sd["attention.U.weight"], sd["attention.U.bias"]))
    w = torch.softmax(F.linear(a, sd["attention.w.weight"], sd["attention.w.bias"]).squeeze(-1), 0)
    return F.linear((w.unsqueeze(-1) * h).sum(0), sd["head.linear.weight"], sd["head.linear.bias"])


def check_pytorch_loads():
    run_dir = tmp("run_mlp")
    if not os.path.exists(os.path.join(run_dir, "model.pt")):
        check_mlp_learns()
    sd = torch.load(os.path.join(run_dir, "model.pt"))  # weights_only=True, the default
    expect(isinstance(sd, dict), f"torch.load gives {type(sd)}")
    st, meta = read_safetensors(os.path.join(run_dir, "model.safetensors"))
    expect(set(st) == set(sd), f"safetensors {sorted(st)} vs state dict {sorted(sd)}")
    for k, v in sd.items():
        expect(np.array_equal(st[k], v.numpy()) and st[k].dtype == v.numpy().dtype, f"{k} differs")
    expect(json.loads(meta["mltool.labels"]) == ["normal", "stroma", "tumor"], f"metadata {meta}")
    spec = json.loads(meta["mltool.spec"])
    X = torch.from_numpy(np.load(tmp("feat", "features.npy")).astype(np.float32))
    preds = predictions(run_dir)
    rows = torch.tensor([int(p["sample"]) for p in preds])
    logits = mlp_forward(sd, X[rows], spec)
    want = torch.tensor([[float(p[f"logit_{n}"]) for n in ("normal", "stroma", "tumor")] for p in preds])
    expect(torch.allclose(logits, want, atol=1e-5, rtol=1e-5),
           f"PyTorch's forward differs from predictions.csv by {(logits - want).abs().max().item()}")
    names = ["normal", "stroma", "tumor"]
    expect(all(p["prediction"] == names[int(l.argmax())] for p, l in zip(preds, logits)), "predicted labels")


def check_abmil_learns():
    s = train_ok(tmp("bagds"), "--model", tmp("abmil.json"), "-o", tmp("run_bag"), "--epochs", "15",
                 "--batch", "4", "--lr", "0.01", "--monitor", "val_auc")
    expect(s["unit"] == "bag" and s["blocks"] == ["embed1", "attention", "head"], f"summary {s}")
    v = s["validation"]
    expect(v["val_accuracy"] >= 0.9 and v["val_auc"] >= 0.9, f"bag task not learned: {v}")
    sd = torch.load(tmp("run_bag", "model.pt"))
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")))
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    for p in predictions(tmp("run_bag")):
        bag = X[[i for i, k in enumerate(keys) if k.startswith(p["sample"] + "/")]]
        got = abmil_forward(sd, bag)
        want = torch.tensor([float(p["logit_neg"]), float(p["logit_pos"])])
        expect(torch.allclose(got, want, atol=1e-4), f"bag {p['sample']}: PyTorch {got.tolist()}, mltool {want.tolist()}")
    expect_bag_intervals(tmp("run_bag"))
    # Bags of different lengths padded into one batch: the feeds agree.
    args = [tmp("bagds"), "--model", tmp("abmil.json"), "--epochs", "3", "--batch", "5"]
    train_ok(*args, "-o", tmp("run_bag_p"), "--feed", "pinned")
    train_ok(*args, "-o", tmp("run_bag_h"), "--feed", "host")
    expect(open(tmp("run_bag_p", "model.safetensors"), "rb").read() ==
           open(tmp("run_bag_h", "model.safetensors"), "rb").read(), "bag feeds give different weights")
    # The same predictions and seed give the same intervals; --bootstrap 0 writes none.
    result = [json.load(open(tmp(r, "run.json")))["result"] for r in ("run_bag_p", "run_bag_h")]
    expect(result[0]["intervals"] == result[1]["intervals"], "the same predictions, other intervals")
    train_ok(tmp("bagds"), "--model", tmp("abmil.json"), "--epochs", "1", "-o", tmp("run_bag_0"),
             "--bootstrap", "0")
    expect("intervals" not in json.load(open(tmp("run_bag_0", "run.json")))["result"], "--bootstrap 0")


def expect_bag_intervals(run_dir):
    """Two labels: AUROC, AUPRC and balanced accuracy equal scikit-learn's on predictions.csv,
    and their 95% intervals a numpy bootstrap's over the same slides (one bag each) within
    0.02."""
    preds = predictions(run_dir)
    y = np.array([p["label"] == "pos" for p in preds], dtype=int)
    # The logits are float32 written exactly: read back as float32, as mltool computed.
    l0, l1 = (np.array([p[f"logit_{n}"] for p in preds], dtype=np.float32).astype(np.float64)
              for n in ("neg", "pos"))
    score = 1 / (1 + np.exp(l0 - l1))
    yhat = np.array([p["prediction"] == "pos" for p in preds], dtype=int)
    run = json.load(open(os.path.join(run_dir, "run.json")))["result"]
    iv, v = run["intervals"], run["validation"]
    expect(iv["unit"] == "slide" and iv["groups"] == len(preds) and iv["resamples"] == 1000, f"{iv}")
    slides = [p["sample"] for p in preds]
    m = sklearn.metrics
    for name, f in (("val_auc", lambda i: m.roc_auc_score(y[i], score[i])),
                    ("val_auprc", lambda i: m.average_precision_score(y[i], score[i])),
                    ("val_balanced_accuracy", lambda i: m.balanced_accuracy_score(y[i], yhat[i]))):
        whole = f(np.arange(len(y)))
        expect(abs(v[name] - whole) <= 1e-9, f"{name} {v[name]}, scikit-learn {whole}")
        expect_interval(expect, iv, name, group_bootstrap(slides, f), whole)
    expect_class_charts(run_dir, run["charts"], y, score, yhat)


SVG = "{http://www.w3.org/2000/svg}"


def svg_group(path, name):
    """The <g class=NAME> of the SVG at path, parsed by ElementTree."""
    root = ET.parse(path).getroot()
    expect("DejaVu Sans" in root.get("font-family", ""), f"{path}: font {root.get('font-family')}")
    found = [g for g in root.iter(SVG + "g") if g.get("class") == name]
    expect(len(found) == 1, f"{path}: {len(found)} groups {name}")
    return found[0]


def polyline(group):
    (line,) = group.iter(SVG + "polyline")
    return np.array([[float(v) for v in p.split(",")] for p in line.get("points").split()])


def expect_class_charts(run_dir, charts, y, score, yhat):
    """roc, pr, calibration and confusion: the PNGs libvips rendered and their SVGs; the ROC
    polyline is scikit-learn's roc_curve (every threshold) on the plot's axes (x 120 + 740 fpr,
    y 640 − 560 tpr), the calibration bins sklearn's calibration_curve, the matrix sklearn's
    confusion_matrix; the bands enclose most of the curve."""
    m = sklearn.metrics
    for name in ("roc", "pr", "calibration", "confusion"):
        expect(charts[name]["file"] == name + ".png" and charts[name]["svg"] == name + ".svg", f"{charts[name]}")
        with open(os.path.join(run_dir, name + ".png"), "rb") as f:
            head = f.read(24)
        expect(head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (900, 800),
               f"{name}.png header {head!r}")
    fpr, tpr, _ = m.roc_curve(y, score, drop_intermediate=False)
    pts = polyline(svg_group(os.path.join(run_dir, "roc.svg"), "curve"))
    want = np.stack([120 + 740 * fpr, 640 - 560 * tpr], axis=1)
    expect(pts.shape == want.shape and np.abs(pts - want).max() <= 0.006,
           f"roc.svg curve {pts.shape}, scikit-learn's {want.shape}")
    expect(abs(charts["roc"]["auc"] - m.roc_auc_score(y, score)) <= 1e-12, f"roc auc {charts['roc']}")
    band = svg_group(os.path.join(run_dir, "roc.svg"), "band")
    expect(len(list(band.iter(SVG + "polygon"))) == 1, "roc.svg has no band")
    expect(charts["confusion"]["matrix"] == m.confusion_matrix(y, yhat).tolist(),
           f"confusion {charts['confusion']['matrix']} vs {m.confusion_matrix(y, yhat).tolist()}")
    from sklearn.calibration import calibration_curve
    true, pred = calibration_curve(y, score, n_bins=10)
    bins = [b for b in charts["calibration"]["bins"] if b["samples"] > 0]
    expect(len(bins) == len(true) and
           np.allclose([b["fraction_positive"] for b in bins], true, atol=1e-12) and
           np.allclose([b["mean_predicted"] for b in bins], pred, atol=1e-12),
           f"calibration bins {bins} vs scikit-learn {true} {pred}")


def check_report_page():
    """run_bag/report.html: no script, nothing from the network; the task, dataset and options;
    each metric with its interval as run.json has it; the four charts inline; links to the
    predictions. Headless Chromium renders it (where installed) with the charts drawn."""
    run_dir = tmp("run_bag")
    if not os.path.exists(os.path.join(run_dir, "run.json")):
        check_abmil_learns()
    run = json.load(open(os.path.join(run_dir, "run.json")))
    path = os.path.join(run_dir, "report.html")
    page = report_page.parse(path)
    expect(page.scripts == 0 and not page.external, f"scripts {page.scripts}, external {page.external}")
    expect(page.svgs == len(run["result"]["charts"]) == 4, f"{page.svgs} inline SVGs")
    for want in ("classification", "neg, pos", run["dataset"]["path"], "Validation metrics",
                 f"{run['result']['intervals']['resamples']} bootstrap resamples"):
        expect(want in page.all_text, f"report.html lacks {want!r}")
    rows = {r[0]: r for r in page.rows if r}
    for name, m in run["result"]["intervals"]["metrics"].items():
        want = f"{m['low']:.3f} – {m['high']:.3f}"
        expect(name in rows and rows[name][2] == want, f"{name}: row {rows.get(name)}, run.json {want}")
    expect(rows["seed"][1] == str(run["options"]["seed"]), f"options row {rows.get('seed')}")
    expect("predictions.csv" in page.links and "roc.svg" in page.links, f"links {page.links}")
    rendered = report_page.render(path, expect)
    if rendered:
        image, dom = rendered
        expect(report_page.blue_pixels(image) > 2000, "the screenshot shows no chart")
        auc = run["result"]["intervals"]["metrics"]["val_auc"]
        expect("val_auprc" in dom and f"{auc['low']:.3f} – {auc['high']:.3f}" in dom and dom.count("<svg") == 4,
               "Chromium's DOM lacks the metrics or the charts")


def check_classification_cv():
    """--folds all on the bags: cv.json's out-of-fold AUROC and AUPRC equal scikit-learn's on
    oof_predictions.csv and their intervals a numpy bootstrap's over the same 40 slides within
    0.02; the four charts of the out-of-fold predictions; CV/report.html with a row per fold
    and the charts inline."""
    pack(tmp("bagfeat"), tmp("bags.csv"), tmp("bagcv"), "--unit", "bag", "--folds", "3")
    out = tmp("cv_bag")
    train_ok(tmp("bagcv"), "--model", tmp("abmil.json"), "--folds", "all", "-o", out, "--epochs", "6",
             "--batch", "4", "--lr", "0.01")
    cv = json.load(open(os.path.join(out, "cv.json")))
    oof = list(csv.DictReader(open(os.path.join(out, "oof_predictions.csv"))))
    y = np.array([r["label"] == "pos" for r in oof], dtype=int)
    l0, l1 = (np.array([r[f"logit_{n}"] for r in oof], dtype=np.float32).astype(np.float64)
              for n in ("neg", "pos"))
    score = 1 / (1 + np.exp(l0 - l1))
    iv = cv["intervals"]
    expect(iv["unit"] == "slide" and iv["groups"] == 40 == len(oof), f"cv.json intervals {iv}")
    m = sklearn.metrics
    slides = [r["sample"] for r in oof]
    for name, f in (("val_auc", lambda i: m.roc_auc_score(y[i], score[i])),
                    ("val_auprc", lambda i: m.average_precision_score(y[i], score[i]))):
        expect_interval(expect, iv, name, group_bootstrap(slides, f), f(np.arange(len(y))))
    expect(sorted(cv["pictures"]) == ["calibration", "confusion", "pr", "roc"] and
           all(os.path.isfile(os.path.join(out, n + ".svg")) for n in cv["pictures"]), f"pictures {cv['pictures']}")
    page = report_page.parse(os.path.join(out, "report.html"))
    folds = [r for r in page.rows if r and r[0].startswith("fold-")]
    expect(page.svgs == 4 and len(folds) == 3 and not page.external and page.scripts == 0,
           f"CV report.html: {page.svgs} SVGs, fold rows {folds}")


def tinted_pixels(key, size):
    """A tile of slide T<i>: reddish for even i, bluish for odd, with noise (tile_store's
    tile_pixels): the label is the tint."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    red = int(key[1:key.index("/")]) % 2 == 0
    base = np.array([200, 90, 90] if red else [90, 90, 200], np.float32)
    return np.clip(base + rng.normal(0, 25, (size, size, 3)), 0, 255).astype(np.uint8)


def image_dataset(name="img"):
    """An image dataset, NAMEds (once): slides of reddish or bluish 16x16 tiles in NAMEtiles.lmdb,
    labelled by their tint, half of the slides to train and half to validate."""
    if os.path.exists(tmp(name + "ds")):
        return tmp(name + "ds")
    import tile_store
    plain, tile_store.tile_pixels = tile_store.tile_pixels, tinted_pixels
    try:
        slides = [{"id": f"T{i:02d}", "rows": 3, "cols": 4} for i in range(12)]
        keys = tile_store.write_store(tmp(name + "tiles.lmdb"), slides, 16, encoding="png")
    finally:
        tile_store.tile_pixels = plain
    write_feature_store(tmp(name + "feat"), np.zeros((len(keys), 2)), keys,
                        source={"tile_store": tmp(name + "tiles.lmdb")})
    write_labels(tmp(name + "s.csv"), [(f"T{i:02d}", "red" if i % 2 == 0 else "blue") for i in range(12)])
    pack(tmp(name + "feat"), tmp(name + "s.csv"), tmp(name + "ds"), "--unit", "image", "--split",
         "train=0.5,val=0.5")
    return tmp(name + "ds")


def check_image():
    image_dataset()
    write_json(tmp("cnn.json"), {"family": "rescnn", "channels": [8, 16]})
    args = [tmp("imgds"), "--model", tmp("cnn.json"), "--epochs", "4", "--batch", "8", "--lr", "0.01"]
    s = train_ok(*args, "-o", tmp("run_img_p"), "--feed", "pinned")
    expect(s["validation"]["val_accuracy"] >= 0.95, f"tints not learned: {s['validation']}")
    expect(s["blocks"] == ["stem", "stage1", "stage2", "pool", "head"], f"blocks {s['blocks']}")
    train_ok(*args, "-o", tmp("run_img_h"), "--feed", "host", "--tiles", tmp("imgtiles.lmdb"))
    expect(open(tmp("run_img_p", "model.safetensors"), "rb").read() ==
           open(tmp("run_img_h", "model.safetensors"), "rb").read(), "image feeds give different weights")


def expect_error(args, code, *parts):
    got, _, err = train(*args)
    expect(got == code, f"{' '.join(os.path.basename(a) for a in args)}: exit {got}, expected {code}: {err.strip()}")
    for p in parts:
        expect(p in err, f"message lacks {p!r}: {err.strip()}")
    return err


def check_bad_input():
    base = [tmp("ds"), "-o", tmp("run_bad")]
    write_json(tmp("bad_spec.json"), {"family": "mlp", "hidden": [32, 0]})
    expect_error([*base, "--model", tmp("bad_spec.json")], 2, "bad_spec.json: /hidden/1:")
    write_json(tmp("bad_field.json"), {"family": "mlp", "attention": 3})
    expect_error([*base, "--model", tmp("bad_field.json")], 2, "/attention: not a field of family mlp")
    write_json(tmp("dims.json"), {"family": "mlp", "input_dims": 64})
    expect_error([*base, "--model", tmp("dims.json")], 2, "/input_dims: 64", "32 dimensions")
    write_json(tmp("classes.json"), {"family": "mlp", "classes": 2})
    expect_error([*base, "--model", tmp("classes.json")], 2, "/classes: 2", "3 labels")
    expect_error([*base, "--model", tmp("abmil.json")], 2, "family abmil trains on bag records", "--unit tile")
    expect_error([*base, "--model", tmp("mlp.json"), "--val-split", "nope"], 2, "no split 'nope'", "train, val")
    expect_error([*base, "--model", tmp("mlp.json"), "--batch", "0"], 1, "--batch")
    expect_error([*base, "--model", tmp("mlp.json"), "--class-weights", "1,2"], 1, "2 weights for 3 labels")
    expect(not os.path.exists(tmp("run_bad")), "a run directory was created for bad input")
    # An empty split: three slides cannot fill three splits of these fractions.
    keys = [f"E{s}/{t:06d}_000000" for s in range(3) for t in range(4)]
    write_feature_store(tmp("efeat"), np.random.default_rng(0).standard_normal((12, 32)), keys)
    write_labels(tmp("e.csv"), [(k, "ab"[i % 2]) for i, k in enumerate(keys)])
    pack(tmp("efeat"), tmp("e.csv"), tmp("eds"), "--split", "train=0.9,val=0.05,test=0.05")
    empty = [n for n, s in json.load(open(tmp("eds", "dataset.json")))["splits"].items() if s["records"] == 0]
    expect(empty, "no split came out empty")
    expect_error([tmp("eds"), "-o", tmp("run_bad"), "--model", tmp("mlp.json"), "--val-split", empty[0]], 2,
                 f"split '{empty[0]}' is empty")
    # A dataset whose label map lost a label: the record that uses it is named.
    import shutil
    shutil.copytree(tmp("ds"), tmp("ds_labels"))
    m = json.load(open(tmp("ds_labels", "dataset.json")))
    m["labels"]["names"] = m["labels"]["names"][:2]
    write_json(tmp("ds_labels", "dataset.json"), m)
    expect_error([tmp("ds_labels"), "-o", tmp("run_bad"), "--model", tmp("mlp.json")], 2,
                 "train-00000-of-00001.tfrecord: record", "label 2 is not in the label map")
    # A feature store changed after packing.
    shutil.copytree(tmp("ds"), tmp("ds_moved"))
    shutil.copytree(tmp("feat"), tmp("feat_changed"))
    write_feature_store(tmp("feat_changed"), np.zeros((299, 32)), [f"k{i}" for i in range(299)], "float16")
    m = json.load(open(tmp("ds_moved", "dataset.json")))
    m["features"]["path"] = tmp("feat_changed")
    write_json(tmp("ds_moved", "dataset.json"), m)
    expect_error([tmp("ds_moved"), "-o", tmp("run_bad"), "--model", tmp("mlp.json")], 2,
                 "feat_changed/features.npy: is 299 x 32", "changed since it was packed")
    expect(not os.path.exists(tmp("run_bad")), "a run directory was created for bad input")


def check_nan_loss():
    # An absurd learning rate: the run stops at the first non-finite loss, exit 3.
    expect_error([tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("run_nan1"), "--lr", "1e30"], 3,
                 "the loss is", "no checkpoint was written before it")
    manifest = json.load(open(tmp("run_nan1", "run.json")))
    expect(manifest["status"] == "failed" and "the loss is" in manifest["result"]["error"], f"run.json {manifest}")
    lines = metrics(tmp("run_nan1"))
    expect(lines[-1]["event"] == "error", f"last metrics line {lines[-1]}")
    # A run stopped at step 20 (epoch 2 of 13 steps each), resumed with that learning rate:
    # it fails after the checkpoint, which stays as it was, so resuming once more with the
    # original rate ends exactly as the run that was never disturbed.
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "3", "--batch", "16"]
    train_ok(*args, "-o", tmp("run_calm"))
    train_ok(*args, "-o", tmp("run_nan2"), "--max-steps", "20")
    last = tmp("run_nan2", "checkpoints", "last.pt")
    before = open(last, "rb").read()
    expect_error([*args, "-o", tmp("run_nan2"), "--resume", "--lr", "1e30"], 3, "the loss is",
                 "the last good checkpoint, checkpoints/last.pt, is kept")
    expect(open(last, "rb").read() == before, "the last good checkpoint was replaced")
    s = train_ok(*args, "-o", tmp("run_nan2"), "--resume", "--lr", "0.001")
    expect(s["resumed_from"] == 20, f"resumed from {s['resumed_from']}")
    expect(open(tmp("run_nan2", "model.safetensors"), "rb").read() ==
           open(tmp("run_calm", "model.safetensors"), "rb").read(), "after the NaN and a resume: other weights")
    expect(metrics(tmp("run_nan2")) == metrics(tmp("run_calm")), "after the NaN and a resume: other metrics")
    # An infinite feature: the message says where to look.
    X = np.load(tmp("feat", "features.npy")).astype(np.float32)
    X[:, 0] = np.inf
    keys = open(tmp("feat", "keys.txt")).read().split()
    write_feature_store(tmp("inffeat"), X, keys)
    pack(tmp("inffeat"), tmp("tiles.csv"), tmp("infds"), "--split", "train=0.7,val=0.3")
    expect_error([tmp("infds"), "--model", tmp("mlp.json"), "-o", tmp("run_inf")], 3,
                 "step 1: the loss is NaN", "inf/NaN features", "no checkpoint was written")


def tensors_close(a, b, rtol):
    """Each tensor of safetensors files a and b within rtol of its largest magnitude."""
    ta, _ = read_safetensors(a)
    tb, _ = read_safetensors(b)
    expect(set(ta) == set(tb), f"tensors {sorted(ta)} vs {sorted(tb)}")
    worst = max(float(np.abs(ta[k].astype(np.float64) - tb[k]).max() / max(np.abs(tb[k]).max(), 1e-30))
                for k in ta if ta[k].dtype.kind == "f")
    expect(worst <= rtol, f"{a} vs {b}: max relative difference {worst}")


def check_micro_batches():
    # Without batch norm and dropout, 3 micro-batches (16 = 6 + 5 + 5) step as one batch.
    write_json(tmp("mlp_plain.json"), {"family": "mlp", "hidden": [32]})
    args = [tmp("ds"), "--model", tmp("mlp_plain.json"), "--epochs", "2", "--batch", "16"]
    train_ok(*args, "-o", tmp("run_mb1"))
    s = train_ok(*args, "-o", tmp("run_mb3"), "--micro-batches", "3")
    m = s["memory"]
    expect(m["mode"] == "micro_batches" and m["micro_batches"] == 3 and m["sections"] == [["hidden1", "head"]],
           f"memory {m}")
    expect(json.load(open(tmp("run_mb3", "run.json")))["options"]["micro_batches"] == 3, "run.json options")
    tensors_close(tmp("run_mb3", "model.safetensors"), tmp("run_mb1", "model.safetensors"), 1e-5)
    # With batch norm and dropout they differ, and resume is still exact.
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "2", "--batch", "16", "--micro-batches", "3"]
    train_ok(*args, "-o", tmp("run_mbn"))
    train_ok(*args, "-o", tmp("run_mbn_part"), "--max-steps", "7")
    s = train_ok(*args, "-o", tmp("run_mbn_part"), "--resume")
    expect(s["resumed_from"] == 7, f"resumed from {s['resumed_from']}")
    a = open(tmp("run_mbn", "model.safetensors"), "rb").read()
    expect(open(tmp("run_mbn_part", "model.safetensors"), "rb").read() == a, "micro-batches: resumed weights differ")
    expect(metrics(tmp("run_mbn_part")) == metrics(tmp("run_mbn")), "micro-batches: resumed metrics differ")
    # Bags in parts, each padded to its own longest bag, learn the same. SGD: the attention
    # score's bias has a gradient of zero but for rounding, which AdamW would scale up to lr.
    args = [tmp("bagds"), "--model", tmp("abmil.json"), "--epochs", "2", "--batch", "5", "--optimizer", "sgd",
            "--lr", "0.05"]
    train_ok(*args, "-o", tmp("run_bag_mb1"))
    train_ok(*args, "-o", tmp("run_bag_mb2"), "--micro-batches", "2")
    tensors_close(tmp("run_bag_mb2", "model.safetensors"), tmp("run_bag_mb1", "model.safetensors"), 1e-5)
    expect_error([*args, "-o", tmp("run_bad_mb"), "--micro-batches", "0"], 1, "--micro-batches")
    expect_error([*args, "-o", tmp("run_bad_mb"), "--micro-batches", "6"], 1, "--micro-batches")


def check_sections():
    # Sections recomputed in the backward pass, dropout and batch norm included, step as plain
    # training does; resume is exact.
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "2", "--batch", "16"]
    train_ok(*args, "-o", tmp("run_sec1"))
    s = train_ok(*args, "-o", tmp("run_sec2"), "--sections", "2")
    m = s["memory"]
    expect(m["mode"] == "sections" and m["sections"] == [["hidden1"], ["head"]], f"memory {m}")
    # On the CPU the peak is mltool's counting allocator's (docs/train.md#memory-modes).
    expect(m["activation_bytes"] > 0 and m["device_peak_bytes"] > m["activation_bytes"], f"memory {m}")
    expect(json.load(open(tmp("run_sec2", "run.json")))["options"]["sections"] == 2, "run.json options")
    tensors_close(tmp("run_sec2", "model.safetensors"), tmp("run_sec1", "model.safetensors"), 1e-5)
    train_ok(*args, "-o", tmp("run_sec2_part"), "--sections", "2", "--max-steps", "5")
    s = train_ok(*args, "-o", tmp("run_sec2_part"), "--sections", "2", "--resume")
    expect(s["resumed_from"] == 5, f"resumed from {s['resumed_from']}")
    expect(open(tmp("run_sec2_part", "model.safetensors"), "rb").read() ==
           open(tmp("run_sec2", "model.safetensors"), "rb").read(), "sections: resumed weights differ")
    expect_error([*args, "-o", tmp("run_bad_sec"), "--sections", "3"], 1, "--sections 3", "2 blocks")
    expect_error([*args, "-o", tmp("run_bad_sec"), "--sections", "2", "--micro-batches", "2"], 1,
                 "exclude each other")
    expect(not os.path.exists(tmp("run_bad_sec")), "a run directory was created for bad --sections")
    # Explicit boundaries in the spec: the same cut as --sections 2, the same weights.
    spec = json.load(open(tmp("mlp.json")))
    write_json(tmp("mlp_sec.json"), {**spec, "sections": ["head"]})
    named = [tmp("ds"), "--model", tmp("mlp_sec.json"), "--epochs", "2", "--batch", "16"]
    s = train_ok(*named, "-o", tmp("run_sec_named"))
    expect(s["memory"]["mode"] == "sections" and s["memory"]["sections"] == [["hidden1"], ["head"]],
           f"spec sections: memory {s['memory']}")
    tensors_close(tmp("run_sec_named", "model.safetensors"), tmp("run_sec2", "model.safetensors"), 0)
    # --offload-boundaries has no effect on the CPU (the GPU test covers CUDA).
    train_ok(*args, "-o", tmp("run_sec_off"), "--sections", "2", "--offload-boundaries")
    expect(open(tmp("run_sec_off", "model.safetensors"), "rb").read() ==
           open(tmp("run_sec2", "model.safetensors"), "rb").read(), "--offload-boundaries changed the CPU run")
    expect_error([*args, "-o", tmp("run_bad_sec"), "--offload-boundaries"], 1, "--offload-boundaries needs")
    expect_error([*named, "-o", tmp("run_bad_sec"), "--sections", "2"], 1, "exclude each other")
    for bad, why in ((["pool"], "/sections/0: 'pool' is not a block"), (["hidden1"], "first block"),
                     (["head", "hidden1"], None)):
        write_json(tmp("mlp_bad_sec.json"), {**spec, "sections": bad})
        code, _, err = train(tmp("ds"), "--model", tmp("mlp_bad_sec.json"), "-o", tmp("run_bad_sec"))
        expect(code == 2 and "mlp_bad_sec.json: /sections/" in err and (why is None or why in err),
               f"spec sections {bad}: exit {code}: {err.strip()}")
    expect(not os.path.exists(tmp("run_bad_sec")), "a run directory was created for bad sections")


def train_env(env, *args):
    """mltool train ARGS --json -q with `env` added; (code, summary or None, stderr)."""
    return run_json([mltool, "train", *args, "--json", "-q"], env=env)


def check_reproducible():
    """The same command gives the same bits run to run on every math code path, a run stopped
    and resumed included; the math threads are recorded, and a resume where OMP_NUM_THREADS
    says another count uses the run's."""
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "3", "--batch", "16",
            "--seed", "9"]
    weights = lambda d: open(os.path.join(d, "model.safetensors"), "rb").read()
    problems = []
    for name, env in MATH_PATHS:
        runs = []
        for i in range(2):
            out = tmp(f"run_rep_{name}_{i}")
            code, s, err = train_env(env, *args, "-o", out)
            expect(code == 0, f"{name}: exit {code}: {err.strip()}")
            runs.append(out)
        code, s, err = train_env(env, *args, "-o", tmp(f"run_rep_{name}_part"), "--max-steps", "11")
        expect(code == 0 and s["status"] == "stopped", f"{name}, stopped run: exit {code}: {err.strip()}")
        code, s, err = train_env(env, *args, "-o", tmp(f"run_rep_{name}_part"), "--resume")
        expect(code == 0 and s["resumed_from"] == 11, f"{name}, resumed run: exit {code}: {err.strip()}")
        runs.append(tmp(f"run_rep_{name}_part"))
        if len({weights(d) for d in runs}) != 1 or any(metrics(d) != metrics(runs[0]) for d in runs):
            problems.append(f"{name}: two runs and a resumed one do not give the same weights and "
                            f"metrics")
    # MKL runs in its reproducible mode (AUTO, branch 2) unless the environment says otherwise.
    probe = tmp("mkl_cbwr_probe.so")
    code, _, err = run(["cc", "-shared", "-fPIC", "-o", probe, os.path.join(HERE, "mkl_cbwr_probe.c"), "-ldl"])
    expect(code == 0, f"building the MKL probe: {err}")
    for env, want in (({}, "2"), ({"MKL_CBWR": "COMPATIBLE"}, "3")):
        code, _, err = train_env({**env, "LD_PRELOAD": probe}, tmp("ds"), "--model", tmp("mlp.json"),
                                 "--epochs", "1", "-o", tmp("run_rep_probe"), "--overwrite")
        expect(code == 0 and f"cbwr branch {want}" in err,
               f"train with {env or 'the default environment'}: MKL's CNR branch is {want} ({code}): "
               f"{err.strip()[-500:]}")
    threads = json.load(open(os.path.join(tmp("run_rep_default_0"), "run.json")))["runtime"]
    expect(threads.get("math_threads", 0) >= 1, f"run.json records the math threads: {threads}")
    for first, second in (("1", "2"), ("2", "1")):
        ref, part = tmp(f"run_thr_ref{first}"), tmp(f"run_thr{first}")
        train_env({"OMP_NUM_THREADS": first}, *args, "-o", ref)
        train_env({"OMP_NUM_THREADS": first}, *args, "-o", part, "--max-steps", "11")
        code, s, err = train_env({"OMP_NUM_THREADS": second}, *args, "-o", part, "--resume")
        expect(code == 0, f"resume under OMP_NUM_THREADS={second}: exit {code}: {err.strip()}")
        if weights(part) != weights(ref):
            problems.append(f"run with {first} math threads, resumed where OMP_NUM_THREADS={second}: "
                            f"weights differ from the uninterrupted run's")
    expect(not problems, "; ".join(problems))


def check_one_writer():
    """Two trains into one run directory: the second exits 3 at once naming it and the first's
    pid and host, and leaves the first's run to finish with a single run's weights."""
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "2", "--batch", "16", "--seed", "4"]
    train_ok(*args, "-o", tmp("run_w_ref"))
    out = tmp("run_w")
    cmd = [mltool, "train", *args, "-o", out, "-q"]
    code, err = second_writer_refused(cmd, cmd, out)
    expect(code == 0, f"the first train exits 0 ({code}): {err}")
    expect(open(os.path.join(out, "model.safetensors"), "rb").read() ==
           open(tmp("run_w_ref", "model.safetensors"), "rb").read(),
           "the first run's weights differ from a single run's")
    expect(metrics(out) == metrics(tmp("run_w_ref")), "the first run's metrics differ from a single run's")


# ---------------------------------------------------------------- TorchScript models

class ScriptMLP(torch.nn.Module):
    """dims → hidden → classes, ReLU: the TorchScript model the checks train."""

    def __init__(self, dims=32, hidden=32, classes=3):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(dims, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, classes))

    def forward(self, x):
        return self.body(x)


def script_file(name, module):
    torch.jit.script(module).save(tmp(name))
    return tmp(name)


def mix64(x):
    """lib/train/loop.cpp's SplitMix64 finaliser."""
    m = (1 << 64) - 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def epoch_order(seed, epoch, n):
    """The training order of an epoch, as lib/train/loop.cpp's epoch_order draws it."""
    m = (1 << 64) - 1
    g = torch.Generator().manual_seed(mix64((seed * 0x9E3779B97F4A7C15 + epoch + 0x632BE59BD9B4E019) & m))
    return torch.randperm(n, generator=g)


def check_script_matches_python():
    """A TorchScript MLP trained by mltool (CPU, f32) ends within 1e-5 of the same module
    trained by a plain PyTorch loop over the same batches in the same order; the exported
    TorchScript file and state dict load in Python and reproduce the tool's logits."""
    torch.manual_seed(3)
    ref = ScriptMLP()
    path = script_file("mlp_script.pt", ref)
    epochs, batch, lr, seed = 3, 32, 0.01, 7
    out = tmp("run_script")
    # --val-split train: predictions.csv then lists the training split in its order.
    s = train_ok(tmp("ds"), "--model", path, "-o", out, "--epochs", str(epochs), "--batch", str(batch),
                 "--lr", str(lr), "--schedule", "constant", "--seed", str(seed), "--val-split", "train",
                 "--device", "cpu", "--math-threads", "1")
    expect(s["status"] == "complete" and s["blocks"] == ["body"], f"summary {s}")  # its one child
    manifest = json.load(open(os.path.join(out, "run.json")))
    expect(manifest["spec"]["family"] == "torchscript" and len(manifest["spec"]["sha256"]) == 64,
           f"run.json spec {manifest['spec']}")
    labels = manifest["dataset"]["labels"]
    preds = predictions(out)
    rows = [int(p["sample"]) for p in preds]
    feats = torch.from_numpy(np.load(tmp("feat", "features.npy")).astype(np.float32))
    x = feats[rows]
    y = torch.tensor([labels.index(p["label"]) for p in preds])

    torch.set_num_threads(1)
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    plain = [p for p in ref.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}],
                            lr=lr, foreach=False)
    n = len(rows)
    for epoch in range(epochs):
        order = epoch_order(seed, epoch, n)
        for b in range(0, n, batch):
            idx = order[b:b + batch]
            opt.zero_grad()
            F.cross_entropy(ref(x[idx]), y[idx]).backward()
            opt.step()
    want = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    got, meta = read_safetensors(os.path.join(out, "model.safetensors"))
    expect(set(got) == set(want), f"exported names {sorted(got)}, expected {sorted(want)}")
    for k in want:
        d = float(np.abs(got[k] - want[k]).max())
        expect(d <= 1e-5, f"{k}: differs from the PyTorch loop's by {d}")
    sd = torch.load(os.path.join(out, "model.pt"), weights_only=True)
    expect(all(torch.equal(sd[k], torch.from_numpy(got[k].copy())) for k in got), "model.pt differs from model.safetensors")
    module = torch.jit.load(os.path.join(out, "model.script.pt"))
    with torch.no_grad():
        logits = module(x).numpy()
    tool = np.array([[float(p["logit_" + l]) for l in labels] for p in preds], dtype=np.float32)
    d = float(np.abs(logits - tool).max())
    expect(d <= 1e-5, f"model.script.pt's logits differ from predictions.csv's by {d}")


def check_script_learns():
    """A TorchScript MLP reaches the built-in MLP's accuracy (check_mlp_learns: >= 0.95)."""
    torch.manual_seed(4)
    path = script_file("mlp_script_learn.pt", ScriptMLP())
    s = train_ok(tmp("ds"), "--model", path, "-o", tmp("run_script_learn"), "--epochs", "8",
                 "--batch", "32", "--lr", "0.01", "--warmup", "3")
    epochs = [l for l in metrics(tmp("run_script_learn")) if l["event"] == "epoch"]
    expect(s["status"] == "complete" and epochs[-1]["val_accuracy"] >= 0.95,
           f"final val accuracy {epochs[-1]['val_accuracy']}")


class TupleOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 3)

    def forward(self, x):
        return self.fc(x), x


class ScriptMIL(torch.nn.Module):
    """Attention MIL over one bag (L x dims) → 1 x classes. The score has no last bias: softmax
    ignores it, so its gradient is rounding noise that Adam would amplify."""

    def __init__(self, dims=16, hidden=16, attention=8, classes=2):
        super().__init__()
        self.embed = torch.nn.Linear(dims, hidden)
        self.score = torch.nn.Sequential(torch.nn.Linear(hidden, attention), torch.nn.Tanh(),
                                         torch.nn.Linear(attention, 1, bias=False))
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, bag):
        h = torch.relu(self.embed(bag))
        a = torch.softmax(self.score(h), dim=0)
        return self.head((a * h).sum(0, keepdim=True))


def train_bags_both(name, model_seed, optimizer, epochs=15, batch=4, lr=0.01, seed=2):
    """ScriptMIL (drawn after torch.manual_seed(model_seed)) trained on the bags, on the CPU in
    f32, by mltool and by a plain PyTorch loop over the same bags in the same order, with
    `optimizer` (sgd: momentum 0.9; adamw) and weight decay 0.01 on dimension >= 2 in both.
    Returns mltool's summary and run directory, the training bags in training order
    (--val-split train lists them so in predictions.csv), their label ids, the labels, and per
    tensor the largest difference between mltool's weights and the loop's."""
    torch.manual_seed(model_seed)
    ref = ScriptMIL()
    path = script_file(name + ".pt", ref)
    out = tmp("run_" + name)
    s = train_ok(tmp("bagds"), "--model", path, "-o", out, "--epochs", str(epochs), "--batch", str(batch),
                 "--lr", str(lr), "--schedule", "constant", "--optimizer", optimizer,
                 *(["--momentum", "0.9"] if optimizer == "sgd" else []), "--seed", str(seed),
                 "--val-split", "train", "--device", "cpu", "--math-threads", "1")
    expect(s["status"] == "complete" and s["unit"] == "bag", f"summary {s}")
    labels = json.load(open(os.path.join(out, "run.json")))["dataset"]["labels"]
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")).astype(np.float32))
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    preds = predictions(out)
    bags = [X[[i for i, k in enumerate(keys) if k.startswith(p["sample"] + "/")]] for p in preds]
    y = torch.tensor([labels.index(p["label"]) for p in preds])
    torch.set_num_threads(1)
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    plain = [p for p in ref.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}]
    opt = (torch.optim.SGD(groups, lr=lr, momentum=0.9, foreach=False) if optimizer == "sgd"
           else torch.optim.AdamW(groups, lr=lr, foreach=False))
    n = len(bags)
    for epoch in range(epochs):
        order = epoch_order(seed, epoch, n)
        for b in range(0, n, batch):
            idx = order[b:b + batch].tolist()
            opt.zero_grad()
            F.cross_entropy(torch.cat([ref(bags[i]) for i in idx]), y[idx]).backward()
            opt.step()
    got, _ = read_safetensors(os.path.join(out, "model.safetensors"))
    diffs = {k: float(np.abs(got[k] - v.detach().numpy()).max()) for k, v in ref.state_dict().items()}
    return s, out, bags, y, labels, diffs


def expect_weights_match(diffs, what):
    for k, d in diffs.items():
        expect(d <= 1e-5, f"{what}: {k}: differs from the PyTorch loop's by {d}")


def check_script_bag_matches_python():
    """A TorchScript attention-MIL model on bags: forward(bag) per bag, trained by mltool with
    SGD, is within 1e-5 of a PyTorch loop over the same bags in the same order, and learns the
    task (accuracy on its training split: --val-split train lists the bags in training order).
    This draw of the weights (seed 8) is the SGD case because AdamW cannot be compared on it:
    on the first batch (training bags 2, 13, 3, 6) embed.weight[0, 12]'s gradient is 3.3e-9 (f64),
    four bag terms of +-2.6e-3 to 3.0e-3 that cancel by chance, 2.5e7 times smaller than the
    tensor's largest (8.1e-2; the next smallest of any parameter is 2.1e-5). That is below the
    float32 rounding of the sum (the PyTorch loop gets 2.56e-9, mltool's TorchScript 2.10e-9,
    every other gradient agreeing within 1e-8), and AdamW's first step, lr * g / (|g| + 1e-8),
    turns it into 2.04e-3 vs 1.73e-3: the weights end step 1 3.1e-4 apart on that element
    (float32 vs float64 in PyTorch alone: 4.2e-4). At step 16 an instance of bag 13 whose
    hidden unit 8 sits 2e-6 from ReLU's kink falls on either side, and the runs drift apart
    (1e-2 after 48 steps and after 15 epochs). Given the same weights, mltool's gradients equal
    PyTorch's within 2e-8 there too; on seeds 1 to 7 AdamW ends within 6e-7 (see the next check)."""
    s, out, bags, _, labels, diffs = train_bags_both("mil_script_sgd", 8, "sgd")
    expect_weights_match(diffs, "sgd")
    preds = predictions(out)
    module = torch.jit.load(os.path.join(out, "model.script.pt"))
    with torch.no_grad():
        logits = torch.cat([module(b) for b in bags]).numpy()
    tool = np.array([[float(p["logit_" + l]) for l in labels] for p in preds], dtype=np.float32)
    expect(float(np.abs(logits - tool).max()) <= 1e-5, "model.script.pt's bag logits differ from predictions.csv's")
    v = s["validation"]
    expect(v["val_accuracy"] >= 0.9, f"bag task not learned: {v}")


def check_script_bag_adamw_matches_python():
    """As check_script_bag_matches_python, with AdamW (the default) on another draw of the
    weights (seed 1), whose first gradients are all at least 100 times AdamW's eps (1e-8):
    checked here first, since a gradient the size of float32 rounding on the first step makes
    any two float32 implementations differ (see check_script_bag_matches_python)."""
    torch.manual_seed(1)
    first = ScriptMIL().double()  # the same draw as train_bags_both's
    s, _, bags, y, _, diffs = train_bags_both("mil_script_adamw", 1, "adamw")
    # The first step's gradients in float64, on the first batch as mltool and the loop draw it
    # (train_bags_both's defaults: --seed 2, --batch 4).
    idx = epoch_order(2, 0, len(bags))[:4].tolist()
    F.cross_entropy(torch.cat([first(bags[i].double()) for i in idx]), y[idx]).backward()
    smallest = min(float(p.grad.abs().min()) for p in first.parameters())
    expect(smallest >= 1e-6, f"a first-step gradient of {smallest:g}: too near AdamW's eps to compare")
    expect_weights_match(diffs, "adamw")
    expect(s["validation"]["val_accuracy"] >= 0.9, f"bag task not learned: {s['validation']}")


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 32)
        self.b = torch.nn.Linear(32, 3)

    def forward(self, x):
        return self.b(x + self.a(x))


def check_script_sections():
    """--sections K on a module whose forward runs its top-level children in sequence: cut at
    the children, the weights of plain training, exports under the module's names; and
    --micro-batches, the weights of plain training too."""
    torch.manual_seed(9)
    seq = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                              torch.nn.ReLU(), torch.nn.Linear(32, 3))
    path = script_file("seq.pt", seq)
    args = [tmp("ds"), "--model", path, "--epochs", "2", "--batch", "16"]
    s1 = train_ok(*args, "-o", tmp("run_script_sec1"))
    expect(s1["blocks"] == ["0", "1", "2", "3", "4"], f"blocks {s1['blocks']}")
    s = train_ok(*args, "-o", tmp("run_script_sec2"), "--sections", "2")
    m = s["memory"]
    expect(m["mode"] == "sections" and len(m["sections"]) == 2 and sum(m["sections"], []) == s1["blocks"],
           f"memory {m}")
    tensors_close(tmp("run_script_sec2", "model.safetensors"), tmp("run_script_sec1", "model.safetensors"), 1e-5)
    train_ok(*args, "-o", tmp("run_script_mb"), "--micro-batches", "3")
    tensors_close(tmp("run_script_mb", "model.safetensors"), tmp("run_script_sec1", "model.safetensors"), 1e-5)
    got, _ = read_safetensors(tmp("run_script_sec2", "model.safetensors"))
    expect(set(got) == set(seq.state_dict()), f"exported names {sorted(got)}")
    module = torch.jit.load(tmp("run_script_sec2", "model.script.pt"))
    module.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in got.items()})


class MeanPool(torch.nn.Module):
    """A bag model returning `classes` logits (1-d): the mean instance, classified."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 3)

    def forward(self, bag):
        return self.fc(bag.mean(0))


class OneLogit(torch.nn.Module):
    """A tile model returning one logit per tile (N, not N x classes)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.fc(x).squeeze(1)


def check_script_bad_input():
    base = ["-o", tmp("run_bad_script")]
    torch.manual_seed(0)
    two = script_file("two_classes.pt", ScriptMLP(classes=2))
    expect_error([tmp("ds"), *base, "--model", two], 2, "two_classes.pt: forward returned a tensor of 2 x 2",
                 "expected 2 x 3")
    tup = script_file("tuple_out.pt", TupleOut())
    expect_error([tmp("ds"), *base, "--model", tup], 2, "tuple_out.pt: forward returned Tuple")
    wide = script_file("wide.pt", ScriptMLP(dims=64))
    expect_error([tmp("ds"), *base, "--model", wide], 2, "wide.pt: forward failed on a batch of 2 x 32")
    mlp = script_file("mlp_bad.pt", ScriptMLP())
    # A model of the other unit, told by a second forward on one row more, is refused as such.
    expect_error([tmp("bagds"), *base, "--model", script_file("mlp16.pt", ScriptMLP(dims=16, classes=2))], 2,
                 "mlp16.pt: forward returned a tensor of 3 x 2 for a bag of 3 x 16 features (float32) and "
                 "a tensor of 4 x 2 for 4 instances: one row of logits per instance, as a tile model returns",
                 f"but {tmp('bagds', 'dataset.json')} was packed with --unit bag: pack with --unit tile, or give "
                 "a bag model (forward(L x D) -> classes or 1 x classes)")
    bag = script_file("bag_model.pt", ScriptMIL(dims=32, classes=3))
    expect_error([tmp("ds"), *base, "--model", bag], 2,
                 "bag_model.pt: forward returned a tensor of 1 x 3 for a batch of 2 x 32 features (float32) and "
                 "a tensor of 1 x 3 for 3 rows: it pools the rows into one output, as a bag model does",
                 f"but {tmp('ds', 'dataset.json')} was packed with --unit tile: pack with --unit bag, or give "
                 "a tile model (forward(N x D) -> N x classes)")
    expect_error([tmp("ds"), *base, "--model", script_file("mean_pool.pt", MeanPool())], 2,
                 "mean_pool.pt: forward returned a tensor of 3 for a batch of 2 x 32", "a tensor of 3 for 3 rows",
                 "as a bag model does", "packed with --unit tile")
    # Wrong shapes that are not the other unit's keep the plain message.
    expect_error([tmp("ds"), *base, "--model", script_file("one_logit.pt", OneLogit())], 2,
                 "one_logit.pt: forward returned a tensor of 2 for a batch of 2 x 32 features (float32); "
                 "expected 2 x 3 (batch x classes)")
    expect_error([tmp("bagds"), *base, "--model", script_file("mil3.pt", ScriptMIL(classes=3))], 2,
                 "mil3.pt: forward returned a tensor of 1 x 3 for a bag of 3 x 16 features (float32); "
                 "expected 2 or 1 x 2 (one bag's logits)")
    expect_error([tmp("ds"), *base, "--model", mlp, "--sections", "2"], 1,
                 "--sections 2", "1 blocks")
    expect_error([tmp("ds"), *base, "--model", script_file("tuple_sec.pt", TupleOut()), "--sections", "2"], 2,
                 "tuple_sec.pt: forward returned Tuple")
    expect_error([tmp("ds"), *base, "--model", script_file("residual.pt", Residual()), "--sections", "2"], 1,
                 "residual.pt's forward does not run its top-level children in sequence")
    expect_error([tmp("bagds"), *base, "--model", script_file("mil_sec.pt", ScriptMIL()), "--sections", "2"], 1,
                 "mil_sec.pt trains on bags, which sections do not cut")
    torch.save(ScriptMLP().state_dict(), tmp("state_dict.pt"))
    expect_error([tmp("ds"), *base, "--model", tmp("state_dict.pt")], 2,
                 "state_dict.pt: not a TorchScript module")
    expect(not os.path.exists(tmp("run_bad_script")), "a run directory was created for bad input")


def check_script_resume():
    """A stopped TorchScript run resumes to exactly the weights of an uninterrupted one, and
    --resume refuses another module file."""
    torch.manual_seed(5)
    path = script_file("mlp_resume.pt", ScriptMLP())
    args = [tmp("ds"), "--model", path, "--epochs", "2", "--batch", "16"]
    train_ok(*args, "-o", tmp("run_script_full"))
    train_ok(*args, "-o", tmp("run_script_cut"), "--max-steps", "20")
    torch.manual_seed(6)
    other = script_file("mlp_other.pt", ScriptMLP())
    expect_error([tmp("ds"), "--model", other, "--epochs", "2", "--batch", "16", "-o", tmp("run_script_cut"),
                  "--resume"], 1, "the model spec differs")
    train_ok(*args, "-o", tmp("run_script_cut"), "--resume")
    a = open(tmp("run_script_full", "model.safetensors"), "rb").read()
    b = open(tmp("run_script_cut", "model.safetensors"), "rb").read()
    expect(a == b, "the resumed TorchScript run's weights differ from an uninterrupted run's")


def script_cnn(seed):
    """A small CNN on N x 3 x 16 x 16 pixels in [0, 1] for two classes: an nn.Sequential, so
    each child is a block (--sections cuts between them)."""
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 2))


def check_script_image():
    """A TorchScript CNN on an image dataset's pixels: it learns the tints; the host feed and a
    resumed run give the plain run's weights byte for byte, --sections, --micro-batches and
    --nproc 2 within 1e-5 (no batch norm or dropout in it); --augment and
    --stain-norm train and are recorded; a module that cannot take N x 3 x T x T is refused."""
    from PIL import Image
    ds = image_dataset()
    path = script_file("cnn_script.pt", script_cnn(4))
    args = [ds, "--model", path, "--epochs", "4", "--batch", "8", "--lr", "0.01"]
    s = train_ok(*args, "-o", tmp("run_simg"), "--feed", "pinned")
    expect(s["validation"]["val_accuracy"] >= 0.95, f"tints not learned: {s['validation']}")
    expect(s["blocks"] == [str(i) for i in range(8)], f"blocks {s['blocks']}")
    expect(os.path.isfile(tmp("run_simg", "model.script.pt")), "no model.script.pt")
    plain = open(tmp("run_simg", "model.safetensors"), "rb").read()
    train_ok(*args, "-o", tmp("run_simg_h"), "--feed", "host")
    expect(open(tmp("run_simg_h", "model.safetensors"), "rb").read() == plain, "host feed: other weights")
    train_ok(*args, "-o", tmp("run_simg_r"), "--feed", "pinned", "--max-steps", "7")
    s = train_ok(*args, "-o", tmp("run_simg_r"), "--feed", "pinned", "--resume")
    expect(s["resumed_from"] == 7, f"resumed from {s['resumed_from']}")
    expect(open(tmp("run_simg_r", "model.safetensors"), "rb").read() == plain, "resumed: other weights")
    s = train_ok(*args, "-o", tmp("run_simg_s"), "--feed", "pinned", "--sections", "2")
    expect(s["memory"]["mode"] == "sections", f"memory {s['memory']}")
    tensors_close(tmp("run_simg_s", "model.safetensors"), tmp("run_simg", "model.safetensors"), 1e-5)
    train_ok(*args, "-o", tmp("run_simg_mb"), "--feed", "pinned", "--micro-batches", "3")
    tensors_close(tmp("run_simg_mb", "model.safetensors"), tmp("run_simg", "model.safetensors"), 1e-5)
    train_ok(*args, "-o", tmp("run_simg_dp"), "--feed", "pinned", "--nproc", "2")
    tensors_close(tmp("run_simg_dp", "model.safetensors"), tmp("run_simg", "model.safetensors"), 1e-5)
    # --augment and --stain-norm on the uint8 tiles before the module's forward; recorded.
    ref = np.random.default_rng(7).normal(0, 30, (64, 64, 3)) + np.array([170, 100, 185])
    Image.fromarray(np.clip(ref, 0, 255).astype(np.uint8)).save(tmp("simg_ref.png"))
    train_ok(*args, "-o", tmp("run_simg_aug"), "--augment", "flip,hed:0.05", "--stain-norm", "macenko",
             "--stain-reference", tmp("simg_ref.png"))
    doc = json.load(open(tmp("run_simg_aug", "run.json")))
    expect(doc["options"]["augment"] == ["flip", "hed:0.05"] and doc["options"]["stain_norm"] == "macenko" and
           doc.get("stain_norm", {}).get("method") == "macenko", f"run.json {doc['options']} {doc.get('stain_norm')}")
    expect(open(tmp("run_simg_aug", "model.safetensors"), "rb").read() != plain, "--augment changed nothing")
    # A module for features, not pixels.
    torch.manual_seed(0)
    lin = script_file("linear5.pt", torch.nn.Linear(5, 2))
    expect_error([ds, "--model", lin, "-o", tmp("run_bad_simg")], 2,
                 "linear5.pt: forward failed on a batch of 2 x 3 x 16 x 16 pixels (float32 in [0, 1])")
    expect(not os.path.exists(tmp("run_bad_simg")), "a run directory was created for a refused module")


if __name__ == "__main__":
    run_checks("train", [check_mlp_learns, check_feeds_agree, check_resume, check_kill_and_resume, check_sigterm,
                         check_pytorch_loads, check_abmil_learns, check_report_page, check_classification_cv,
                         check_image, check_bad_input,
                         check_nan_loss, check_micro_batches, check_sections, check_reproducible,
                         check_one_writer, check_script_matches_python, check_script_learns,
                         check_script_bad_input, check_script_resume, check_script_bag_matches_python,
                         check_script_bag_adamw_matches_python,
                         check_script_sections, check_script_image],
              only, fixtures)
