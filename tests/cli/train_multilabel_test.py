"""mltool pack --task multilabel, train and predict on several binary outcomes per patient (a
mutation panel), checked against scikit-learn. The cohort is scripts/fixtures/outcome_cohort.py's
(120 patients, one or two slides each, tile features leaning along one direction by a latent
z); three outcomes per patient: KRAS (z + noise > 0), BRAF (-z + noise > 0.3), MSI (noise), each
missing for about one patient in six.

    train_multilabel_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import math
import os
import sys

import numpy as np
import sklearn.metrics
from safetensors.numpy import load_file

from cli_common import command_json, command_ok, csv_rows, expect, run, run_checks, tmp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
import outcome_cohort  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
LABELS = ["KRAS", "BRAF", "MSI"]
ARRAY_UNSET = {"SLURM_ARRAY_TASK_ID": "", "JOB_COMPLETION_INDEX": ""}


# ---------------------------------------------------------------- fixtures

def fixtures():
    X, keys, table, people = outcome_cohort.write(tmp())
    rng = np.random.default_rng(5)
    global OUTCOMES
    OUTCOMES = {}
    for pid in sorted(people):
        z = people[pid]["target"] / 2
        values = [int(z + 0.5 * rng.standard_normal() > 0), int(-z + 0.5 * rng.standard_normal() > 0.3),
                  int(rng.standard_normal() > 0)]
        OUTCOMES[pid] = [None if rng.random() < 1 / 6 else v for v in values]
    with open(tmp("panel.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["slide", "patient", *LABELS])
        for sid, pid, *_ in table:
            w.writerow([sid, pid, *("" if v is None else v for v in OUTCOMES[pid])])
    pack("mds", "--unit", "bag", "--bag-by", "patient")
    pack("mds_tile", "--unit", "tile")
    with open(tmp("abmil.json"), "w") as f:
        json.dump({"family": "abmil", "hidden": [16], "attention": 8}, f)
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [16]}, f)
    missing = sum(v is None for o in OUTCOMES.values() for v in o)
    return f"{len(people)} patients, {len(table)} slides, {missing} missing outcomes"


def pack(out, *args):
    code, _, err = run([mltool, "pack", tmp("features"), "--labels", tmp("panel.csv"), "-o", tmp(out),
                        "--task", "multilabel", "--label-columns", ",".join(LABELS), "--key-column", "slide",
                        "--folds", "3", "--seed", "1", *args])
    expect(code == 0, f"pack {out}: exit {code}: {err.strip()}")


def train(*args):
    return command_json(mltool, "train", *args)


def train_ok(*args):
    return command_ok(mltool, "train", *args)


def close(a, b, what):
    ta, tb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    worst = max(float(np.abs(ta[k] - tb[k]).max() / max(np.abs(ta[k]).max(), 1e-30)) for k in ta)
    expect(worst <= 1e-5, f"{what} differs from plain training by {worst:g} (relative)")


# ---------------------------------------------------------------- checks

def check_pack():
    """dataset.json names the task, the label columns and the records' float list and mask;
    inspect --deep reads every record; --label-columns is refused for another task."""
    d = json.load(open(tmp("mds", "dataset.json")))
    expect(d["task"] == "multilabel" and d["labels"]["names"] == LABELS and
           d["outcome"] == {"label_columns": LABELS} and d["folds"]["stratify"] == "first_label",
           f"dataset.json {d['task']} {d['labels']} {d['outcome']} {d['folds']}")
    expect(d["record_features"]["labels"] == "float_list" and d["record_features"]["label_mask"] == "int64_list",
           f"record_features {d['record_features']}")
    expect(sum(s["records"] for s in d["splits"].values()) == len(OUTCOMES),
           "a missing outcome masks it, it does not drop the patient")
    code, _, err = run([mltool, "inspect", tmp("mds"), "--deep"])
    expect(code == 0, f"inspect --deep: exit {code}: {err.strip()}")
    code, _, err = run([mltool, "pack", tmp("features"), "--labels", tmp("panel.csv"), "-o", tmp("refused"),
                        "--key-column", "slide", "--label-columns", "KRAS"])
    expect(code != 0 and "--task multilabel" in err, f"--label-columns without the task: {code} {err.strip()}")


def check_cross_validation():
    """train --folds all --monitor val_auc_mean: oof_predictions.csv holds every patient once with
    label_L (empty where missing) and prob_L per label; each fold's val_auc_L equals
    scikit-learn's roc_auc_score on its rows of oof_predictions.csv (masked rows left out)
    within 1e-9, val_auc_mean their mean; KRAS is learned (out-of-fold AUC >= 0.7)."""
    out = tmp("cv")
    cv = train_ok(tmp("mds"), "--model", tmp("abmil.json"), "--folds", "all", "-o", out, "--epochs", "12",
                  "--batch", "8", "--lr", "0.005", "--monitor", "val_auc_mean")
    oof = csv_rows(os.path.join(out, "oof_predictions.csv"))
    expect(sorted(r["sample"] for r in oof) == sorted(OUTCOMES), "oof_predictions.csv must hold every patient once")
    expect(list(oof[0]) == ["sample", "fold", "record", *[f"label_{n}" for n in LABELS], *[f"prob_{n}" for n in LABELS]],
           f"oof columns {list(oof[0])}")
    for r in oof:
        want = ["" if v is None else str(v) for v in OUTCOMES[r["sample"]]]
        expect([r[f"label_{n}"] for n in LABELS] == want, f"{r['sample']}: labels {r} vs {want}")
    for f in range(3):
        val = cv["per_fold"][f]["validation"]
        aucs = []
        for n in LABELS:
            rows = [r for r in oof if int(r["fold"]) == f and r[f"label_{n}"] != ""]
            ref = sklearn.metrics.roc_auc_score([int(r[f"label_{n}"]) for r in rows],
                                                [float(r[f"prob_{n}"]) for r in rows])
            expect(abs(val[f"val_auc_{n}"] - ref) <= 1e-9, f"fold {f}: val_auc_{n} {val[f'val_auc_{n}']}, sklearn {ref}")
            aucs.append(ref)
        expect(abs(val["val_auc_mean"] - np.mean(aucs)) <= 1e-9, f"fold {f}: val_auc_mean {val['val_auc_mean']}")
    rows = [r for r in oof if r["label_KRAS"] != ""]
    auc = sklearn.metrics.roc_auc_score([int(r["label_KRAS"]) for r in rows], [float(r["prob_KRAS"]) for r in rows])
    expect(auc >= 0.7, f"out-of-fold KRAS AUC {auc:.3f} < 0.7")
    run_doc = json.load(open(os.path.join(out, "fold-0", "run.json")))
    expect(run_doc["task"] == {"kind": "multilabel", "loss": "bce", "labels": LABELS}, f"run.json task {run_doc['task']}")


def check_masked_loss():
    """The run's val_loss is the mean binary cross-entropy of the observed outcomes, as torch's
    binary_cross_entropy_with_logits of predictions.csv's probabilities gives it (to 1e-5)."""
    preds = csv_rows(tmp("cv", "fold-1", "predictions.csv"))
    terms = []
    for r in preds:
        for n in LABELS:
            if r[f"label_{n}"] == "":
                continue
            p = min(max(float(r[f"prob_{n}"]), 1e-12), 1 - 1e-12)
            y = int(r[f"label_{n}"])
            terms.append(-(y * math.log(p) + (1 - y) * math.log(1 - p)))
    got = json.load(open(tmp("cv", "fold-1", "run.json")))["result"]["validation"]["val_loss"]
    expect(abs(got - np.mean(terms)) <= 1e-5 * max(1.0, got), f"val_loss {got}, masked BCE {np.mean(terms)}")


def check_memory_modes_and_data_parallel():
    """--micro-batches 3 and --nproc 2 (bags), --sections 2 (tile mlp) end within 1e-5 of plain
    training's weights (SGD, one math thread)."""
    common = ["--fold", "1", "--epochs", "2", "--device", "cpu", "--math-threads", "1", "--optimizer", "sgd",
              "--lr", "0.05"]
    bags = [tmp("mds"), "--model", tmp("abmil.json"), "--batch", "16", *common]
    train_ok(*bags, "-o", tmp("run_plain"))
    train_ok(*bags, "--micro-batches", "3", "-o", tmp("run_mb3"))
    close(tmp("run_plain"), tmp("run_mb3"), "--micro-batches 3")
    train_ok(*bags, "--nproc", "2", "-o", tmp("run_dp2"))
    close(tmp("run_plain"), tmp("run_dp2"), "--nproc 2")
    tiles = [tmp("mds_tile"), "--model", tmp("mlp.json"), "--batch", "64", *common]
    train_ok(*tiles, "-o", tmp("run_tile_plain"))
    train_ok(*tiles, "--sections", "2", "-o", tmp("run_tile_sec2"))
    close(tmp("run_tile_plain"), tmp("run_tile_sec2"), "--sections 2")


def check_predict():
    """predict writes prob_L per label; a slide that is its patient's only slide gets the
    probabilities the run's predictions.csv gives its patient (the same bag)."""
    out = tmp("pred")
    code, _, err = run([mltool, "predict", tmp("cv", "fold-0"), tmp("features"), "-o", out, "--weights", "final",
                        "--device", "cpu", "-q"])
    expect(code == 0, f"predict: exit {code}: {err.strip()}")
    preds = csv_rows(os.path.join(out, "predictions.csv"))
    expect(list(preds[0]) == ["sample", "slide", *[f"prob_{n}" for n in LABELS]], f"columns {list(preds[0])}")
    by_slide = {r["slide"]: r for r in preds}
    slides_of = {}
    for r in preds:
        slides_of.setdefault(r["slide"][:4], []).append(r["slide"])
    trained = csv_rows(tmp("cv", "fold-0", "predictions.csv"))
    compared = 0
    for r in trained:
        if len(slides_of.get(r["sample"], [])) != 1:
            continue
        p = by_slide[slides_of[r["sample"]][0]]
        for n in LABELS:
            expect(abs(float(p[f"prob_{n}"]) - float(r[f"prob_{n}"])) <= 1e-5,
                   f"{r['sample']} prob_{n}: predict {p[f'prob_{n}']}, train {r[f'prob_{n}']}")
        compared += 1
    expect(compared > 0, "no single-slide patient to compare")
    code, _, err = run([mltool, "predict", tmp("cv", "fold-0"), tmp("features"), "-o", tmp("pred_bad"),
                        "--label", "EGFR", "--device", "cpu", "-q"])
    expect(code != 0 and "KRAS, BRAF, MSI" in err, f"--label EGFR: exit {code}: {err.strip()}")


def check_refusals():
    """A monitor or loss of another task."""
    for extra, message in ((["--monitor", "val_auc"], "is not a metric of multilabel"),
                           (["--loss", "cross_entropy"], "is a multilabel dataset")):
        code, _, err = train(tmp("mds"), "--model", tmp("abmil.json"), "--fold", "0", "-o", tmp("run_refused"),
                             *extra)
        expect(code == 1 and message in err, f"{extra}: exit {code}: {err.strip()}")


if __name__ == "__main__":
    run_checks("train multilabel", [check_pack, check_cross_validation, check_masked_loss,
                                    check_memory_modes_and_data_parallel, check_predict, check_refusals],
               only, fixtures)
