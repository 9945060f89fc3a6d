"""Multilabel counts and reports on a made-up 60-patient panel with a rare label: KRAS, BRAF,
MSI and NTRK, NTRK positive in 3 patients only, so some of the 5 folds cannot score it (issue
51). Every label of --label-columns is reported in the user's order, per fold (a fold that
cannot score a label says so, and val_auc_mean names what it averages), out of fold with its
interval and ROC curve, with positives, negatives and missing per split and per fold in pack's
summary, dataset.json, inspect (and --json) and the reports; numbers against scikit-learn's
roc_auc_score.

    multilabel_report_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import os
import re
import sys

import numpy as np
import sklearn.metrics

from cli_common import command_ok, csv_rows, expect, run, run_checks, tmp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
import outcome_cohort  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
LABELS = ["KRAS", "BRAF", "MSI", "NTRK"]
FOLDS = 5
ARRAY_UNSET = {"SLURM_ARRAY_TASK_ID": "", "JOB_COMPLETION_INDEX": ""}


# ---------------------------------------------------------------- fixtures

def panel(people, seed=11):
    """{patient: [KRAS, BRAF, MSI, NTRK]} (None: missing): KRAS and BRAF follow the latent z,
    MSI is noise, NTRK is 1 for exactly 3 patients (the highest z among the first 40) and 0
    for the rest; about one outcome in eight missing, NTRK's positives never."""
    rng = np.random.default_rng(seed)
    ids = sorted(people)
    z = {p: people[p]["target"] / 2 for p in ids}
    ntrk = set(sorted(ids[:40], key=lambda p: -z[p])[:3])
    out = {}
    for p in ids:
        values = [int(z[p] + 0.5 * rng.standard_normal() > 0), int(-z[p] + 0.5 * rng.standard_normal() > 0.3),
                  int(rng.standard_normal() > 0), int(p in ntrk)]
        out[p] = [None if (k < 3 or p not in ntrk) and rng.random() < 1 / 8 else v for k, v in enumerate(values)]
    return out


def fixtures():
    _, _, table, people = outcome_cohort.write(tmp(), seed=5, patients=60)
    global OUTCOMES, PACK_ERR
    OUTCOMES = panel(people)
    with open(tmp("panel.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["slide", "patient", *LABELS])
        for sid, pid, *_ in table:
            w.writerow([sid, pid, *("" if v is None else v for v in OUTCOMES[pid])])
    code, _, PACK_ERR = run([mltool, "pack", tmp("features"), "--labels", tmp("panel.csv"), "-o", tmp("ds"),
                             "--task", "multilabel", "--label-columns", ",".join(LABELS), "--key-column", "slide",
                             "--unit", "bag", "--bag-by", "patient", "--folds", str(FOLDS), "--seed", "1"])
    expect(code == 0, f"pack: exit {code}: {PACK_ERR.strip()}")
    with open(tmp("abmil.json"), "w") as f:
        json.dump({"family": "abmil", "hidden": [16], "attention": 8}, f)
    ntrk = sum(o[3] == 1 for o in OUTCOMES.values())
    return f"{len(people)} patients, {len(table)} slides, NTRK positive in {ntrk}"


def counts(patients):
    """[{label, positives, negatives, missing}] of `patients`, in LABELS' order."""
    out = []
    for k, name in enumerate(LABELS):
        values = [OUTCOMES[p][k] for p in patients]
        out.append({"label": name, "positives": sum(v == 1 for v in values),
                    "negatives": sum(v == 0 for v in values), "missing": sum(v is None for v in values)})
    return out


def split_patients():
    d = json.load(open(tmp("ds", "dataset.json")))
    by_split = {}
    for group, split in d["group_split"].items():
        by_split.setdefault(split, []).append(group)
    return d, by_split


def auc_or_none(rows, name):
    rows = [r for r in rows if r[f"label_{name}"] != ""]
    y = [int(r[f"label_{name}"]) for r in rows]
    if len(set(y)) < 2:
        return None
    return sklearn.metrics.roc_auc_score(y, [float(r[f"prob_{name}"]) for r in rows])


# ---------------------------------------------------------------- checks

def check_pack_counts():
    """dataset.json: every split's label_counts, per label in --label-columns' order, equal
    the panel's counts of its patients; pack's log shows them per split and for all records;
    inspect shows them (text) and gives the same in --json."""
    d, by_split = split_patients()
    expect(sorted(by_split) == sorted(d["splits"]), f"group_split's splits {sorted(by_split)}")
    for split, doc in d["splits"].items():
        want = counts(by_split[split])
        expect(doc.get("label_counts") == want, f"{split}: label_counts {doc.get('label_counts')}, want {want}")
    total = counts(list(OUTCOMES))
    ntrk = total[3]
    expect(ntrk["positives"] == 3, f"NTRK positives {ntrk}")
    line = "all records: " + ", ".join(f"{c['label']} {c['positives']}+ {c['negatives']}− {c['missing']} missing"
                                       for c in total)
    expect(line in PACK_ERR, f"pack's log lacks '{line}': {PACK_ERR.strip()}")
    code, out, err = run([mltool, "inspect", tmp("ds")])
    expect(code == 0, f"inspect: exit {code}: {err.strip()}")
    want = "  fold-0: " + " ".join(f"{c['label']} {c['positives']}/{c['negatives']}/{c['missing']}"
                                   for c in counts(by_split["fold-0"]))
    expect(want in out and "no label or outcome figures" not in out, f"inspect lacks '{want}': {out}")
    code, out, err = run([mltool, "inspect", tmp("ds"), "--json", "-q"])
    expect(code == 0, f"inspect --json: exit {code}: {err.strip()}")
    for g in json.loads(out)["groups"]:
        expect(g["label_counts"] == counts(by_split[g["name"]]), f"inspect --json {g['name']}: {g['label_counts']}")


def check_cross_validation():
    """train --folds all: each fold reports every label (null where its validation split holds
    one value only, which is where scikit-learn refuses), its counts, and val_auc_mean_labels
    naming the labels val_auc_mean averages; cv.json's mean/sd cover the folds that score a
    label (scored_folds counts them), per_label gives the out-of-fold counts and AUC
    (scikit-learn, 1e-9) with its interval; the log and the report list every label in order,
    the report's per-label ROC chart exists, and no Charts heading is empty."""
    out = tmp("cv")
    code, cv, err = run([mltool, "train", tmp("ds"), "--model", tmp("abmil.json"), "--folds", "all", "-o", out,
                         "--epochs", "4", "--batch", "8", "--lr", "0.005", "--device", "cpu", "--bootstrap", "200",
                         "--json"], env=ARRAY_UNSET)
    expect(code == 0, f"train --folds all: exit {code}: {err.strip()}")
    cv = json.loads(cv)
    oof = csv_rows(os.path.join(out, "oof_predictions.csv"))
    per_fold_mean = {n: [] for n in LABELS}
    for f in range(FOLDS):
        rows = [r for r in oof if int(r["fold"]) == f]
        val = cv["per_fold"][f]["validation"]
        scored = []
        for n in LABELS:
            ref = auc_or_none(rows, n)
            expect(f"val_auc_{n}" in val, f"fold {f} lacks val_auc_{n}")
            got = val[f"val_auc_{n}"]
            expect((got is None) == (ref is None) and (ref is None or abs(got - ref) <= 1e-9),
                   f"fold {f}: val_auc_{n} {got}, sklearn {ref}")
            if ref is not None:
                scored.append(n)
                per_fold_mean[n].append(ref)
        expect(val["val_auc_mean_labels"] == ",".join(scored), f"fold {f}: averages {val['val_auc_mean_labels']}")
        expect(abs(val["val_auc_mean"] - np.mean([val[f"val_auc_{n}"] for n in scored])) <= 1e-12,
               f"fold {f}: val_auc_mean {val['val_auc_mean']}")
        want = counts([r["sample"] for r in rows])
        got = [{k: c[k] for k in ("label", "positives", "negatives", "missing")} for c in cv["per_fold"][f]["label_counts"]]
        expect(got == want, f"fold {f}: label_counts {got}, want {want}")
    ntrk_folds = len(per_fold_mean["NTRK"])
    expect(0 < ntrk_folds < FOLDS, f"NTRK scored in {ntrk_folds} folds: the panel should leave some without")
    for n in LABELS:
        xs = per_fold_mean[n]
        expect(abs(cv["mean"][f"val_auc_{n}"] - np.mean(xs)) <= 1e-9, f"mean val_auc_{n} {cv['mean'].get(f'val_auc_{n}')}")
        if len(xs) < FOLDS:
            expect(cv["scored_folds"][f"val_auc_{n}"] == len(xs), f"scored_folds {cv['scored_folds']}")
        if len(xs) > 1:
            expect(abs(cv["sd"][f"val_auc_{n}"] - np.std(xs, ddof=1)) <= 1e-9, f"sd val_auc_{n}")
    expect([c["label"] for c in cv["per_label"]] == LABELS, f"per_label order {cv['per_label']}")
    for c in cv["per_label"]:
        n = c["label"]
        ref = auc_or_none(oof, n)
        expect(abs(c["auc"] - ref) <= 1e-9, f"{n}: out-of-fold AUC {c['auc']}, sklearn {ref}")
        expect({k: c[k] for k in ("label", "positives", "negatives", "missing")} == counts(list(OUTCOMES))[LABELS.index(n)],
               f"{n}: out-of-fold counts {c}")
        # Bags by patient: each sample its own group. A value of the label in fewer than 5
        # patients: no interval, and run.json's intervals say why (docs/train.md).
        m = cv["intervals"]["metrics"][f"val_auc_{n}"]
        rare = min(c["positives"], c["negatives"])
        if rare < 5:
            kind = "positive" if c["positives"] == rare else "negative"
            why = f"'{kind} {n}' occurs in {rare} patient{'' if rare == 1 else 's'}: an interval needs each in at least 5"
            expect(c["auc_low"] is None and m["low"] is None and m.get("not_estimable") == why and
                   c.get("auc_not_estimable") == why,
                   f"{n}: {rare} {kind} patients, interval {m}, expected not estimable: {why}")
        else:
            expect(c["auc_low"] <= c["auc"] <= c["auc_high"] and "not_estimable" not in m,
                   f"{n}: interval {c['auc_low']}–{c['auc_high']} vs {c['auc']}")
        expect(abs(cv["intervals"]["metrics"][f"val_auc_{n}"]["estimate"] - ref) <= 1e-9, f"{n}: interval estimate")
        expect(c["folds_scored"] == len(per_fold_mean[n]), f"{n}: folds_scored {c['folds_scored']}")
    expect(set(cv["pictures"]["roc"]["auc"]) == set(LABELS) and os.path.exists(os.path.join(out, "roc.png")),
           f"pictures {cv['pictures']}")
    summary = [l for l in err.splitlines() if "folds (" in l]
    expect(summary, f"no summary line: {err.strip()}")
    positions = [summary[-1].find(f"val_auc_{n} ") for n in LABELS]
    expect(all(p >= 0 for p in positions) and positions == sorted(positions), f"log order: {summary[-1]}")
    expect(f"val_auc_NTRK " in summary[-1] and f"({ntrk_folds} of {FOLDS} folds)" in summary[-1],
           f"log: {summary[-1]}")
    html = open(os.path.join(out, "report.html")).read()
    head = html[html.index('<table class="folds">'):]
    head = head[:head.index("</tr>")]
    positions = [head.find(f"val_auc_{n}<") for n in LABELS]
    expect(all(p >= 0 for p in positions) and positions == sorted(positions), f"per-fold columns: {head}")
    expect("not scorable" in html and '<h2>Per label</h2>' in html and 'id="chart-roc"' in html, "cv report")
    expect(not re.search(r"<h2>Charts</h2>\s*<h2>", html), "an empty Charts heading")
    labels = html[html.index('<table class="labels">'):]
    labels = labels[:labels.index("</table>")]
    expect(any("auc_not_estimable" in c for c in cv["per_label"]), "no label too rare for an interval")
    for c in cv["per_label"]:
        if "auc_not_estimable" in c:  # the label's row gives the reason, escaped as the page does
            why = c["auc_not_estimable"].replace("&", "&amp;").replace("'", "&#39;")
            expect(f"not estimable: {why}" in labels, f"{c['label']}: the per-label table lacks {why!r}")
    fold = open(os.path.join(out, "fold-0", "report.html")).read()
    expect("Per label (validation split)" in fold and 'id="chart-roc"' in fold, "fold-0's report")


def check_gather_only():
    """--gather-only over 5 finished folds says it gathered them, not "0 trained, 0 already
    finished"."""
    code, _, err = run([mltool, "train", tmp("ds"), "--model", tmp("abmil.json"), "--folds", "all", "-o",
                        tmp("cv"), "--gather-only", "--device", "cpu"], env=ARRAY_UNSET)
    expect(code == 0, f"--gather-only: exit {code}: {err.strip()}")
    expect(f"{FOLDS} folds (gathered, --gather-only)" in err and "0 trained" not in err, f"log: {err.strip()}")


def check_predict_report():
    """predict --label BRAF: the report's per-slide table has every label's mean probability,
    in order, each the mean of predictions.csv's rows of the slide."""
    out = tmp("pred")
    code, _, err = run([mltool, "predict", tmp("cv", "fold-0"), tmp("features"), "-o", out, "--label", "BRAF",
                        "--device", "cpu", "-q"])
    expect(code == 0, f"predict: exit {code}: {err.strip()}")
    html = open(os.path.join(out, "report.html")).read()
    table = html[html.index('<table class="slides">'):]
    table = table[:table.index("</table>")]
    positions = [table.find(f"mean prob_{n}") for n in LABELS]
    expect(all(p >= 0 for p in positions) and positions == sorted(positions), f"slide columns: {table[:400]}")
    preds = csv_rows(os.path.join(out, "predictions.csv"))
    slide = preds[0]["slide"]
    mine = [r for r in preds if r["slide"] == slide]
    cells = [f"{np.mean([float(r[f'prob_{n}']) for r in mine]):.4g}" for n in LABELS]
    expect(f"<td>{slide}</td><td>{len(mine)}</td><td>" + "</td><td>".join(cells) + "</td>" in table,
           f"{slide}: want {cells} in {table[:800]}")


def check_predict_group_table():
    """predict --group-table (one bag per patient): the log and --json count the slides read
    (86), not the groups (60), and say how many groups they made."""
    code, out, err = run([mltool, "predict", tmp("cv", "fold-0"), tmp("features"), "-o", tmp("pred_groups"),
                          "--group-table", tmp("panel.csv"), "--group-column", "patient", "--device", "cpu",
                          "--json"])
    expect(code == 0, f"predict --group-table: exit {code}: {err.strip()}")
    slides = len({r["slide"] for r in csv_rows(tmp("panel.csv"))})
    summary = json.loads(out)
    expect(summary["slides"] == slides and summary["groups"] == len(OUTCOMES), f"--json {summary}")
    expect(f"of {slides} slides in {len(OUTCOMES)} groups" in err, f"log: {err.strip()}")


def check_run_report():
    """A fold's report.html: the best epoch's metrics (metrics.jsonl's line of run.json's
    best_epoch, the weights predict uses) said to be so, before the final weights' ones; no
    option that does not apply (momentum with AdamW, bins without nll, huber_delta without
    huber), though run.json records them; a tile-unit run's metrics headed tile-level."""
    d = tmp("cv", "fold-1")
    run_doc = json.load(open(os.path.join(d, "run.json")))
    best = run_doc["result"]["best_epoch"]
    lines = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    line = [l for l in lines if l.get("event") == "epoch" and l["epoch"] == best][0]
    html = open(os.path.join(d, "report.html")).read()
    section = html[html.index("<h2>Validation metrics, best epoch</h2>"):html.index("<h2>Validation metrics, final weights</h2>")]
    expect(f"Epoch {best} of" in section and "best.safetensors" in section, f"best-epoch section: {section[:300]}")
    expect(f'<td>val_loss</td><td class="n">{line["val_loss"]:.4g}</td>' in section, f"best val_loss: {section}")
    options = html[html.index("<h2>Options</h2>"):html.index("<h2>Validation")]
    expect(all(k in run_doc["options"] for k in ("momentum", "bins", "huber_delta")), f"run.json options {run_doc['options']}")
    for name in ("momentum", "bins", "huber_delta"):
        expect(f"<td>{name}</td>" not in options, f"report lists {name}: {options}")
    expect("<td>optimizer</td>" in options, "the optimizer row")
    code, _, err = run([mltool, "pack", tmp("features"), "--labels", tmp("panel.csv"), "-o", tmp("ds_tile"),
                        "--task", "multilabel", "--label-columns", ",".join(LABELS), "--key-column", "slide",
                        "--unit", "tile", "--group-by", "patient", "--seed", "1"])
    expect(code == 0, f"pack --unit tile: exit {code}: {err.strip()}")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [16]}, f)
    command_ok(mltool, "train", tmp("ds_tile"), "--model", tmp("mlp.json"), "-o", tmp("run_tile"), "--epochs", "1",
               "--device", "cpu")
    html = open(tmp("run_tile", "report.html")).read()
    expect("<h2>Validation metrics, final weights (tile-level)</h2>" in html, "tile-level heading")


if __name__ == "__main__":
    run_checks("multilabel reports", [check_pack_counts, check_cross_validation, check_gather_only,
                                      check_predict_report, check_predict_group_table, check_run_report],
               only, fixtures)
