"""mltool train on survival and regression cohorts packed with `mltool pack --task ... --folds`,
checked against the field's references: lifelines (C-index, log-rank), scikit-survival
(integrated Brier score), torchsurv (Cox partial likelihood and its gradient), scikit-learn and
scipy (regression metrics), and the discrete-time likelihood written here from Zadeh & Schmid's
formula. The cohort is scripts/fixtures/outcome_cohort.py's: 120 patients with one or two slides
whose tile features lean along one direction by a latent z; the hazard is exp(1.6 z) (about
40% censored, times rounded to 0.1 so they tie), the regression target 2 z plus noise.

    train_outcomes_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import json
import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import scipy.stats
import sklearn.metrics
import torch
import torch.nn.functional as F
from lifelines.statistics import logrank_test
from lifelines.utils import concordance_index
from safetensors.numpy import load_file
from sksurv.metrics import integrated_brier_score
from sksurv.util import Surv
from torchsurv.loss.cox import neg_partial_log_likelihood

import report_page
from bootstrap_ref import expect_interval, group_bootstrap
from cli_common import command_json, command_ok, csv_rows, expect, run, run_checks, run_json, tmp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
import outcome_cohort  # noqa: E402
from outcome_cohort import DIMS  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])


# ---------------------------------------------------------------- fixtures

def fixtures():
    X, keys, table, people = outcome_cohort.write(tmp())
    common = ["--key-column", "slide", "--unit", "bag", "--bag-by", "patient", "--folds", "3",
              "--seed", "1"]
    pack("sds", "--task", "survival", "--time-column", "time", "--event-column", "event", *common)
    pack("rds", "--task", "regression", "--target-column", "target", *common)
    write_json(tmp("abmil.json"), {"family": "abmil", "hidden": [16], "attention": 8})
    global FEATURES, PEOPLE
    FEATURES, PEOPLE = torch.from_numpy(X), people
    events = np.mean([p["event"] for p in people.values()])
    return f"{len(people)} patients, {len(table)} slides, {X.shape[0]} tiles, {1 - events:.0%} censored"


def pack(out, *args):
    code, _, err = run([mltool, "pack", tmp("features"), "--labels", tmp("clinical.csv"), "-o", tmp(out), *args])
    expect(code == 0, f"pack {out}: exit {code}: {err.strip()}")


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def train(*args, env=None):
    return command_json(mltool, "train", *args, env=env)


def train_ok(*args):
    return command_ok(mltool, "train", *args)


def bag(pid):
    return FEATURES[PEOPLE[pid]["rows"]]


# ---------------------------------------------------------------- checks

def check_survival_cross_validation():
    """train --folds all, Cox loss, attention MIL on patient bags: every patient once in
    oof_predictions.csv; each fold's val_c_index equals lifelines' on its predictions.csv within
    1e-9; cv.json's mean and sd are numpy's (ddof 1); the out-of-fold C-index >= 0.75; km.png's
    log-rank p equals lifelines' logrank_test on the halves each fold's training median makes;
    a rerun trains nothing and --gather-only gathers the same."""
    out = tmp("cv_cox")
    cv = train_ok(tmp("sds"), "--model", tmp("abmil.json"), "--folds", "all", "-o", out, "--epochs", "15",
                  "--batch", "8", "--lr", "0.005")
    oof = csv_rows(os.path.join(out, "oof_predictions.csv"))
    expect(sorted(r["sample"] for r in oof) == sorted(PEOPLE), "oof_predictions.csv must hold every patient once")
    expect(list(oof[0])[:2] == ["sample", "fold"], f"oof columns {list(oof[0])}")
    for f in range(3):
        preds = csv_rows(os.path.join(out, f"fold-{f}", "predictions.csv"))
        t = [PEOPLE[p["sample"]]["time"] for p in preds]
        e = [PEOPLE[p["sample"]]["event"] for p in preds]
        ref = concordance_index(t, [-float(p["risk"]) for p in preds], e)
        got = cv["per_fold"][f]["validation"]["val_c_index"]
        expect(abs(got - ref) <= 1e-9, f"fold {f}: val_c_index {got}, lifelines {ref}")
    values = [cv["per_fold"][f]["validation"]["val_c_index"] for f in range(3)]
    expect(abs(cv["mean"]["val_c_index"] - np.mean(values)) <= 1e-12 and
           abs(cv["sd"]["val_c_index"] - np.std(values, ddof=1)) <= 1e-12, f"mean/sd {cv['mean']} {cv['sd']}")
    t = np.array([PEOPLE[r["sample"]]["time"] for r in oof])
    e = np.array([PEOPLE[r["sample"]]["event"] for r in oof])
    risk = np.array([float(r["risk"]) for r in oof])
    c = concordance_index(t, -risk, e)
    expect(c >= 0.75, f"out-of-fold C-index {c:.3f} < 0.75")
    medians = [json.load(open(os.path.join(out, f"fold-{f}", "run.json")))["result"]["train_risk_median"]
               for f in range(3)]
    high = np.array([risk[i] > medians[int(r["fold"])] for i, r in enumerate(oof)])
    p = logrank_test(t[high], t[~high], e[high], e[~high]).p_value
    km = cv["pictures"]["km"]
    expect(abs(km["logrank_p"] - p) <= 1e-9 * max(1.0, p) + 1e-15, f"log-rank p {km['logrank_p']} vs lifelines {p}")
    expect(km["high"] == int(high.sum()), f"km halves {km}")
    with open(os.path.join(out, "km.png"), "rb") as f:
        head = f.read(24)
    width = int.from_bytes(head[16:20], "big")
    expect(head[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1024, f"km.png: width {width}")
    expect_km_svg(os.path.join(out, "km.svg"), t, high, p)
    iv = cv["intervals"]
    expect(iv["unit"] == "patient" and iv["groups"] == len(PEOPLE) and iv["resamples"] == 1000,
           f"cv.json intervals {iv}")
    patients = [r["sample"] for r in oof]  # bags by patient: one sample each
    ref = group_bootstrap(patients, lambda i: concordance_index(t[i], -risk[i], e[i]), resamples=2000)
    expect_interval(expect, iv, "val_c_index", ref, c)
    page = report_page.parse(os.path.join(out, "report.html"))
    folds = [r for r in page.rows if r and r[0].startswith("fold-")]
    expect(len(folds) == 3 and any(r[0] == "mean ± sd" for r in page.rows) and page.svgs == 1 and
           [f"fold-{f}/report.html" for f in range(3)] == [l for l in page.links if l.endswith("report.html")] and
           f"{iv['metrics']['val_c_index']['low']:.3f} – {iv['metrics']['val_c_index']['high']:.3f}" in page.all_text,
           f"CV report.html: rows {page.rows}, {page.svgs} SVGs, links {page.links}")
    expect(all(os.path.isfile(os.path.join(out, f"fold-{f}", "report.html")) for f in range(3)), "fold reports")
    code, again, err = run_json([mltool, "train", tmp("sds"), "--model", tmp("abmil.json"), "--folds", "all",
                                 "-o", out, "--epochs", "15", "--batch", "8", "--lr", "0.005", "--json"])
    expect(code == 0 and "0 trained, 3 already finished" in err, f"rerun: exit {code}: {err.strip()}")
    expect(again["mean"] == cv["mean"], "a rerun must gather the same folds")
    gathered = train_ok(tmp("sds"), "--model", tmp("abmil.json"), "--folds", "all", "--gather-only", "-o", out)
    expect(gathered["per_fold"] == cv["per_fold"], "--gather-only gathers the same")
    # predict with the patients' bags (--group-table, as pack --bag-by made them): each fold-0
    # patient's risk is its fold's (within float32 rounding: training evaluates bags padded
    # together, predict one at a time); without the table each slide is a bag, with a warning.
    code, _, err = run([mltool, "predict", os.path.join(out, "fold-0"), tmp("features"), "-o", tmp("pred_cox"),
                        "--weights", "final", "--group-table", tmp("clinical.csv"), "--group-column", "patient"])
    expect(code == 0, f"predict: exit {code}: {err.strip()}")
    predicted = {r["sample"]: float(r["risk"]) for r in csv_rows(tmp("pred_cox", "predictions.csv"))}
    expect(sorted(predicted) == sorted(PEOPLE), "predict --group-table: one row per patient")
    for r in csv_rows(os.path.join(out, "fold-0", "predictions.csv")):
        a, b = predicted[r["sample"]], float(r["risk"])
        expect(abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"{r['sample']}: predict {a}, train {b}")
    code, _, err = run([mltool, "predict", os.path.join(out, "fold-0"), tmp("features"), "-o", tmp("pred_slides")])
    expect(code == 0 and "--group-table CSV --group-column patient" in err, f"exit {code}: {err.strip()}")
    expect(len(csv_rows(tmp("pred_slides", "predictions.csv"))) == 185, "without the table: one bag per slide")


def check_gather_names_unfinished_folds():
    """--gather-only before the folds ran: refused, naming each missing fold."""
    code, _, err = train(tmp("sds"), "--model", tmp("abmil.json"), "--folds", "all", "--gather-only",
                         "-o", tmp("cv_none"))
    expect(code == 2 and "0 (absent), 1 (absent), 2 (absent)" in err, f"exit {code}: {err.strip()}")


class MeanLinear(torch.nn.Module):
    """A bag's mean feature, then a linear layer: the model whose one-step gradient is checked."""

    def __init__(self, outputs):
        super().__init__()
        self.lin = torch.nn.Linear(DIMS, outputs)

    def forward(self, bag):
        return self.lin(bag.mean(0, keepdim=True))


def one_step(name, outputs, *args):
    """MeanLinear trained one SGD step (lr 1, no momentum effect, no decay) on all of fold 0's
    training bags in one batch. Returns the module before, after, and fold 0's val patients."""
    torch.manual_seed(4)
    before = MeanLinear(outputs)
    path = tmp(name + ".pt")
    torch.jit.script(before).save(path)
    out = tmp("run_" + name)
    train_ok(tmp("sds"), "--model", path, "-o", out, "--fold", "0", "--epochs", "1", "--batch", "1000",
             "--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", "--lr", "1", "--schedule",
             "constant", "--device", "cpu", *args)
    after = torch.jit.load(os.path.join(out, "model.script.pt"))
    val = [r["sample"] for r in csv_rows(os.path.join(out, "predictions.csv"))]
    return before, after, val, out


def expect_gradient(before, after, reference, what):
    got = {k: (before.state_dict()[k] - v).double() for k, v in after.state_dict().items()}
    worst = max(float((got[k] - reference[k]).abs().max()) for k in got)
    expect(worst <= 1e-6, f"{what}: the step's gradient differs from the reference by {worst:g}")


def check_cox_gradient_is_torchsurv():
    """One step of --loss cox over a whole training split (times tied): the gradient mltool
    applied equals torchsurv's neg_partial_log_likelihood (Breslow, reduction sum, divided by
    the events) within 1e-6, and the step's logged loss equals it."""
    before, after, val, out = one_step("cox_step", 1, "--loss", "cox", "--log-every", "1")
    train = sorted(set(PEOPLE) - set(val))
    ref = MeanLinear(1).double()
    ref.load_state_dict({k: v.double() for k, v in before.state_dict().items()})
    risk = torch.cat([ref(bag(p).double()) for p in train]).squeeze(1)
    time = torch.tensor([PEOPLE[p]["time"] for p in train], dtype=torch.float64)
    event = torch.tensor([PEOPLE[p]["event"] for p in train], dtype=torch.bool)
    expect(len(set(time[event].tolist())) < int(event.sum()), "the split must have tied event times")
    loss = neg_partial_log_likelihood(risk, event, time, ties_method="breslow", reduction="sum") / event.sum()
    loss.backward()
    expect_gradient(before, after, {k: p.grad for k, p in ref.named_parameters()}, "cox")
    logged = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    step = next(l for l in logged if l["event"] == "step")
    expect(abs(step["loss"] - float(loss)) <= 1e-6, f"logged loss {step['loss']} vs torchsurv {float(loss)}")
    result = json.load(open(os.path.join(out, "run.json")))["result"]
    expect(result["steps_without_events"] == 0, f"result {result}")


def nll_reference(logits, interval, event):
    """Zadeh & Schmid's discrete-time likelihood, written from the formula: an event in interval
    j: -log h_j - sum_{k<j} log(1 - h_k); censored in j: -sum_{k<=j} log(1 - h_k); h = sigmoid."""
    h = torch.sigmoid(logits)
    terms = []
    for i in range(len(interval)):
        j = int(interval[i])
        survived = torch.log(1 - h[i, :j]).sum()
        terms.append(-(survived + torch.log(h[i, j])) if event[i] else -(survived + torch.log(1 - h[i, j])))
    return torch.stack(terms).mean()


def check_nll_gradient_and_brier():
    """--loss nll --bins 4: the cuts are numpy's quartiles of the training split's event times;
    one step's gradient equals the paper's likelihood's within 1e-6; val_ibs equals
    scikit-survival's integrated_brier_score on predictions.csv's survival columns, val_c_index
    lifelines'."""
    before, after, val, out = one_step("nll_step", 4, "--loss", "nll", "--bins", "4")
    run_doc = json.load(open(os.path.join(out, "run.json")))
    train = sorted(set(PEOPLE) - set(val))
    t_train = np.array([PEOPLE[p]["time"] for p in train], dtype=np.float32).astype(np.float64)
    e_train = np.array([PEOPLE[p]["event"] for p in train], dtype=bool)
    cuts = np.quantile(t_train[e_train], [0.25, 0.5, 0.75])
    expect(np.allclose(run_doc["task"]["cuts"], cuts, rtol=0, atol=1e-12), f"cuts {run_doc['task']['cuts']} vs {cuts}")
    ref = MeanLinear(4).double()
    ref.load_state_dict({k: v.double() for k, v in before.state_dict().items()})
    logits = torch.cat([ref(bag(p).double()) for p in train])
    interval = np.searchsorted(cuts, t_train, side="right")
    nll_reference(logits, interval, e_train).backward()
    expect_gradient(before, after, {k: p.grad for k, p in ref.named_parameters()}, "nll")

    preds = csv_rows(os.path.join(out, "predictions.csv"))
    # The records hold float32 times: mltool's are those, exactly.
    t = np.array([p["time"] for p in preds], dtype=np.float32).astype(np.float64)
    e = np.array([float(p["event"]) == 1 for p in preds])
    columns = [c for c in preds[0] if c.startswith("survival_")]
    named = np.array([float(c[len("survival_"):]) for c in columns])
    expect(np.allclose(named, cuts, rtol=1e-8), f"survival columns {columns}")
    edges = np.array(run_doc["task"]["cuts"])  # exact; the column names are rounded
    curves = np.array([[float(p[c]) for c in columns] for p in preds])
    times = np.unique(t)[:-1]
    ended = np.searchsorted(edges, times, side="right")
    estimate = np.array([[1.0 if k == 0 else row[k - 1] for k in ended] for row in curves])
    ibs = integrated_brier_score(Surv.from_arrays(e_train, t_train), Surv.from_arrays(e, t), estimate, times)
    v = run_doc["result"]["validation"]
    expect(abs(v["val_ibs"] - ibs) <= 1e-6, f"val_ibs {v['val_ibs']} vs scikit-survival {ibs}")
    c = concordance_index(t, [-float(p["risk"]) for p in preds], e)
    expect(abs(v["val_c_index"] - c) <= 1e-9, f"val_c_index {v['val_c_index']} vs lifelines {c}")


def check_regression_cross_validation():
    """--task regression, --folds all with attention MIL: out-of-fold R² >= 0.8; each fold's
    val_mae, val_rmse, val_r2, val_pearson, val_spearman equal scikit-learn's and scipy's on its
    predictions.csv within 1e-9; scatter.png drawn."""
    out = tmp("cv_reg")
    cv = train_ok(tmp("rds"), "--model", tmp("abmil.json"), "--folds", "all", "-o", out, "--epochs", "20",
                  "--batch", "8", "--lr", "0.005", "--monitor", "val_r2")
    for f in range(3):
        preds = csv_rows(os.path.join(out, f"fold-{f}", "predictions.csv"))
        # The values as mltool holds them: float32. predictions.csv writes them with %.9g, which
        # float32 reads back exactly but double does not where zeros were dropped ("1.87" is
        # not float32(1.87)); compared in double, such a target moved the MAE by 1e-9.
        y = np.array([float(p["target"]) for p in preds], np.float32).astype(np.float64)
        p = np.array([float(p["prediction"]) for p in preds], np.float32).astype(np.float64)
        ref = {"val_mae": sklearn.metrics.mean_absolute_error(y, p),
               "val_rmse": np.sqrt(sklearn.metrics.mean_squared_error(y, p)),
               "val_r2": sklearn.metrics.r2_score(y, p),
               "val_pearson": scipy.stats.pearsonr(y, p)[0],
               "val_spearman": scipy.stats.spearmanr(y, p)[0]}
        got = cv["per_fold"][f]["validation"]
        for k, r in ref.items():
            expect(abs(got[k] - r) <= 1e-9, f"fold {f}: {k} {got[k]} vs {r}")
    oof = csv_rows(os.path.join(out, "oof_predictions.csv"))
    r2 = sklearn.metrics.r2_score([float(r["target"]) for r in oof], [float(r["prediction"]) for r in oof])
    expect(r2 >= 0.8, f"out-of-fold R² {r2:.3f} < 0.8")
    expect(cv["pictures"]["scatter"]["file"] == "scatter.png" and
           os.path.getsize(os.path.join(out, "scatter.png")) > 0, f"pictures {cv['pictures']}")
    y = np.array([x["target"] for x in oof], dtype=np.float32).astype(np.float64)
    pred = np.array([x["prediction"] for x in oof], dtype=np.float32).astype(np.float64)
    ref = group_bootstrap([x["sample"] for x in oof], lambda i: sklearn.metrics.r2_score(y[i], pred[i]))
    expect_interval(expect, cv["intervals"], "val_r2", ref, sklearn.metrics.r2_score(y, pred))
    root = svg_root(os.path.join(out, "scatter.svg"), (1200, 960))
    points = [g for g in root.iter(SVG + "g") if g.get("class") == "points"]
    expect(len(points) == 1 and len(list(points[0].iter(SVG + "circle"))) == len(oof),
           f"scatter.svg: one circle per out-of-fold sample ({len(oof)})")
    r = scipy.stats.pearsonr([float(x["target"]) for x in oof], [float(x["prediction"]) for x in oof])[0]
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    expect(f"Pearson r = {r:.3f}; n = {len(oof)}; dashed: predicted = true" in texts,
           f"scatter.svg caption, scipy's r {r:.3f}: {texts[-1:]}")


SVG = "{http://www.w3.org/2000/svg}"


def svg_root(path, size):
    """The chart's SVG parsed by ElementTree, its size and font checked."""
    root = ET.parse(path).getroot()
    expect(root.tag == SVG + "svg" and (int(root.get("width")), int(root.get("height"))) == size and
           "DejaVu Sans" in root.get("font-family", ""), f"{path}: {root.attrib}")
    return root


def expect_km_svg(path, t, high, p):
    """km.svg: the caption in sentence case with lifelines' p, and the numbers at risk under
    each time tick counted here from the halves."""
    root = svg_root(path, (1200, 960))
    texts = [x.text or "" for x in root.iter(SVG + "text")]
    caption = [x for x in texts if x.startswith("Log-rank p = ")]
    shown = f"Log-rank p = {p:.3g}; " if p >= 1e-4 else f"Log-rank p = {p:.1e}; "
    expect(len(caption) == 1 and caption[0].startswith(shown) and
           caption[0].endswith("high: risk above its fold’s training median") and
           f"n = {len(t)} (low {int((~high).sum())}, high {int(high.sum())})" in caption[0],
           f"km.svg caption {caption}, lifelines' p {p}")
    axes = [g for g in root.iter(SVG + "g") if g.get("class") == "axes"][0]
    ticks = [float(x.text) for x in axes.iter(SVG + "text")
             if x.get("text-anchor") == "middle" and x.text.replace(".", "", 1).isdigit()]
    expect(len(ticks) >= 3 and ticks[0] == 0, f"time ticks {ticks}")
    for name, half in (("low", ~high), ("high", high)):
        group = [g for g in root.iter(SVG + "g") if g.get("class") == "at-risk-" + name][0]
        got = [int(x.text) for x in group.iter(SVG + "text") if x.text.isdigit()]
        want = [int((t[half] >= x).sum()) for x in ticks]
        expect(got == want, f"at risk, {name}: {got}, counted {want} at {ticks}")


def check_cox_micro_batches():
    """--micro-batches 3 with the Cox loss (risk sets spanning the parts) ends within 1e-5 of
    plain training's weights (SGD, as train_test's bag check: AdamW's first steps turn the
    float32 rounding of attention biases' near-zero gradients into visible differences)."""
    args = ["--model", tmp("abmil.json"), "--fold", "1", "--epochs", "3", "--batch", "16", "--device", "cpu",
            "--math-threads", "1", "--optimizer", "sgd", "--lr", "0.05"]
    train_ok(tmp("sds"), *args, "-o", tmp("run_cox_mb1"))
    train_ok(tmp("sds"), *args, "--micro-batches", "3", "-o", tmp("run_cox_mb3"))
    a = load_file(tmp("run_cox_mb1", "model.safetensors"))
    b = load_file(tmp("run_cox_mb3", "model.safetensors"))
    worst = max(float(np.abs(a[k] - b[k]).max() / max(np.abs(a[k]).max(), 1e-30)) for k in a)
    expect(worst <= 1e-5, f"micro-batched Cox differs from plain by {worst:g} (relative)")


def check_data_parallel():
    """--nproc 2 (two Gloo ranks) ends within 1e-5 of one process: Cox, whose risk sets are the
    global batch (outputs gathered across ranks; batch 79 of 80 leaves rank 1 idle in each
    epoch's last step), also with --micro-batches 2; and regression's per-sample loss."""
    def close(a, b, what):
        ta, tb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
        worst = max(float(np.abs(ta[k] - tb[k]).max() / max(np.abs(ta[k]).max(), 1e-30)) for k in ta)
        expect(worst <= 1e-5, f"{what}: --nproc 2 differs from one process by {worst:g} (relative)")
    for ds, batch, extra in (("sds", "79", []), ("sds", "16", ["--micro-batches", "2"]), ("rds", "16", [])):
        args = [tmp(ds), "--model", tmp("abmil.json"), "--fold", "1", "--epochs", "2", "--batch", batch,
                "--device", "cpu", "--math-threads", "1", "--optimizer", "sgd", "--lr", "0.05"]
        one, two = tmp(f"run_dp1_{ds}_{batch}"), tmp(f"run_dp2_{ds}_{batch}")
        train_ok(*args, "-o", one)
        train_ok(*args, *extra, "--nproc", "2", "-o", two)
        close(one, two, f"{ds} --batch {batch} {' '.join(extra)}")


def check_refusals():
    """Options of another task, a fold the dataset has not, a monitor the task does not compute."""
    cases = [(["--fold", "0", "--loss", "cox"], "rds", "is a regression dataset"),
             (["--fold", "3"], "sds", "has folds 0 to 2"),
             (["--fold", "0", "--monitor", "val_auc"], "sds", "is not a metric of survival"),
             (["--fold", "0", "--monitor", "val_ibs"], "sds", "needs --loss nll"),
             (["--fold", "0", "--class-weights", "balanced"], "rds", "is a regression dataset"),
             (["--fold", "0", "--gather-only"], "sds", "--gather-only needs --folds all")]
    cases += [(["--fold", "auto"], "sds", "SLURM_ARRAY_TASK_ID"),
              (["--fold", "auto", "env", "SLURM_ARRAY_TASK_ID", "3"], "sds", "has folds 0 to 2")]
    for extra, ds, message in cases:
        env = dict(zip(extra[3::2], extra[4::2])) if "env" in extra else None
        extra = extra[:2] if env else extra
        code, _, err = train(tmp(ds), "--model", tmp("abmil.json"), "-o", tmp("run_refused"), *extra,
                             env=env)
        expect(code == 1 and message in err, f"{extra} {env}: exit {code}: {err.strip()}")


def check_fold_auto():
    """--fold auto in a Slurm array task 2 (or a Kubernetes completion index 2) trains fold 2:
    the same weights as --fold 2."""
    args = [tmp("sds"), "--model", tmp("abmil.json"), "--epochs", "1", "--batch", "16",
            "--device", "cpu", "--math-threads", "1"]
    train_ok(*args, "--fold", "2", "-o", tmp("run_fold2"))
    for env in ({"SLURM_ARRAY_TASK_ID": "2"}, {"JOB_COMPLETION_INDEX": "2"}):
        out = tmp(f"run_fold_auto_{len(env)}_{list(env)[0]}")
        code, _, err = train(*args, "--fold", "auto", "-o", out, env=env)
        expect(code == 0, f"--fold auto with {env}: exit {code}: {err.strip()}")
        a = load_file(tmp("run_fold2", "model.safetensors"))
        b = load_file(os.path.join(out, "model.safetensors"))
        expect(all(np.array_equal(a[k], b[k]) for k in a), f"--fold auto with {env} is not fold 2")
        with open(os.path.join(out, "run.json")) as f:
            fold = json.load(f)["options"].get("fold")
        expect(fold == 2, f"run.json records fold {fold}, not 2")


run_checks("train on outcomes", [f for n, f in list(globals().items()) if n.startswith("check_")], only,
           fixtures)
