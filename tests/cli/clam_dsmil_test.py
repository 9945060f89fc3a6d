"""mltool train's clam_sb, clam_mb and dsmil families (docs/train.md, "Bag heads") against small
PyTorch ports of the reference implementations (mahmoodlab/CLAM models/model_clam.py and
utils/core_utils.py's train_loop_clam; binli123/dsmil-wsi dsmil.py and train_tcga.py's
train), written here per bag with torch: every step's loss mltool logs equals the port's on
the same weights and bags, an epoch of SGD ends at the port's weights (a PyTorch loop over
the same batches in the same order), and the final weights' logits equal predictions.csv's.
Then the memory and parallel modes step as plain training does (--micro-batches, --sections,
--nproc 2, --resume, the out-of-memory retry), k-fold cross-validation writes its report, and
a dataset of another task is refused.

    clam_dsmil_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from cli_common import command_json, command_ok, expect, run, run_checks, tmp, write_feature_store

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
SEED = 3


# ---------------------------------------------------------------- fixtures

def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def pack(labels, out, *args):
    code, _, err = run([mltool, "pack", tmp("bagfeat"), "--labels", labels, "-o", out, "--seed", "1",
                        "--unit", "bag", *args])
    expect(code == 0, f"pack {out}: exit {code}: {err.strip()}")


def fixtures():
    # 36 bags of 3-14 instances in 12-d (some shorter than k_sample 8); a bag of class c > 0
    # holds 1-3 instances shifted along direction c. Two labels (neg, pos: bags of class 0 or
    # 1) and three (a, b, c), and a regression target for the refusal.
    rng = np.random.default_rng(11)
    dirs = rng.standard_normal((3, 12))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    keys, rows, two, three, reg = [], [], [], [], []
    for s in range(36):
        n = int(rng.integers(3, 15))
        x = rng.standard_normal((n, 12))
        c = s % 3
        if c:
            x[rng.choice(n, int(rng.integers(1, min(3, n) + 1)), replace=False)] += 4 * dirs[c]
        keys += [f"B{s:02d}/{t:06d}_000000" for t in range(n)]
        rows += list(x)
        two.append((f"B{s:02d}", "pos" if c else "neg"))
        three.append((f"B{s:02d}", "abc"[c]))
        reg.append((f"B{s:02d}", float(c)))
    write_feature_store(tmp("bagfeat"), np.array(rows), keys)
    write_csv(tmp("two.csv"), ["key", "label"], two)
    write_csv(tmp("three.csv"), ["key", "label"], three)
    write_csv(tmp("reg.csv"), ["key", "score"], reg)
    pack(tmp("two.csv"), tmp("ds2"), "--split", "train=0.75,val=0.25")
    pack(tmp("three.csv"), tmp("ds3"), "--split", "train=0.75,val=0.25")
    pack(tmp("two.csv"), tmp("ds2cv"), "--folds", "3")
    pack(tmp("reg.csv"), tmp("dsreg"), "--task", "regression", "--target-column", "score", "--split", "train=0.75,val=0.25")
    return "36 bags of 3-14 instances x 12"


def train(*args):
    return command_json(mltool, "train", *args)


def train_ok(*args):
    return command_ok(mltool, "train", *args)


def read_safetensors(path):
    import struct
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype="<f4").reshape(h["shape"])
    return out


def predictions(run_dir):
    with open(os.path.join(run_dir, "predictions.csv")) as f:
        return list(csv.DictReader(f))


def step_losses(run_dir):
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [l["loss"] for l in lines if l["event"] == "step"]


# ---------------------------------------------------------------- the reference ports

class Clam(nn.Module):
    """CLAM_SB / CLAM_MB (model_clam.py) with one fc layer, on one bag (N x dims). The modules
    are made in the reference's order, so torch.manual_seed(s) first draws mltool's weights
    for --seed s. forward returns the logits (1 x C), the softmaxed attention (branches x N)
    and, given the label, the instance loss (inst_eval / inst_eval_out, k = min(k, N))."""

    def __init__(self, dims, hidden, attention, classes, mb, k_sample=8, subtyping=False):
        super().__init__()
        self.fc = nn.Linear(dims, hidden)
        self.attention_a = nn.Linear(hidden, attention)
        self.attention_b = nn.Linear(hidden, attention)
        self.attention_c = nn.Linear(attention, classes if mb else 1)
        self.classifiers = (nn.ModuleList([nn.Linear(hidden, 1) for _ in range(classes)]) if mb
                            else nn.Linear(hidden, classes))
        self.instance_classifiers = nn.ModuleList([nn.Linear(hidden, 2) for _ in range(classes)])
        self.mb, self.k_sample, self.classes, self.subtyping = mb, k_sample, classes, subtyping

    def names(self):
        """mltool's name of each of this module's parameters."""
        out = {"fc.weight": "fc1.linear.weight", "fc.bias": "fc1.linear.bias"}
        for n, _ in self.named_parameters():
            if not n.startswith("fc."):
                out[n] = "clam." + n
        return out

    def inst_eval(self, A, h, classifier, k):
        top = h[torch.topk(A, k)[1]]
        bottom = h[torch.topk(-A, k)[1]]
        targets = torch.cat([torch.ones(k, dtype=torch.long), torch.zeros(k, dtype=torch.long)])
        return F.cross_entropy(classifier(torch.cat([top, bottom])), targets)

    def inst_eval_out(self, A, h, classifier, k):
        top = h[torch.topk(A, k)[1]]
        return F.cross_entropy(classifier(top), torch.zeros(k, dtype=torch.long))

    def forward(self, x, label=None):
        h = F.relu(self.fc(x))
        A = self.attention_c(torch.tanh(self.attention_a(h)) * torch.sigmoid(self.attention_b(h)))
        A = F.softmax(A.transpose(1, 0), dim=1)
        M = A @ h
        if self.mb:
            logits = torch.cat([self.classifiers[c](M[c]) for c in range(self.classes)]).view(1, -1)
        else:
            logits = self.classifiers(M)
        if label is None:
            return logits, A, None
        k = min(self.k_sample, x.shape[0])
        total = 0.0
        for i, classifier in enumerate(self.instance_classifiers):
            a = A[i if self.mb else 0]
            if i == label:
                total = total + self.inst_eval(a, h, classifier, k)
            elif self.subtyping:
                total = total + self.inst_eval_out(a, h, classifier, k)
        if self.subtyping:
            total = total / self.classes
        return logits, A, total

    def loss(self, x, label, bag_weight=0.7):
        logits, _, inst = self(x, label)
        return bag_weight * F.cross_entropy(logits, torch.tensor([label])) + (1 - bag_weight) * inst


class Dsmil(nn.Module):
    """MILNet(FCLayer, BClassifier) of dsmil.py on one bag, nonlinear q, passing_v as given."""

    def __init__(self, dims, classes, passing_v=False):
        super().__init__()
        self.i_classifier = nn.Linear(dims, classes)
        self.q1 = nn.Linear(dims, 128)
        self.q2 = nn.Linear(128, 128)
        self.v = nn.Linear(dims, dims) if passing_v else None
        self.fcc = nn.Conv1d(classes, classes, kernel_size=dims)

    def names(self):
        return {n: "dsmil." + n for n, _ in self.named_parameters()}

    def q(self, x):
        return torch.tanh(self.q2(F.relu(self.q1(x))))

    def forward(self, feats):
        c = self.i_classifier(feats)
        V = F.relu(self.v(feats)) if self.v is not None else feats
        Q = self.q(feats)
        _, m_indices = torch.sort(c, 0, descending=True)
        q_max = self.q(torch.index_select(feats, dim=0, index=m_indices[0, :]))
        A = F.softmax(Q @ q_max.transpose(0, 1) / math.sqrt(128), 0)
        B = (A.transpose(0, 1) @ V).unsqueeze(0)
        return c, self.fcc(B).view(1, -1), A

    def loss(self, x, label):
        c, bag, _ = self(x)
        y = torch.tensor([label])
        return 0.5 * F.cross_entropy(bag, y) + 0.5 * F.cross_entropy(c.max(0)[0].view(1, -1), y)


def reference(spec, classes):
    torch.manual_seed(SEED)
    if spec["family"] == "dsmil":
        return Dsmil(12, classes, spec.get("passing_v", False))
    return Clam(12, spec["hidden"][0], spec["attention"], classes, spec["family"] == "clam_mb",
                spec.get("k_sample", 8), spec.get("subtyping", False))


# ---------------------------------------------------------------- checks

SPECS = {
    "clam_sb": ({"family": "clam_sb", "hidden": [16], "attention": 8, "dropout": 0}, "ds2", 2),
    "clam_mb": ({"family": "clam_mb", "hidden": [16], "attention": 8, "dropout": 0, "subtyping": True},
                "ds3", 3),
    "dsmil": ({"family": "dsmil"}, "ds2", 2),
    "dsmil_v": ({"family": "dsmil", "passing_v": True}, "ds3", 3),
}
COMMON = ["--epochs", "2", "--batch", "5", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05",
          "--schedule", "constant", "--seed", str(SEED), "--device", "cpu", "--math-threads", "1"]


def spec_file(name):
    path = tmp(name + ".json")
    if not os.path.exists(path):
        write_json(path, SPECS[name][0])
    return path


def bags_of(run_dir):
    """The bags of predictions.csv (--val-split train: the training bags in training order)
    and their label ids."""
    labels = json.load(open(os.path.join(run_dir, "run.json")))["dataset"]["labels"]
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")).astype(np.float32))
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    preds = predictions(run_dir)
    bags = [X[[i for i, k in enumerate(keys) if k.startswith(p["sample"] + "/")]] for p in preds]
    return preds, labels, bags, [labels.index(p["label"]) for p in preds]


def epoch_order(seed, epoch, n):
    """lib/train/loop.cpp's epoch_order (as tests/cli/train_test.py's)."""
    m = (1 << 64) - 1

    def mix64(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)

    g = torch.Generator().manual_seed(mix64((seed * 0x9E3779B97F4A7C15 + epoch + 0x632BE59BD9B4E019) & m))
    return torch.randperm(n, generator=g)


def relative(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def matches_reference(name):
    """mltool's run of SPECS[name] against the port: every step's loss, the epoch's weights,
    the final logits."""
    spec, ds, classes = SPECS[name]
    out = tmp("ref_" + name)
    train_ok(tmp(ds), "--model", spec_file(name), "-o", out, *COMMON, "--val-split", "train",
             "--log-every", "1")
    preds, labels, bags, y = bags_of(out)
    ref = reference(spec, classes)
    torch.set_num_threads(1)
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    plain = [p for p in ref.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}],
                          lr=0.05, momentum=0.9, foreach=False)
    losses = []
    for epoch in range(2):
        order = epoch_order(SEED, epoch, len(bags))
        for b in range(0, len(bags), 5):
            idx = order[b:b + 5].tolist()
            opt.zero_grad()
            loss = torch.stack([ref.loss(bags[i], y[i]).reshape(()) for i in idx]).mean()
            loss.backward()
            # An instance classifier no bag of the step uses has a gradient of zero in mltool
            # (each bag's loss is computed for every label it could have): decayed and moved
            # by its momentum, where PyTorch would skip a parameter without a gradient.
            for p in ref.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            losses.append(loss.item())
            opt.step()
    tool = step_losses(out)
    expect(len(tool) == len(losses), f"{name}: {len(tool)} step losses logged, the loop took {len(losses)}")
    for i, (a, b) in enumerate(zip(tool, losses)):
        expect(abs(a - b) <= 1e-5 * abs(b), f"{name}: step {i + 1}: mltool's loss {a}, the port's {b}")
    got = read_safetensors(os.path.join(out, "model.safetensors"))
    names = ref.names()
    expect(set(got) == set(names.values()), f"{name}: tensors {sorted(got)}, expected {sorted(names.values())}")
    for n, p in ref.named_parameters():
        d = relative(got[names[n]], p.detach().numpy())
        expect(d <= 1e-5, f"{name}: {names[n]}: differs from the PyTorch loop's by {d} (relative)")
    with torch.no_grad():  # the final weights' logits, the tool's weights in the port
        for n, p in ref.named_parameters():
            p.copy_(torch.from_numpy(got[names[n]].copy()))
        logits = torch.cat([ref(b)[1 if name.startswith("dsmil") else 0] for b in bags])
    want = np.array([[float(p["logit_" + l]) for l in labels] for p in preds])
    d = relative(logits.numpy(), want)
    expect(d <= 1e-5, f"{name}: the port's logits differ from predictions.csv's by {d} (relative)")
    expect_attention(name, ref, out)


def expect_attention(name, ref, run_dir):
    """predict's attention.csv: clam_sb's branch, clam_mb's branch of the predicted class,
    dsmil's attention to the predicted class's critical instance, as the port computes them."""
    pred = tmp("pred_" + name)
    code, _, err = run([mltool, "predict", run_dir, tmp("bagfeat"), "-o", pred, "--weights", "final", "-q"])
    expect(code == 0, f"{name}: predict: exit {code}: {err.strip()}")
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")).astype(np.float32))
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    rows = list(csv.DictReader(open(os.path.join(pred, "attention.csv"))))
    expect([r["key"] for r in rows] == keys, f"{name}: attention.csv's keys are not the store's")
    got = np.array([float(r["attention"]) for r in rows])
    want = np.zeros(len(keys))
    with torch.no_grad():
        for slide in sorted({k.split("/")[0] for k in keys}):
            idx = [i for i, k in enumerate(keys) if k.startswith(slide + "/")]
            out = ref(X[idx])
            if name.startswith("dsmil"):
                want[idx] = out[2][:, int(out[1].argmax())].numpy()
            else:
                want[idx] = out[1][int(out[0].argmax()) if ref.mb else 0].numpy()
    d = relative(got, want)
    expect(d <= 1e-5, f"{name}: attention.csv differs from the port's attention by {d} (relative)")


def check_clam_sb_matches_reference():
    matches_reference("clam_sb")


def check_clam_mb_matches_reference():
    matches_reference("clam_mb")


def check_dsmil_matches_reference():
    matches_reference("dsmil")
    matches_reference("dsmil_v")


def close(a, b, what, rtol=1e-5):
    ta, tb = read_safetensors(os.path.join(a, "model.safetensors")), read_safetensors(os.path.join(b, "model.safetensors"))
    expect(set(ta) == set(tb), f"{what}: tensors {sorted(ta)} vs {sorted(tb)}")
    worst = max(relative(ta[k], tb[k]) for k in ta)
    expect(worst <= rtol, f"{what}: weights differ from plain training's by {worst} (relative)")


def check_modes_equal_plain():
    """Micro-batches (each part padded to its own longest bag), sections, two processes, a
    resumed run and an out-of-memory retry train as the plain run does."""
    for name in ("clam_sb", "clam_mb", "dsmil"):
        spec, ds, _ = SPECS[name]
        args = [tmp(ds), "--model", spec_file(name), *COMMON]
        plain = tmp(f"plain_{name}")
        train_ok(*args, "-o", plain)
        train_ok(*args, "-o", tmp(f"mb_{name}"), "--micro-batches", "3")
        close(tmp(f"mb_{name}"), plain, f"{name} --micro-batches 3")
        if name != "dsmil":  # dsmil is one block: nothing to cut between
            s = train_ok(*args, "-o", tmp(f"sec_{name}"), "--sections", "2")
            expect(s["memory"]["sections"] == [["fc1"], ["clam"]], f"{name}: sections {s['memory']}")
            close(tmp(f"sec_{name}"), plain, f"{name} --sections 2")
        train_ok(*args, "-o", tmp(f"dp_{name}"), "--nproc", "2")
        close(tmp(f"dp_{name}"), plain, f"{name} --nproc 2")
        part = tmp(f"part_{name}")
        train_ok(*args, "-o", part, "--max-steps", "4")
        s = train_ok(*args, "-o", part, "--resume")
        expect(s["resumed_from"] == 4, f"{name}: resumed from {s['resumed_from']}")
        expect(open(os.path.join(part, "model.safetensors"), "rb").read() ==
               open(os.path.join(plain, "model.safetensors"), "rb").read(), f"{name}: resumed weights differ")
        # Out-of-memory errors (injected) redo the step in 2, 4, 5 micro-batches, then (clam)
        # sections of one block each; dsmil, one block, stops at micro-batches.
        oom = tmp(f"oom_{name}")
        steps, want = ("1,3", [(2, 1), (4, 1)]) if name == "dsmil" else \
            ("1,2,3,4", [(2, 1), (4, 1), (5, 1), (1, 2)])
        command_ok(mltool, "train", *args, "-o", oom, "--feed", "host", env={"MLTOOL_DEBUG_OOM": steps})
        events = [json.loads(l) for l in open(os.path.join(oom, "metrics.jsonl"))]
        got = [(e["micro_batches"], e["sections"]) for e in events if e["event"] == "oom"]
        expect(got == want, f"{name}: the out-of-memory retries: {got}, expected {want}")
        close(oom, plain, f"{name} out-of-memory retry")


def check_class_weights_modes():
    """--class-weights weigh each bag's whole objective: parts and ranks still add up to it."""
    for name in ("clam_sb", "dsmil"):
        spec, ds, _ = SPECS[name]
        args = [tmp(ds), "--model", spec_file(name), *COMMON, "--class-weights", "0.3,1.7"]
        plain = tmp(f"cw_{name}")
        train_ok(*args, "-o", plain)
        train_ok(*args, "-o", tmp(f"cw_mb_{name}"), "--micro-batches", "2")
        close(tmp(f"cw_mb_{name}"), plain, f"{name} --class-weights --micro-batches 2")
        train_ok(*args, "-o", tmp(f"cw_dp_{name}"), "--nproc", "2")
        close(tmp(f"cw_dp_{name}"), plain, f"{name} --class-weights --nproc 2")
    # The first step's loss: each bag's objective weighted by its class's weight, over the sum.
    spec, ds, classes = SPECS["clam_sb"]
    out = tmp("cw_ref")
    train_ok(tmp(ds), "--model", spec_file("clam_sb"), "-o", out, *COMMON, "--class-weights", "0.3,1.7",
             "--val-split", "train", "--log-every", "1")
    _, _, bags, y = bags_of(out)
    ref = reference(spec, classes)
    idx = epoch_order(SEED, 0, len(bags))[:5].tolist()
    w = torch.tensor([0.3, 1.7])[[y[i] for i in idx]]
    with torch.no_grad():
        want = (w * torch.stack([ref.loss(bags[i], y[i]).reshape(()) for i in idx])).sum() / w.sum()
    got = step_losses(out)[0]
    expect(abs(got - want.item()) <= 1e-5 * want.item(), f"class-weighted step 1: mltool {got}, the port {want.item()}")


def check_dropout_sections_equal_plain():
    """With dropout (CLAM's default 0.25), sections replay the forward's masks: the same steps."""
    write_json(tmp("clam_drop.json"), {"family": "clam_mb", "hidden": [16], "attention": 8})
    args = [tmp("ds3"), "--model", tmp("clam_drop.json"), *COMMON]
    train_ok(*args, "-o", tmp("drop_plain"))
    train_ok(*args, "-o", tmp("drop_sec"), "--sections", "2")
    close(tmp("drop_sec"), tmp("drop_plain"), "clam_mb dropout --sections 2")


def check_cross_validation():
    """--folds all with the bootstrap intervals and the report page, for each head."""
    for name in ("clam_sb", "dsmil"):
        out = tmp("cv_" + name)
        train_ok(tmp("ds2cv"), "--model", spec_file(name), "--folds", "all", "-o", out, "--epochs", "2",
                 "--batch", "4", "--bootstrap", "50")
        cv = json.load(open(os.path.join(out, "cv.json")))
        expect(cv["folds"] == 3 and "val_auc" in json.dumps(cv["intervals"]), f"{name}: cv.json {cv}")
        expect(os.path.isfile(os.path.join(out, "report.html")), f"{name}: no CV report.html")


def check_other_task_refused():
    for name in ("clam_sb", "clam_mb", "dsmil"):
        code, _, err = train(tmp("dsreg"), "--model", spec_file(name), "-o", tmp("run_refused"))
        expect(code != 0 and name in err and "regression" in err and "classification" in err and "abmil" in err,
               f"{name} on a regression dataset: exit {code}: {err.strip()}")
    expect(not os.path.exists(tmp("run_refused")), "a run directory was created for a refused task")
    write_json(tmp("dsmil_bad.json"), {"family": "dsmil", "dropout": 0.2})
    code, _, err = train(tmp("ds2"), "--model", tmp("dsmil_bad.json"), "-o", tmp("run_refused"))
    expect(code == 2 and "/dropout" in err and "passing_v" in err, f"dsmil dropout without passing_v: {err.strip()}")


if __name__ == "__main__":
    run_checks("clam_dsmil", [check_clam_sb_matches_reference, check_clam_mb_matches_reference,
                              check_dsmil_matches_reference, check_modes_equal_plain,
                              check_class_weights_modes, check_dropout_sections_equal_plain, check_cross_validation,
                              check_other_task_refused],
               only, fixtures)
