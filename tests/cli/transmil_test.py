"""The built-in `transmil` family (TransMIL, Shao et al. 2021) against a PyTorch port written
here from the paper and the reference (github.com/szc19990412/TransMIL models/TransMIL.py, with
lucidrains' nystrom-attention): the port equals the reference built from PyPI's
nystrom-attention (when installed) on the same weights; mltool's forward equals the port on
model.safetensors (classification logits and a survival model's risk); an epoch of mltool's
training equals the same epoch in a PyTorch loop (weights and each step's loss); micro-batches,
sections, data parallel, resume and an out-of-memory retry give plain training's weights;
predict's attention.csv is the port's class-token attention; cross-validation with intervals
and report.html runs.

    transmil_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from cli_common import command_ok, csv_rows, expect, run, run_checks, run_json, tmp, write_feature_store

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])

DIMS = 16   # instance features
DIM = 32    # the spec's dim: dim_head 4, 8 heads, 16 landmarks
SPEC = {"family": "transmil", "dim": DIM}
EXACT = {**SPEC, "dropout": 0.0}  # for comparisons with other runs and the PyTorch loop


# ---------------------------------------------------------------- the port

def grid_side(n):
    s = math.isqrt(n)
    return s if s * s == n else s + 1


def pinv(x, iters):
    """lucidrains' moore_penrose_iter_pinv: scaled by the largest row and column sums of |x|."""
    a = x.abs()
    z = x.transpose(-1, -2) / (a.sum(-1).max() * a.sum(-2).max())
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    for _ in range(iters):
        xz = x @ z
        z = 0.25 * z @ (13 * eye - xz @ (15 * eye - xz @ (7 * eye - xz)))
    return z


def nystrom(sd, p, x, cfg):
    """Nyström attention of one bag's tokens x (n x dim), eq. 15 of Xiong et al. 2021 with
    landmarks the means of consecutive groups, zero rows in front to a multiple of the
    landmarks, plus a depthwise convolution of V along the tokens (kernel 33). Returns the
    output (n x dim) and the class token's (row 0) attention row over the n tokens, averaged
    over the heads."""
    n, m, h, d = x.shape[0], cfg["landmarks"], cfg["heads"], cfg["dim_head"]
    pad = (m - n % m) % m
    x = F.pad(x, (0, 0, pad, 0))
    q, k, v = (t.reshape(-1, h, d).transpose(0, 1) for t in (x @ sd[p + "to_qkv.weight"].T).chunk(3, -1))
    q = q * d ** -0.5
    l = -(-n // m)
    ql, kl = (t.reshape(h, m, l, d).sum(2) / l for t in (q, k))
    a1, a2, a3 = (torch.softmax(s, -1) for s in (q @ kl.transpose(-1, -2), ql @ kl.transpose(-1, -2),
                                                  ql @ k.transpose(-1, -2)))
    inv = pinv(a2, cfg["pinv_iterations"])
    out = (a1 @ inv) @ (a3 @ v)
    out = out + F.conv2d(v.unsqueeze(0), sd[p + "res_conv.weight"], padding=(16, 0), groups=h)[0]
    out = F.linear(out.transpose(0, 1).reshape(-1, h * d), sd[p + "to_out.weight"], sd[p + "to_out.bias"])
    cls = (a1[:, pad:pad + 1] @ inv @ a3).mean(0)[0, pad:]
    return out[pad:], cls


def layer_norm(sd, p, x):
    return F.layer_norm(x, x.shape[-1:], sd[p + "weight"], sd[p + "bias"])


def config(spec):
    dim = spec.get("dim", 512)
    return {"dim": dim, "heads": spec.get("heads", 8), "dim_head": spec.get("dim_head", dim // 8),
            "landmarks": spec.get("landmarks", dim // 2), "pinv_iterations": spec.get("pinv_iterations", 6)}


def transmil_forward(sd, bag, cfg):
    """One bag (n x D) → (logits, the class token's attention per instance, renormalised)."""
    h = F.relu(F.linear(bag, sd["fc1.linear.weight"], sd["fc1.linear.bias"]))
    n = h.shape[0]
    side = grid_side(n)
    h = torch.cat([sd["cls.token"][0], h, h[:side * side - n]])
    h = h + nystrom(sd, "layer1.attn.", layer_norm(sd, "layer1.norm.", h), cfg)[0]
    grid = h[1:].T.reshape(1, -1, side, side)
    y = grid
    for name, k in (("proj", 7), ("proj1", 5), ("proj2", 3)):
        y = y + F.conv2d(grid, sd[f"ppeg.{name}.weight"], sd[f"ppeg.{name}.bias"], padding=k // 2,
                         groups=grid.shape[1])
    h = torch.cat([h[:1], y[0].flatten(1).T])
    out, cls = nystrom(sd, "layer2.attn.", layer_norm(sd, "layer2.norm.", h), cfg)
    h = h + out
    logits = F.linear(layer_norm(sd, "norm.norm.", h[0]), sd["head.linear.weight"], sd["head.linear.bias"])
    w = cls[1:1 + n].clone()
    w[:side * side - n] += cls[1 + n:]
    return logits, w / w.sum()


# ---------------------------------------------------------------- fixtures

def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def fixtures():
    """36 bags of 1-40 instances in 16-d (every grid from 1 x 1 to 7 x 7; more tokens than the
    16 landmarks from 16 instances on): a positive bag holds 1-3 instances shifted along one
    direction. Survival: the same bags, the positive ones dying sooner."""
    rng = np.random.default_rng(11)
    u = rng.standard_normal(DIMS)
    u /= np.linalg.norm(u)
    keys, rows, labels, times = [], [], [], []
    for s in range(36):
        n = [1, 2, 4, 5, 9, 17, 26, 40][s] if s < 8 else int(rng.integers(3, 31))
        x = rng.standard_normal((n, DIMS))
        positive = s % 2 == 1
        if positive:
            x[rng.choice(n, min(n, int(rng.integers(1, 4))), replace=False)] += 4 * u
        keys += [f"B{s:02d}/{t:06d}_000000" for t in range(n)]
        rows += list(x)
        labels.append((f"B{s:02d}", "pos" if positive else "neg"))
        times.append((f"B{s:02d}", round(float(rng.exponential(3 if positive else 10)), 3), int(rng.random() < 0.7)))
    write_feature_store(tmp("feat"), np.array(rows), keys)
    write_csv(tmp("bags.csv"), ["key", "label"], labels)
    write_csv(tmp("surv.csv"), ["key", "time", "event"], times)
    write_csv(tmp("reg.csv"), ["key", "target"], [(k, t) for k, t, _ in times])
    write_csv(tmp("multi.csv"), ["key", "A", "B"],
              [(k, int(l == "pos"), e) for (k, l), (_, _, e) in zip(labels, times)])
    pack("ds", "--labels", tmp("bags.csv"), "--split", "train=0.7,val=0.3")
    pack("cv", "--labels", tmp("bags.csv"), "--folds", "3")
    pack("sds", "--labels", tmp("surv.csv"), "--task", "survival", "--time-column", "time", "--event-column",
         "event", "--split", "train=0.7,val=0.3")
    pack("rds", "--labels", tmp("reg.csv"), "--task", "regression", "--target-column", "target", "--split",
         "train=0.7,val=0.3")
    pack("mds", "--labels", tmp("multi.csv"), "--task", "multilabel", "--label-columns", "A,B", "--split",
         "train=0.7,val=0.3")
    for name, doc in (("transmil.json", SPEC), ("exact.json", EXACT)):
        with open(tmp(name), "w") as f:
            json.dump(doc, f)
    return f"{len(labels)} bags, {len(keys)} instances"


def pack(out, *args):
    code, _, err = run([mltool, "pack", tmp("feat"), "-o", tmp(out), "--unit", "bag", "--seed", "1", *args])
    expect(code == 0, f"pack {out}: exit {code}: {err.strip()}")


def quick(args):
    """One math thread (tiny matrices: more threads only wait on each other on a busy machine,
    7.9 s instead of 1.8 s a run) and no bootstrap unless asked for."""
    args = list(args)
    if "--math-threads" not in args:
        args += ["--math-threads", "1"]
    if "--bootstrap" not in args:
        args += ["--bootstrap", "0"]
    return args


def train_ok(*args):
    return command_ok(mltool, "train", *quick(args))


def state(run_dir, name="model.safetensors"):
    from safetensors.torch import load_file
    return load_file(os.path.join(run_dir, name))


def bags_of(samples):
    X = torch.from_numpy(np.load(tmp("feat", "features.npy")).astype(np.float32))
    keys = open(tmp("feat", "keys.txt")).read().split()
    return [X[[i for i, k in enumerate(keys) if k.startswith(s + "/")]] for s in samples]


def expect_close(got, want, rtol, what, atol=0.0):
    """got within rtol of want's largest magnitude (plus atol)."""
    d = float((got - want).abs().max())
    largest = float(want.abs().max())
    expect(d <= rtol * largest + atol, f"{what}: differs by {d:.3g} ({d / max(largest, 1e-30):.3g} of its largest; "
           f"tolerance {rtol} of it + {atol})")


def expect_same_weights(a, b, rtol, what, atol=0.0):
    ta, tb = state(a), state(b)
    expect(set(ta) == set(tb), f"{what}: tensors {sorted(ta)} vs {sorted(tb)}")
    for k in ta:
        expect_close(ta[k].double(), tb[k].double(), rtol, f"{what}: {k}", atol)


# ---------------------------------------------------------------- checks

class RefTransLayer(torch.nn.Module):
    """The reference's TransLayer on PyPI's NystromAttention, for a given dim."""

    def __init__(self, dim):
        super().__init__()
        from nystrom_attention import NystromAttention
        self.norm = torch.nn.LayerNorm(dim)
        self.attn = NystromAttention(dim=dim, dim_head=dim // 8, heads=8, num_landmarks=dim // 2,
                                     pinv_iterations=6, residual=True, dropout=0.1)

    def forward(self, x, return_attn=False):
        if return_attn:
            out, attn = self.attn(self.norm(x), return_attn=True)
            return x + out, attn
        return x + self.attn(self.norm(x))


def reference_forward(sd, bag):
    """models/TransMIL.py's forward (eval), its modules loaded with mltool's weights, and the
    last layer's attention (return_attn) row of the class token, averaged over the heads."""
    dim = sd["cls.token"].shape[-1]
    l1, l2 = RefTransLayer(dim), RefTransLayer(dim)
    for layer, p in ((l1, "layer1."), (l2, "layer2.")):
        layer.load_state_dict({"norm.weight": sd[p + "norm.weight"], "norm.bias": sd[p + "norm.bias"],
                               "attn.to_qkv.weight": sd[p + "attn.to_qkv.weight"],
                               "attn.to_out.0.weight": sd[p + "attn.to_out.weight"],
                               "attn.to_out.0.bias": sd[p + "attn.to_out.bias"],
                               "attn.res_conv.weight": sd[p + "attn.res_conv.weight"]})
        layer.eval()
    h = F.relu(F.linear(bag[None], sd["fc1.linear.weight"], sd["fc1.linear.bias"]))
    H = h.shape[1]
    _H = _W = int(np.ceil(np.sqrt(H)))
    h = torch.cat([h, h[:, :_H * _W - H, :]], dim=1)
    h = torch.cat((sd["cls.token"], h), dim=1)
    h = l1(h)
    cls_token, feat = h[:, 0], h[:, 1:]
    cnn = feat.transpose(1, 2).view(1, dim, _H, _W)
    x = sum(F.conv2d(cnn, sd[f"ppeg.{p}.weight"], sd[f"ppeg.{p}.bias"], padding=k // 2, groups=dim)
            for p, k in (("proj", 7), ("proj1", 5), ("proj2", 3))) + cnn
    h = torch.cat((cls_token.unsqueeze(1), x.flatten(2).transpose(1, 2)), dim=1)
    h, attn = l2(h, return_attn=True)
    logits = F.linear(layer_norm(sd, "norm.norm.", h)[:, 0], sd["head.linear.weight"], sd["head.linear.bias"])
    n = h.shape[1]
    row = attn.mean(1)[0, -n, -n:]  # the class token's row over the tokens, the front padding dropped
    return logits[0], row


def check_forward():
    """mltool's logits (predictions.csv of a short run) equal the port's on model.safetensors
    for every bag, in float32 and float64; the port equals the reference built on PyPI's
    nystrom-attention (skipped, said so, when it is not installed)."""
    out = tmp("run_fwd")
    s = train_ok(tmp("ds"), "--model", tmp("transmil.json"), "-o", out, "--epochs", "2", "--batch", "4",
                 "--val-split", "train", "--device", "cpu")
    expect(s["blocks"] == ["fc1", "cls", "layer1", "ppeg", "layer2", "norm", "head"], f"blocks {s['blocks']}")
    sd = state(out)
    spec = json.load(open(os.path.join(out, "run.json")))["spec"]
    cfg = config(spec)
    expect(cfg == {k: spec[k] for k in cfg} and spec["dropout"] == 0.1, f"run.json spec {spec}")
    preds = list(csv.DictReader(open(os.path.join(out, "predictions.csv"))))
    bags = bags_of([p["sample"] for p in preds])
    want = torch.tensor([[float(p["logit_neg"]), float(p["logit_pos"])] for p in preds])
    got = torch.stack([transmil_forward(sd, b, cfg)[0] for b in bags])
    expect_close(want, got.detach(), 1e-5, "mltool vs the port (float32)")
    sd64 = {k: v.double() for k, v in sd.items()}
    got64 = torch.stack([transmil_forward(sd64, b.double(), cfg)[0] for b in bags])
    expect_close(want.double(), got64.detach(), 1e-5, "mltool vs the port (float64)")
    try:
        import nystrom_attention  # noqa: F401
    except ImportError:
        print("  (nystrom-attention not installed: the port is not checked against it)")
        return
    with torch.no_grad():
        for b in bags:
            logits, w = transmil_forward(sd, b, cfg)
            ref, row = reference_forward(sd, b)
            expect_close(logits, ref, 1e-5, "the port vs the reference's logits")
            n = b.shape[0]
            side = grid_side(n)
            ref_w = row[1:1 + n].clone()
            ref_w[:side * side - n] += row[1 + n:]
            expect_close(w, ref_w / ref_w.sum(), 1e-5, "the port vs the reference's attention")


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


def check_training_matches_pytorch():
    """Epoch 2 of a run (SGD without momentum, weight decay 0.01 on dimension >= 2, dropout 0)
    replayed by a PyTorch loop over the port from the weights of a one-epoch run with the same
    seed: the same weights within 1e-5 of each tensor's largest and the same loss each step."""
    lr, batch, seed = 0.05, 4, 3
    args = [tmp("ds"), "--model", tmp("exact.json"), "--batch", str(batch), "--lr", str(lr), "--schedule", "constant",
            "--optimizer", "sgd", "--momentum", "0", "--seed", str(seed), "--val-split", "train", "--device", "cpu",
            "--math-threads", "1", "--log-every", "1"]
    train_ok(*args, "--epochs", "1", "-o", tmp("run_e1"))
    train_ok(*args, "--epochs", "2", "-o", tmp("run_e2"))
    preds = list(csv.DictReader(open(tmp("run_e2", "predictions.csv"))))
    bags = bags_of([p["sample"] for p in preds])
    y = torch.tensor([int(p["label"] == "pos") for p in preds])  # labels sorted: neg, pos
    cfg = config(EXACT)
    sd = {k: v.clone().requires_grad_(True) for k, v in state(tmp("run_e1")).items()}
    torch.set_num_threads(1)
    decay = [v for v in sd.values() if v.dim() >= 2]
    plain = [v for v in sd.values() if v.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}],
                          lr=lr, foreach=False)
    losses = []
    order = epoch_order(seed, 1, len(bags))
    for b in range(0, len(bags), batch):
        idx = order[b:b + batch].tolist()
        opt.zero_grad()
        loss = F.cross_entropy(torch.stack([transmil_forward(sd, bags[i], cfg)[0] for i in idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    got = state(tmp("run_e2"))
    for k, v in sd.items():
        expect_close(got[k].double(), v.detach().double(), 1e-5, f"epoch 2 vs the PyTorch loop: {k}")
    lines = [json.loads(l) for l in open(tmp("run_e2", "metrics.jsonl"))]
    steps = [l["loss"] for l in lines if l["event"] == "step" and l["epoch"] == 2]
    expect(len(steps) == len(losses) and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(steps, losses)),
           f"step losses {steps} vs the loop's {losses}")


def check_modes():
    """Micro-batches, sections (each block its own), data parallel (--nproc 2) and an
    out-of-memory retry give plain training's weights within 1e-5 (dropout 0); with dropout,
    sections and a stopped and resumed run give plain training's."""
    args = [tmp("ds"), "--model", tmp("exact.json"), "--epochs", "2", "--batch", "6", "--optimizer", "sgd",
            "--lr", "0.05", "--device", "cpu"]
    train_ok(*args, "-o", tmp("run_plain"))
    train_ok(*args, "-o", tmp("run_mb"), "--micro-batches", "3")
    expect_same_weights(tmp("run_mb"), tmp("run_plain"), 1e-5, "--micro-batches 3")
    s = train_ok(*args, "-o", tmp("run_sec"), "--sections", "7")
    expect(len(s["memory"]["sections"]) == 7, f"memory {s['memory']}")
    expect_same_weights(tmp("run_sec"), tmp("run_plain"), 1e-5, "--sections 7")
    with open(tmp("exact_sec.json"), "w") as f:
        json.dump({**EXACT, "sections": ["ppeg", "norm"]}, f)
    s = train_ok(tmp("ds"), "--model", tmp("exact_sec.json"), *args[3:], "-o", tmp("run_sec_spec"))
    expect(s["memory"]["sections"] == [["fc1", "cls", "layer1"], ["ppeg", "layer2"], ["norm", "head"]],
           f"spec sections: memory {s['memory']}")
    expect_same_weights(tmp("run_sec_spec"), tmp("run_plain"), 1e-5, "the spec's sections")
    train_ok(*args, "-o", tmp("run_dp"), "--nproc", "2")
    expect_same_weights(tmp("run_dp"), tmp("run_plain"), 1e-5, "--nproc 2")
    code, s, err = run_json([mltool, "train", *quick(args), "-o", tmp("run_oom"), "--feed", "host", "--json", "-q"],
                            env={"MLTOOL_DEBUG_OOM": "2"})
    expect(code == 0 and s["memory"]["micro_batches"] == 2, f"oom retry: exit {code}, {s and s['memory']}: {err}")
    expect_same_weights(tmp("run_oom"), tmp("run_plain"), 1e-5, "an out-of-memory retry")
    # Dropout 0.1 (the default): sections replay the masks; resume is exact.
    drop = [tmp("ds"), "--model", tmp("transmil.json"), "--epochs", "2", "--batch", "6", "--device", "cpu"]
    train_ok(*drop, "-o", tmp("run_drop"))
    train_ok(*drop, "-o", tmp("run_drop_sec"), "--sections", "3")
    expect_same_weights(tmp("run_drop_sec"), tmp("run_drop"), 1e-5, "--sections 3 with dropout")
    expect(state(tmp("run_drop"))["fc1.linear.weight"].ne(state(tmp("run_plain"))["fc1.linear.weight"]).any(),
           "dropout changed nothing")
    train_ok(*drop, "-o", tmp("run_drop_part"), "--max-steps", "5")
    s = train_ok(*drop, "-o", tmp("run_drop_part"), "--resume")
    expect(s["resumed_from"] == 5, f"resumed from {s['resumed_from']}")
    expect(open(tmp("run_drop_part", "model.safetensors"), "rb").read() ==
           open(tmp("run_drop", "model.safetensors"), "rb").read(), "resumed: other weights")


def check_survival():
    """Cox on the survival bags: predictions.csv's risk is the port's output; micro-batches
    (the risk set stays the step's) give plain training's weights. The Cox loss ignores a
    shift of every risk, so the gradients of the head's bias and of the last norm's bias (the
    head has one output) are zero but for rounding, and those weights (initially 0) stay within
    rounding of 0: hence the absolute 1e-6 beside the relative 1e-5."""
    args = [tmp("sds"), "--model", tmp("exact.json"), "--epochs", "2", "--batch", "8", "--optimizer", "sgd",
            "--lr", "0.05", "--device", "cpu", "--val-split", "train"]
    s = train_ok(*args, "-o", tmp("run_surv"))
    expect(s["validation"].get("val_c_index") is not None, f"validation {s['validation']}")
    preds = list(csv.DictReader(open(tmp("run_surv", "predictions.csv"))))
    sd = state(tmp("run_surv"))
    got = torch.stack([transmil_forward(sd, b, config(EXACT))[0][0] for b in bags_of([p["sample"] for p in preds])])
    want = torch.tensor([float(p["risk"]) for p in preds])
    expect_close(want, got.detach(), 1e-5, "survival risk vs the port")
    train_ok(*args, "-o", tmp("run_surv_mb"), "--micro-batches", "2")
    expect_same_weights(tmp("run_surv_mb"), tmp("run_surv"), 1e-5, "survival, --micro-batches 2", atol=1e-6)


def check_other_tasks():
    """Discrete-time survival (nll, 3 intervals: 3 outputs), regression and multilabel (two
    label columns) train; regression's and multilabel's outputs are the port's."""
    for name, ds, extra, column, f in (("nll", "sds", ["--loss", "nll", "--bins", "3"], None, None),
                                       ("reg", "rds", [], "prediction", lambda y: y),
                                       ("multi", "mds", [], "prob_B", torch.sigmoid)):
        out = tmp("run_" + name)
        s = train_ok(tmp(ds), "--model", tmp("exact.json"), "--epochs", "1", "--batch", "8", "--device", "cpu",
                     "--val-split", "train", "-o", out, *extra)
        expect(s["status"] == "complete", f"{name}: {s['status']}")
        if column:
            preds = list(csv.DictReader(open(os.path.join(out, "predictions.csv"))))
            sd = state(out)
            got = torch.stack([f(transmil_forward(sd, b, config(EXACT))[0][-1])
                               for b in bags_of([p["sample"] for p in preds])])
            expect_close(torch.tensor([float(p[column]) for p in preds]), got.detach(), 1e-5, f"{name} vs the port")
        else:
            expect(state(out)["head.linear.weight"].shape[0] == 3, f"{name}: head {state(out)['head.linear.weight'].shape}")


def check_predict_attention():
    """mltool predict on the feature store: the logits are the port's and attention.csv the
    port's class-token attention (each slide's weights sum to 1)."""
    run_dir = tmp("run_fwd")
    if not os.path.exists(os.path.join(run_dir, "model.safetensors")):
        check_forward()
    out = tmp("pred")
    code, _, err = run([mltool, "predict", run_dir, tmp("feat"), "-o", out, "--weights", "final", "--device", "cpu",
                        "--math-threads", "1", "-q"])
    expect(code == 0, f"predict: exit {code}: {err.strip()}")
    sd = state(run_dir)
    cfg = config(SPEC)
    att = csv_rows(os.path.join(out, "attention.csv"))
    slides = sorted({a["slide"] for a in att})
    expect(len(slides) == 36, f"{len(slides)} slides in attention.csv")
    for slide, bag in zip(slides, bags_of(slides)):
        want = transmil_forward(sd, bag, cfg)[1].detach()
        got = torch.tensor([float(a["attention"]) for a in att if a["slide"] == slide])
        expect(got.shape == want.shape, f"{slide}: {got.shape[0]} weights for {want.shape[0]} tiles")
        expect(torch.allclose(got, want, rtol=1e-4, atol=1e-6), f"{slide}: attention {got} vs the port's {want}")


def check_cross_validation():
    """--folds all with bootstrap intervals and the report page."""
    out = tmp("cv_run")
    train_ok(tmp("cv"), "--model", tmp("transmil.json"), "--folds", "all", "-o", out, "--epochs", "2",
             "--batch", "4", "--device", "cpu", "--bootstrap", "200")
    cv = json.load(open(os.path.join(out, "cv.json")))
    iv = cv["intervals"]
    auc = iv["metrics"].get("val_auc", {})
    expect(iv["groups"] == 36 and iv["resamples"] == 200 and auc.get("low", 2) <= auc.get("high", -1),
           f"cv.json intervals {iv}")
    oof = csv_rows(os.path.join(out, "oof_predictions.csv"))
    expect(len(oof) == 36, f"{len(oof)} out-of-fold predictions")
    page = open(os.path.join(out, "report.html")).read()
    expect(all(f"fold-{i}" in page for i in range(3)) and page.count("<svg") >= 4 and f"{auc['low']:.3f}" in page,
           "report.html lacks the folds, the charts or the interval")


if __name__ == "__main__":
    run_checks("transmil", [check_forward, check_training_matches_pytorch, check_modes, check_survival,
                            check_other_tasks, check_predict_attention, check_cross_validation], only, fixtures)
